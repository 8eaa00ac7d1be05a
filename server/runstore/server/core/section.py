"""What every section of the runtime store is built on: the database it runs
transactions on, the wall clock for ``updated_at`` and purge times, and the
server's page caps. ``store.RuntimeStore`` is all the sections together."""

from __future__ import annotations

import time
from collections.abc import Callable

from runstore.server.core.model import Nanos
from runstore.server.core.paging import DEFAULT_PAGE_LIMITS, PageLimits
from runstore.server.core.ports import Database


class Section:
    """One section of the contract's methods over a ``Database``.

    Args:
        db: Runs the transactions.
        clock: Wall clock for ``updated_at`` (UTC nanoseconds).
        limits: Page caps.
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], Nanos] = time.time_ns,
        limits: PageLimits = DEFAULT_PAGE_LIMITS,
    ) -> None:
        self._db = db
        self._clock = clock
        self._limits = limits
