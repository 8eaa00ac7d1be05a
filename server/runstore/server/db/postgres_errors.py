"""What a PostgreSQL failure means to runstore: which SQLSTATEs are a lost
race worth running the transaction again, which leave the connection unfit
for the pool, and which contract error each becomes (D4, docs/failover.md)."""

from __future__ import annotations

import logging
from typing import ClassVar, Final

import asyncpg

from runstore.contract.errors import (
    AbortedError,
    InternalError,
    RunstoreError,
    UnavailableError,
    ValidationError,
)
from runstore.server.call_scope import NamespaceUnset

log = logging.getLogger("runstore.server.db.postgres")


class OutcomeUnknown(UnavailableError):
    """A write whose connection was lost while its COMMIT (or its one
    statement) was on the wire: it may or may not have happened, and the
    caller's exact retry settles which (docs/failover.md). Logged once where
    it was seen (``cause_logged``), not again per call."""

    cause_logged: ClassVar[bool] = True


_LOST_CONNECTION_SQLSTATES: Final = frozenset(
    {
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now
    }
)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection itself went away (closed, reset,
    or its server shut down), as opposed to a statement the server refused."""
    if isinstance(exc, asyncpg.PostgresError):
        return sqlstate_class(exc) == "08" or exc.sqlstate in _LOST_CONNECTION_SQLSTATES
    return isinstance(exc, OSError | ConnectionError | asyncpg.InterfaceError)


def outcome_unknown(exc: BaseException) -> OutcomeUnknown:
    log.warning(
        "a connection died during its commit; the outcome is unknown (an exact retry settles it):"
        " %s: %s",
        type(exc).__name__,
        exc,
    )
    return OutcomeUnknown("database connection lost during a commit; outcome unknown, retry")


_RETRYABLE_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "23505",  # unique_violation: a concurrent insert of the same new row won
    }
)


def refused_before_sending(exc: BaseException) -> bool:
    """Whether the driver refused a statement before writing any of it: a
    kill closed the connection (or released it from the pool), or left it
    mid-protocol (the server's goodbye arrived while it was idle). asyncpg
    raises InterfaceError for a statement only on such client-side checks."""
    if isinstance(exc, asyncpg.exceptions.ProtocolError):
        return False  # raised on reading a reply: the statement was sent
    if isinstance(exc, asyncpg.InternalClientError):
        return "cannot switch to state" in str(exc)
    return isinstance(exc, asyncpg.InterfaceError)


_REAPED: Final = frozenset({"57P01", "57P05", "08003"})
"""The server ended the connection: admin_shutdown (``pg_terminate_backend``,
a pooler), idle_session_timeout, or a connection closed mid-operation."""


def reaped(exc: BaseException) -> bool:
    """Whether a fast path's one statement met a connection the server had
    ended. Whatever became of the statement, the full rules that run next, on
    a fresh connection, answer as the command's exact retry would: the record
    once, under one ID."""
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in _REAPED


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in _RETRYABLE_SQLSTATES


_UNAVAILABLE_CLASSES: Final = frozenset(
    {
        "08",  # connection exception
        "53",  # insufficient resources (too many connections, disk full, out of memory)
        "55",  # object not in prerequisite state (database does not allow connections)
        "57",  # operator intervention (shutdown, statement timeout, cancel)
        "58",  # system error (I/O)
    }
)
_DATA_EXCEPTION_CLASS: Final = "22"
_BROKEN_CONNECTION_CLASSES: Final = frozenset({"08", "57", "58"})
_ON_A_STANDBY: Final = "25006"
"""read_only_sql_transaction: the connection reached a standby (a primary
demoted, or a URL without ``target_session_attrs``); nothing was written."""


def sqlstate_class(exc: BaseException) -> str:
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, asyncpg.PostgresError) else None
    return sqlstate[:2] if isinstance(sqlstate, str) else ""


def connection_survives(exc: BaseException) -> bool:
    """Whether a connection is still fit for the pool after ``exc``: only after
    a rule of the store or a clean error answered by the server. Anything else
    (a cut-off read, a timeout, a cancelled call, a client-side state error)
    may leave the protocol mid-message, so the connection is terminated."""
    if isinstance(exc, RunstoreError):
        return not isinstance(exc, OutcomeUnknown)
    return (
        isinstance(exc, asyncpg.PostgresError)
        and sqlstate_class(exc) not in _BROKEN_CONNECTION_CLASSES
        and exc.sqlstate != _ON_A_STANDBY
    )


def translate(exc: BaseException) -> BaseException:
    """Classifies by what failed (D4): contract errors pass through; a lost
    race after the retries is ABORTED; the server's connection, resource,
    state, operator and system errors are UNAVAILABLE; its data errors are the
    caller's; a failure of the connection itself is UNAVAILABLE; the rest is
    INTERNAL. Messages name no driver, SQLSTATE or address (they are logged)."""
    if isinstance(exc, RunstoreError | NamespaceUnset):  # NamespaceUnset: a bug, named
        return exc
    if is_retryable(exc):
        return AbortedError("transaction lost a race too often; retry")
    kind = sqlstate_class(exc)
    if kind in _UNAVAILABLE_CLASSES or getattr(exc, "sqlstate", None) == _ON_A_STANDBY:
        log.warning("postgres unavailable: %s: %s", getattr(exc, "sqlstate", ""), exc)
        return UnavailableError("database unavailable; retry")
    if kind == _DATA_EXCEPTION_CLASS:
        log.warning("postgres rejected a value: %s: %s", getattr(exc, "sqlstate", ""), exc)
        return ValidationError("a value in the request cannot be stored")
    if isinstance(exc, asyncpg.PostgresError):
        log.error("postgres error %s", getattr(exc, "sqlstate", ""), exc_info=exc)
        return InternalError("database error")
    if isinstance(
        exc,
        OSError
        | TimeoutError
        | ConnectionError
        | asyncpg.InterfaceError
        | asyncpg.InternalClientError,
    ):
        log.warning("postgres connection failed: %s: %s", type(exc).__name__, exc)
        return UnavailableError("database connection failed; retry")
    log.error("unexpected error in a transaction", exc_info=exc)
    return InternalError()


def unavailable(exc: BaseException) -> UnavailableError:
    translated = translate(exc)
    if isinstance(translated, UnavailableError):
        return translated
    return UnavailableError("database unavailable; retry")
