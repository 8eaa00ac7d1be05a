"""Record listings a caller allows to lag, served by the standby of
``--read-database-url`` (``db.lagging``).

Only the listings of records opt in, and only when the call carries
``x-runstore-read-lag: tolerated`` (``runstore.contract.metadata``): ``runstore
export`` sends it, a worker does not, so a worker keeps reading its own writes
(docs/failover.md). Without a read database the header changes nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Final

from runstore.contract.metadata import READ_LAG_KEY, READ_LAG_TOLERATED
from runstore.server.db.lagging import lagging_reads
from runstore.server.interceptors.handlers import Context, Handler, Steps, admits_nothing

OPTING_IN: Final = frozenset(
    {
        "/runstore.v1.RuntimeStore/ListRunRecords",
        "/runstore.v1.RuntimeStore/ListSessionRunRecords",
        "/runstore.v1.RuntimeStore/ListRunTranscriptRecords",
    }
)
"""The methods whose reads may go to the standby when the caller says so."""


def _tolerates_lag(context: Context) -> bool:
    return any(
        key == READ_LAG_KEY and value == READ_LAG_TOLERATED
        for key, value in context.invocation_metadata() or ()
    )


def _entered(request: Any, context: Context) -> AbstractContextManager[None] | None:
    """The call's ``lagging_reads`` block, entered, when the caller tolerates lag."""
    if not _tolerates_lag(context):
        return None
    block = lagging_reads()
    block.__enter__()
    return block


def _left(block: AbstractContextManager[None] | None, response: Any, context: Context) -> Any:
    if block is not None:
        block.__exit__(None, None, None)
    return response


def _failed(
    block: AbstractContextManager[None] | None, exc: BaseException, context: Context
) -> None:
    _left(block, None, context)


_STEPS = Steps(enter=_entered, after=_left, fail=_failed)


class ReadLag:
    """Steps for the record listings of ``OPTING_IN``; every other method is left alone."""

    admit = admits_nothing

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if method not in OPTING_IN or handler.unary_unary is None:
            return None
        return _STEPS
