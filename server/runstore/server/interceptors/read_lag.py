"""Record listings a caller allows to lag, served by the standby of
``--read-database-url`` (``call_scope.lagging_reads``).

Only the listings of records opt in, and only when the call carries
``x-runstore-read-lag: tolerated`` (``runstore.contract.metadata``): ``runstore
export`` sends it, a worker does not, so a worker keeps reading its own writes
(docs/failover.md). Without a read database the header changes nothing.
"""

from __future__ import annotations

from typing import Any, Final

from runstore.contract.metadata import READ_LAG_KEY, READ_LAG_TOLERATED
from runstore.server.call_scope import lagging_reads
from runstore.server.interceptors.handlers import Context, Handler, Unary, admits_nothing, wrapped

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


def _in_lagging_reads(behaviour: Unary) -> Unary:
    """``behaviour`` inside a ``lagging_reads`` block when the caller tolerates lag."""

    async def call(request: Any, context: Context) -> Any:
        if not _tolerates_lag(context):
            return await behaviour(request, context)
        with lagging_reads():
            return await behaviour(request, context)

    return call


class ReadLag:
    """A wrapper around the record listings of ``OPTING_IN`` (innermost, so
    it costs nothing to the rest of the chain); every other method is left alone."""

    admit = admits_nothing

    def wrap(self, method: str, handler: Handler) -> Handler:
        if method not in OPTING_IN or handler.unary_unary is None:
            return handler
        return wrapped(handler, unary=_in_lagging_reads)
