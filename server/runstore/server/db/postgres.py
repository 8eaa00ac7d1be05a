"""The shared backend: PostgreSQL through an asyncpg pool, many replicas at once.

Correctness comes from the database alone. Every write runs in one READ
COMMITTED transaction that locks the rows it depends on (``FOR UPDATE``), in
one order everywhere: a session before its runs, a parent run before its
child. Rows that do not exist yet cannot be locked, so two replicas may both
try to insert the same new session or run; the loser's unique violation rolls
its transaction back and the server runs the whole transaction again, which
then sees the winner's row (an exact retry or a conflict). Deadlocks and
serialisation failures are retried the same way, a bounded number of times;
after that the caller gets ABORTED. A lost connection is UNAVAILABLE: the
outcome of the interrupted commit is unknown, and the identical command is safe
to retry (§8).

Reads run in REPEATABLE READ READ ONLY transactions, one snapshot per call.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import asyncpg
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.engine import make_url

from runstore.contract.errors import AbortedError, InternalError, RunstoreError, UnavailableError
from runstore.server.config import DEFAULTS
from runstore.server.core.model import RecordDraft
from runstore.server.core.ports import Transaction
from runstore.server.db.statements import Compiled, Statements
from runstore.server.db.transaction import SqlTransaction
from runstore.server.metrics import DbFigures

log = logging.getLogger(__name__)

T = TypeVar("T")

_RETRYABLE_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "23505",  # unique_violation: a concurrent insert of the same new row won
    }
)


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """Pool and retry settings."""

    pool_min: int = DEFAULTS.pg_pool_min
    """Connections the pool keeps open."""
    pool_max: int = DEFAULTS.pg_pool_max
    """Connections the pool opens at most."""
    connect_timeout: float = DEFAULTS.pg_connect_timeout
    """Seconds to open a connection."""
    acquire_timeout: float = DEFAULTS.pg_acquire_timeout
    """Seconds a call waits for a free pooled connection before UNAVAILABLE."""
    statement_timeout: float = DEFAULTS.pg_statement_timeout
    """Seconds a statement may run before it is cancelled (UNAVAILABLE)."""
    transaction_attempts: int = 8
    """How often a write transaction runs before a race becomes ABORTED."""


def asyncpg_dsn(database_url: str) -> str:
    """A libpq-style DSN for asyncpg from any SQLAlchemy PostgreSQL URL."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class _PostgresTransaction(SqlTransaction):
    """Runs statements on one asyncpg connection inside a transaction."""

    row_locks = True

    def __init__(self, conn: asyncpg.Connection, statements: Statements) -> None:
        super().__init__(statements)
        self._conn = conn

    async def _one(self, statement: Compiled, **params: Any) -> Any:
        return await self._conn.fetchrow(statement.sql, *statement.args(params))

    async def _all(self, statement: Compiled, **params: Any) -> list[Any]:
        result: list[Any] = await self._conn.fetch(statement.sql, *statement.args(params))
        return result

    async def _run(self, statement: Compiled, **params: Any) -> None:
        await self._conn.execute(statement.sql, *statement.args(params))

    async def _one_unless_conflict(self, statement: Compiled, **params: Any) -> Any:
        try:
            return await self._one(statement, **params)
        except asyncpg.UniqueViolationError:
            return None

    async def _many(self, statement: Compiled, rows: list[dict[str, Any]]) -> None:
        await self._conn.executemany(statement.sql, [statement.args(row) for row in rows])


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in _RETRYABLE_SQLSTATES


def _translate(exc: BaseException) -> BaseException:
    """Contract errors pass through; database trouble is transient (D4)."""
    if isinstance(exc, RunstoreError):
        return exc
    if _is_retryable(exc):
        return AbortedError(f"transaction lost a race too often: {exc}")
    if isinstance(
        exc,
        OSError
        | TimeoutError
        | asyncpg.InterfaceError
        | asyncpg.PostgresConnectionError
        | asyncpg.CannotConnectNowError
        | asyncpg.QueryCanceledError
        | asyncpg.AdminShutdownError
        | asyncpg.TooManyConnectionsError,
    ):
        log.warning("postgres unavailable: %s: %s", type(exc).__name__, exc)
        return UnavailableError(f"database unavailable: {type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        log.error("postgres error", exc_info=exc)
        return InternalError(f"database error: {exc.sqlstate}")
    log.error("unexpected error in a transaction", exc_info=exc)
    return InternalError()


async def _reset(conn: asyncpg.Connection) -> None:
    """What a connection needs before it returns to the pool. runstore keeps no
    session state (no LISTEN, no advisory or prepared cursors), so unlike
    asyncpg's default this costs a round trip only after an interrupted
    transaction."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class PostgresDatabase:
    """``Database`` over a PostgreSQL pool; safe to share between replicas."""

    figures: DbFigures | None = None
    """Where retries and the pool's connections are recorded; None when metrics are off."""

    def __init__(self, database_url: str, options: PostgresOptions = PostgresOptions()) -> None:
        self.options = options
        self._dsn = asyncpg_dsn(database_url)
        self._statements = Statements.compile(asyncpg_dialect.dialect())  # type: ignore[no-untyped-call]
        self._pool: asyncpg.Pool | None = None

    async def start(self) -> None:
        options = self.options
        self._pool = await asyncpg.create_pool(
            self._dsn,
            min_size=min(options.pool_min, options.pool_max),
            max_size=options.pool_max,
            timeout=options.connect_timeout,
            # Enforced by PostgreSQL itself rather than a client-side timer per query.
            server_settings={
                "application_name": "runstore",
                "statement_timeout": str(int(options.statement_timeout * 1000)),
            },
            reset=_reset,
        )
        if self.figures is not None:
            pool = self._pool
            self.figures.watch_pool(
                pool.get_idle_size, lambda: pool.get_size() - pool.get_idle_size()
            )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _acquire(self, pool: asyncpg.Pool) -> Any:
        """A pooled connection; the acquire timeout (a timer per call) is paid
        only when no connection is idle."""
        if pool.get_idle_size() > 0:
            return pool.acquire()
        return pool.acquire(timeout=self.options.acquire_timeout)

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise UnavailableError("database is not open")
        return self._pool

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        """One statement, atomic by itself: no BEGIN/COMMIT round trips."""
        pool = self._require_pool()
        try:
            async with self._acquire(pool) as conn:
                return await _PostgresTransaction(conn, self._statements).append_if_writable(record)
        except Exception as exc:
            raise _translate(exc) from exc

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        pool = self._require_pool()
        attempts = max(1, self.options.transaction_attempts)
        for attempt in range(1, attempts + 1):
            try:
                async with (
                    self._acquire(pool) as conn,
                    conn.transaction(),
                ):
                    return await fn(_PostgresTransaction(conn, self._statements))
            except Exception as exc:
                if not _is_retryable(exc) or attempt == attempts:
                    raise _translate(exc) from exc
                log.debug("retrying a transaction (attempt %d): %s", attempt, exc)
                if self.figures is not None:
                    self.figures.retried()
                await asyncio.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise AssertionError("unreachable")

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        pool = self._require_pool()
        try:
            async with (
                self._acquire(pool) as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await fn(_PostgresTransaction(conn, self._statements))
        except Exception as exc:
            raise _translate(exc) from exc
