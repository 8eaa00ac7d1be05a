"""The calls whose reads the standby of ``--read-database-url`` may serve
(``call_scope.lagging_reads``; docs/failover.md): the one home of that
decision for gRPC.

Each method declares it (``method_rules``, ``standby_reads``): the operator's
listings always may (``ALWAYS``); the listings of records may when the call
carries ``x-runstore-read-lag: tolerated`` (``runstore.contract.metadata``):
``runstore export`` sends it, a worker does not, so a worker keeps reading its
own writes. Every other method never does. Without a read database nothing
changes (the concern is not in the chain).
"""

from __future__ import annotations

from typing import Any, Final

from runstore.contract.metadata import READ_LAG_KEY, READ_LAG_TOLERATED
from runstore.server.call_scope import lagging_reads
from runstore.server.interceptors.handlers import Context, Handler, Unary, admits_nothing, wrapped
from runstore.server.method_rules import ALWAYS, DECLARED, WHEN_TOLERATED

OPTING_IN: Final = frozenset(
    method for method, declared in DECLARED.items() if declared.standby_reads == WHEN_TOLERATED
)
"""The methods whose reads may go to the standby when the caller says so."""

ALWAYS_LAGGING: Final = frozenset(
    method for method, declared in DECLARED.items() if declared.standby_reads == ALWAYS
)
"""The methods whose reads may always go to the standby (an operator's listings)."""


def _tolerates_lag(context: Context) -> bool:
    return any(
        key == READ_LAG_KEY and value == READ_LAG_TOLERATED
        for key, value in context.invocation_metadata() or ()
    )


def _when_tolerated(behaviour: Unary) -> Unary:
    """``behaviour`` inside a ``lagging_reads`` block when the caller tolerates lag."""

    async def call(request: Any, context: Context) -> Any:
        if not _tolerates_lag(context):
            return await behaviour(request, context)
        with lagging_reads():
            return await behaviour(request, context)

    return call


def _always(behaviour: Unary) -> Unary:
    """``behaviour`` inside a ``lagging_reads`` block."""

    async def call(request: Any, context: Context) -> Any:
        with lagging_reads():
            return await behaviour(request, context)

    return call


class ReadLag:
    """A wrapper around the unary methods of ``OPTING_IN`` and
    ``ALWAYS_LAGGING`` (innermost, so it costs the rest of the chain nothing);
    every other method is left alone."""

    admit = admits_nothing

    def wrap(self, method: str, handler: Handler) -> Handler:
        if handler.unary_unary is None:
            return handler
        if method in ALWAYS_LAGGING:
            return wrapped(handler, unary=_always)
        if method in OPTING_IN:
            return wrapped(handler, unary=_when_tolerated)
        return handler
