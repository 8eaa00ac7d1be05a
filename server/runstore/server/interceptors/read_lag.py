"""The calls whose reads the standby of ``--read-database-url`` may serve
(``db.lagging``; docs/failover.md): the one home of that decision for gRPC.

Each method declares it (``method_rules``, ``standby_reads``): the operator's
listings always may (``ALWAYS``); the listings of records may when the call
carries ``x-runstore-read-lag: tolerated`` (``runstore.contract.metadata``):
``runstore export`` sends it, a worker does not, so a worker keeps reading its
own writes. Every other method never does. Without a read database nothing
changes (the concern is not in the chain).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Final

from runstore.contract.metadata import READ_LAG_KEY, READ_LAG_TOLERATED
from runstore.server.db.lagging import lagging_reads
from runstore.server.interceptors.handlers import Context, Handler, Steps, admits_nothing
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


def _entered(request: Any, context: Context) -> AbstractContextManager[None] | None:
    """The call's ``lagging_reads`` block, entered, when the caller tolerates lag."""
    if not _tolerates_lag(context):
        return None
    block = lagging_reads()
    block.__enter__()
    return block


def _always(request: Any, context: Context) -> AbstractContextManager[None]:
    """The call's ``lagging_reads`` block, entered."""
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


_WHEN_TOLERATED = Steps(enter=_entered, after=_left, fail=_failed)
_ALWAYS = Steps(enter=_always, after=_left, fail=_failed)


class ReadLag:
    """Steps for the unary methods of ``OPTING_IN`` and ``ALWAYS_LAGGING``;
    every other method is left alone."""

    admit = admits_nothing

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if handler.unary_unary is None:
            return None
        if method in ALWAYS_LAGGING:
            return _ALWAYS
        if method in OPTING_IN:
            return _WHEN_TOLERATED
        return None
