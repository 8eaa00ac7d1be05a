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
from runstore.server.core.model import Nanos, Record, Run, RunChange, Session, StoredRecord
from runstore.server.core.ports import PURGED, SessionLookup, Transaction
from runstore.server.db import statements as sql
from runstore.server.db.statements import Compiled, Statements

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

    pool_min: int = 2
    """Connections the pool keeps open."""
    pool_max: int = 16
    """Connections the pool opens at most."""
    connect_timeout: float = 10.0
    """Seconds to open a connection."""
    acquire_timeout: float = 10.0
    """Seconds a call waits for a free pooled connection before UNAVAILABLE."""
    statement_timeout: float = 30.0
    """Seconds a statement may run before it is cancelled (UNAVAILABLE)."""
    transaction_attempts: int = 8
    """How often a write transaction runs before a race becomes ABORTED."""


def asyncpg_dsn(database_url: str) -> str:
    """A libpq-style DSN for asyncpg from any SQLAlchemy PostgreSQL URL."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class _PostgresTransaction(Transaction):
    """``Transaction`` over one asyncpg connection inside a transaction."""

    def __init__(self, conn: asyncpg.Connection, statements: Statements) -> None:
        self._conn = conn
        self._sql = statements

    async def _one(self, statement: Compiled, **params: Any) -> Any:
        return await self._conn.fetchrow(statement.sql, *statement.args(params))

    async def _all(self, statement: Compiled, **params: Any) -> list[Any]:
        result: list[Any] = await self._conn.fetch(statement.sql, *statement.args(params))
        return result

    async def _run(self, statement: Compiled, **params: Any) -> None:
        await self._conn.execute(statement.sql, *statement.args(params))

    async def session(self, session_id: str, *, for_update: bool = False) -> SessionLookup:
        statement = self._sql.session_for_update if for_update else self._sql.session
        row = await self._one(statement, session_id=session_id)
        if row is not None:
            return sql.session_from_row(row)
        if await self._one(self._sql.is_tombstoned, session_id=session_id) is not None:
            return PURGED
        return None

    async def run(self, run_id: str, *, for_update: bool = False) -> Run | None:
        if for_update:
            # Lock order: the run's session first (a no-op for sessionless runs).
            await self._run(self._sql.session_of_run_for_update, run_id=run_id)
            row = await self._one(self._sql.run_for_update, run_id=run_id)
        else:
            row = await self._one(self._sql.run, run_id=run_id)
        return sql.run_from_row(row) if row is not None else None

    async def record_by_key(self, run_id: str, event_key: str) -> StoredRecord | None:
        row = await self._one(self._sql.record_by_key, run_id=run_id, event_key=event_key)
        return sql.record_from_row(row) if row is not None else None

    async def record_by_id(self, run_id: str, record_id: int) -> StoredRecord | None:
        row = await self._one(self._sql.record_by_id, run_id=run_id, record_id=record_id)
        return sql.record_from_row(row) if row is not None else None

    async def run_records(
        self, run_id: str, after: int, limit: int, max_bytes: int
    ) -> list[StoredRecord]:
        rows = await self._all(
            self._sql.run_records, run_id=run_id, after=after, limit=limit, max_bytes=max_bytes
        )
        return [sql.record_from_row(row) for row in rows]

    async def session_records(
        self, session_id: str, after: int, limit: int, max_bytes: int
    ) -> list[tuple[int, StoredRecord]]:
        rows = await self._all(
            self._sql.session_records,
            session_id=session_id,
            after=after,
            limit=limit,
            max_bytes=max_bytes,
        )
        return [(row[0], sql.record_from_row(row[1:])) for row in rows]

    async def transcript_records(
        self, run_id: str, after: int, through: int, limit: int, max_bytes: int
    ) -> list[StoredRecord]:
        rows = await self._all(
            self._sql.transcript_records,
            run_id=run_id,
            after=after,
            through=through,
            limit=limit,
            max_bytes=max_bytes,
        )
        return [sql.record_from_row(row) for row in rows]

    async def runs_by_session(self, session_id: str) -> list[Run]:
        rows = await self._all(self._sql.runs_by_session, session_id=session_id)
        return [sql.run_from_row(row) for row in rows]

    async def session_has_running_runs(self, session_id: str) -> bool:
        row = await self._one(self._sql.session_has_running_runs, session_id=session_id)
        return bool(row[0])

    async def insert_session(self, session: Session) -> None:
        await self._run(
            self._sql.insert_session,
            session_id=session.id,
            status=session.status.value,
            created_at=session.created_at,
        )

    async def end_session(self, session_id: str, ended_at: Nanos) -> None:
        await self._run(self._sql.end_session, session_id=session_id, ended_at=ended_at)

    async def purge_session(self, session_id: str, purged_at: Nanos) -> None:
        await self._run(self._sql.purge_records, session_id=session_id)
        await self._run(self._sql.purge_runs, session_id=session_id)
        await self._run(self._sql.purge_session, session_id=session_id)
        await self._run(self._sql.insert_tombstone, session_id=session_id, purged_at=purged_at)

    async def insert_run(self, run: Run) -> None:
        await self._run(self._sql.insert_run, **sql.run_params(run))

    async def change_run(self, run_id: str, change: RunChange) -> None:
        await self._run(self._sql.change_run, **sql.change_params(run_id, change))

    async def append_record(self, record: Record) -> int:
        record_id = (await self._one(self._sql.next_record_id, run_id=record.run_id))[0]
        position = None
        if record.session_id:
            row = await self._one(self._sql.next_session_position, session_id=record.session_id)
            position = row[0]
        await self._run(self._sql.insert_record, **sql.record_params(record, record_id, position))
        return int(record_id)


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


class PostgresDatabase:
    """``Database`` over a PostgreSQL pool; safe to share between replicas."""

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
            command_timeout=options.statement_timeout,
            server_settings={"application_name": "runstore"},
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise UnavailableError("database is not open")
        return self._pool

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        pool = self._require_pool()
        attempts = max(1, self.options.transaction_attempts)
        for attempt in range(1, attempts + 1):
            try:
                async with (
                    pool.acquire(timeout=self.options.acquire_timeout) as conn,
                    conn.transaction(),
                ):
                    return await fn(_PostgresTransaction(conn, self._statements))
            except Exception as exc:
                if not _is_retryable(exc) or attempt == attempts:
                    raise _translate(exc) from exc
                log.debug("retrying a transaction (attempt %d): %s", attempt, exc)
                await asyncio.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise AssertionError("unreachable")

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        pool = self._require_pool()
        try:
            async with (
                pool.acquire(timeout=self.options.acquire_timeout) as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await fn(_PostgresTransaction(conn, self._statements))
        except Exception as exc:
            raise _translate(exc) from exc
