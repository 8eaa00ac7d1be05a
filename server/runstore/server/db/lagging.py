"""Reads that may lag behind the primary.

Code that can live with a result a little behind the last commits (an
operator's listing, an export, a console page) runs its reads inside
``lagging_reads()``. With ``--read-database-url`` those reads go to a standby;
without one, or on SQLite, nothing changes. A worker's reads never do: the
contract promises that a worker reads its own writes (docs/failover.md).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Final

_TOLERATED: Final = contextvars.ContextVar("runstore_lagging_reads", default=False)


@contextlib.contextmanager
def lagging_reads() -> Iterator[None]:
    """The reads awaited inside this block may be served by a standby."""
    token = _TOLERATED.set(True)
    try:
        yield
    finally:
        _TOLERATED.reset(token)


def tolerated() -> bool:
    """Whether the read being made now may lag."""
    return _TOLERATED.get()
