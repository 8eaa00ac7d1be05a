"""The runtime store contract, written once over any ``Database`` (§4–§11).

``RuntimeStore`` is the contract's sections together, one module each:
``sessions`` (§9.1), ``starts`` (§9.2), ``appends`` (§9.3),
``lifecycle_changes`` (§9.4, §9.5), ``reads`` (§9.6), ``listing`` (§9.8),
``watch_cursors`` (§9.9), ``retention_purges`` (§9.10), ``seeds`` (§9.7) and
``synchronous_starts`` (§9.2.5). Product memory and
contexts are ``memory`` and ``context``.

Each public method is one contract method. It runs the pure validation of
``validation`` first (nothing is written when a command is malformed), then one
transaction in which every check observes the same state as the writes (§7).
Check order follows the contract: the first failing check decides the error.

Lock order, for backends with row locks: a session before its runs, a parent
run before its child. ``Transaction.run(..., for_update=True)`` locks the run's
session first, so every writer acquires locks in the same order.
"""

from __future__ import annotations

from runstore.server.core.appends import Appends
from runstore.server.core.lifecycle_changes import LifecycleChanges
from runstore.server.core.listing import Listings
from runstore.server.core.paging import PageLimits
from runstore.server.core.reads import Reads
from runstore.server.core.retention_purges import RetentionPurges
from runstore.server.core.seeds import Seeds
from runstore.server.core.sessions import Sessions
from runstore.server.core.starts import Starts
from runstore.server.core.synchronous_starts import SynchronousStarts
from runstore.server.core.watch_cursors import WatchCursors

__all__ = ["PageLimits", "RuntimeStore"]


class RuntimeStore(
    Sessions,
    SynchronousStarts,
    Starts,
    Appends,
    LifecycleChanges,
    Reads,
    Listings,
    WatchCursors,
    RetentionPurges,
    Seeds,
):
    """The contract's rules over a ``Database``: every section's methods.

    Args:
        db: Runs the transactions.
        clock: Wall clock for ``updated_at`` (UTC nanoseconds).
        limits: Page caps.
    """
