"""The database operation bound: how long one call may spend on the database.

Every call's database work (waiting in a queue, connecting, acquiring a pooled
connection, running its transactions and retries) ends within one bound that
starts when the call starts, so a hung or unreachable database costs a caller
at most that long, answered with UNAVAILABLE (reason TRANSIENT), whatever the
caller's own deadline. The interceptor ``interceptors.db_bound`` marks when
each call started; work outside a call (the health probe, tests using a
backend directly) gets the bound per operation.
"""

from __future__ import annotations

import asyncio
import contextvars

from runstore.contract.errors import UnavailableError

_call_started: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "runstore_call_started", default=None
)


def mark_call_start() -> contextvars.Token[float | None]:
    """Records that the current call starts now (loop time)."""
    return _call_started.set(asyncio.get_running_loop().time())


def end_call(token: contextvars.Token[float | None]) -> None:
    _call_started.reset(token)


def deadline(bound: float) -> float:
    """The loop time by which the current call's database work must end."""
    now = asyncio.get_running_loop().time()
    started = _call_started.get()
    return (now if started is None else started) + bound


def timed_out(bound: float) -> UnavailableError:
    """The error of a call whose database work did not end within the bound."""
    return UnavailableError(f"the database did not answer within {bound:g} s; retry")


def remaining(until: float, bound: float) -> float:
    """Seconds left before ``until``; raises the timeout error when none are."""
    left = until - asyncio.get_running_loop().time()
    if left <= 0:
        raise timed_out(bound)
    return left
