"""Record listings a caller allows to lag, served by the standby of
``--read-database-url`` (``db.lagging``).

Only the listings of records opt in, and only when the call carries
``x-runstore-read-lag: tolerated`` (``runstore.contract.metadata``): ``runstore
export`` sends it, a worker does not, so a worker keeps reading its own writes
(docs/failover.md). Without a read database the header changes nothing.
"""

from __future__ import annotations

from typing import Any, Final

import grpc

from runstore.contract.metadata import READ_LAG_KEY, READ_LAG_TOLERATED
from runstore.server.db.lagging import lagging_reads
from runstore.server.interceptors.handlers import Context, Handler, Unary, wrapped

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


def _maybe_lagging(behaviour: Unary) -> Unary:
    async def call(request: Any, context: Context) -> Any:
        if not _tolerates_lag(context):
            return await behaviour(request, context)
        with lagging_reads():
            return await behaviour(request, context)

    return call


class ReadLag:
    """Wraps the record listings of ``OPTING_IN``; every other method is left alone."""

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        pass

    def wrap(self, method: str, handler: Handler) -> Handler:
        if method not in OPTING_IN or handler.unary_unary is None:
            return handler
        return wrapped(handler, unary=_maybe_lagging)
