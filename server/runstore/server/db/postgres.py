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
to retry (§8). So is a database that does not answer within the operation
bound (``db.bound``).

Reads run in REPEATABLE READ READ ONLY transactions, one snapshot per call.
What a failure means is ``postgres_errors``'; the standby's reads are
``read_replica``'s. Each transaction acts on the scope (``call_scope``) of the
call that began it, read before a connection is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import asyncpg
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect

from runstore.contract.errors import (
    RunstoreError,
    UnavailableError,
)
from runstore.server import call_scope
from runstore.server.backoff import Backoff
from runstore.server.call_scope import Scope
from runstore.server.config import DEFAULTS
from runstore.server.core.model import GuardedChange, RecordDraft, RunEnding, RunState
from runstore.server.core.ports import Transaction
from runstore.server.db import bound
from runstore.server.db.append_groups import (
    GROUP_APPEND,
    AppendGroups,
    Outcome,
    group_arguments,
    group_results,
)
from runstore.server.db.compiled import Compiled
from runstore.server.db.connect_pacing import ConnectPacing as ConnectPacing  # tests use it here
from runstore.server.db.connect_pacing import (
    PoolFloorWarnings,
    RefusedWhileDown,
    close_connection,
)
from runstore.server.db.postgres_errors import connection_lost as _connection_lost
from runstore.server.db.postgres_errors import connection_survives as _connection_survives
from runstore.server.db.postgres_errors import is_retryable as _is_retryable
from runstore.server.db.postgres_errors import outcome_unknown as _outcome_unknown
from runstore.server.db.postgres_errors import reaped as _reaped
from runstore.server.db.postgres_errors import refused_before_sending as _refused_before_sending
from runstore.server.db.postgres_errors import translate as _translate
from runstore.server.db.postgres_errors import unavailable as _unavailable
from runstore.server.db.read_replica import ReadReplica
from runstore.server.db.statements import Statements
from runstore.server.db.transaction import SqlTransaction
from runstore.server.db.urls import asyncpg_dsn as asyncpg_dsn  # tests and tools use it here
from runstore.server.db.wakeups import (
    LISTENER_APPLICATION,
    NOTIFIER_APPLICATION,
    PostgresWakeups,
)
from runstore.server.metrics import DbFigures

log = logging.getLogger(__name__)

RETRY_BACKOFF = Backoff(0.002, 1.0, jitter=1.0)
"""The pause before a transaction that lost a race runs again: anywhere up to
2 ms times 2 per attempt, so the racers do not meet again."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """Pool and retry settings."""

    pool_min: int = DEFAULTS.pg_pool_min
    """Connections the pool keeps open."""
    pool_max: int = DEFAULTS.pg_pool_max
    """Connections the pool opens at most."""
    connect_timeout: float = DEFAULTS.pg_connect_timeout
    """Seconds to open a connection (and never more than the operation bound)."""
    acquire_timeout: float = DEFAULTS.pg_acquire_timeout
    """Seconds a call waits for a free pooled connection before UNAVAILABLE
    (and never more than what is left of the operation bound)."""
    statement_timeout: float = DEFAULTS.pg_statement_timeout
    """Seconds a statement may run on the server before PostgreSQL cancels it."""
    operation_timeout: float = DEFAULTS.db_operation_timeout
    """Seconds one call's database work may take in all (``db.bound``)."""
    transaction_attempts: int = 8
    """How often a write transaction runs before a race becomes ABORTED."""
    reconnect_pause_max: float = DEFAULTS.pg_reconnect_pause_max
    """Longest pause between attempts to reach a database that refuses
    connections (``ConnectPacing``)."""
    lag_probe_interval: float = 1.0
    """Seconds between readings of the read replica's lag (with metrics on)."""


class _PostgresTransaction(SqlTransaction):
    """Runs statements on one asyncpg connection inside a transaction."""

    row_locks = True
    writes_in_one_statement = True

    def __init__(self, conn: asyncpg.Connection, statements: Statements, scope: Scope) -> None:
        super().__init__(statements, scope)
        self._conn = conn

    async def _one(self, statement: Compiled, **params: Any) -> Any:
        return await self._conn.fetchrow(
            statement.sql, *statement.args(self._scoped(statement, params))
        )

    async def _all(self, statement: Compiled, **params: Any) -> list[Any]:
        result: list[Any] = await self._conn.fetch(
            statement.sql, *statement.args(self._scoped(statement, params))
        )
        return result

    async def _run(self, statement: Compiled, **params: Any) -> None:
        await self._conn.execute(statement.sql, *statement.args(self._scoped(statement, params)))

    async def _one_unless_conflict(self, statement: Compiled, **params: Any) -> Any:
        try:
            return await self._one(statement, **params)
        except asyncpg.UniqueViolationError:
            return None

    async def _all_unless_conflict(self, statement: Compiled, **params: Any) -> list[Any]:
        try:
            return await self._all(statement, **params)
        except asyncpg.UniqueViolationError:
            return []

    async def _many(self, statement: Compiled, rows: list[dict[str, Any]]) -> None:
        namespace = self._scoped(statement, {})
        await self._conn.executemany(
            statement.sql, [statement.args({**row, **namespace}) for row in rows]
        )

    async def append_group(
        self, batches: Sequence[Sequence[RecordDraft]]
    ) -> list[list[int] | None]:
        """``append_groups.GROUP_APPEND`` for ``batches`` (not a port method)."""
        rows = await self._conn.fetch(GROUP_APPEND, *group_arguments(batches))
        return group_results(self, batches, rows)


async def _reset(conn: asyncpg.Connection) -> None:
    """What a connection needs before it returns to the pool. runstore keeps no
    session state (no LISTEN, no advisory or prepared cursors), and a
    connection comes back only after a clean commit or rollback, so unlike
    asyncpg's default this costs no round trip."""


_READ_ONLY_SNAPSHOT: Final = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

RETENTION_LOCK_KEY: Final = 0x72657461696E6564  # "retained"
"""The advisory lock key of retention passes (migrations use another)."""


class PostgresDatabase:
    """``Database`` over a PostgreSQL pool; safe to share between replicas.

    Every call's work is bounded (``db.bound``): acquiring a connection waits
    at most the acquire timeout and what is left of the bound; once acquired,
    a timer terminates the connection when the bound passes, so a frozen
    server costs the caller the bound and nothing hangs on a cancel request
    the server would never answer. A connection whose operation was
    interrupted (timer, cancelled call, lost socket) is terminated, never
    returned to the pool.
    """

    figures: DbFigures | None = None
    """Where retries and the pool's connections are recorded; None when metrics are off."""

    def __init__(
        self,
        database_url: str,
        options: PostgresOptions = PostgresOptions(),
        *,
        read_url: str | None = None,
    ) -> None:
        self.options = options
        self._dsn = asyncpg_dsn(database_url)
        self._replica = (
            ReadReplica(
                asyncpg_dsn(read_url, writer=False),
                pool_max=options.pool_max,
                connect_timeout=options.connect_timeout,
                operation_timeout=options.operation_timeout,
                reconnect_pause_max=options.reconnect_pause_max,
                lag_probe_interval=options.lag_probe_interval,
                server_settings=self._server_settings(),
                reset=_reset,
            )
            if read_url
            else None
        )
        """Where reads inside ``call_scope.lagging_reads()`` go (a standby), if
        anywhere but the primary."""
        self._statements = Statements.compile(asyncpg_dialect.dialect())  # type: ignore[no-untyped-call]
        self._pool: asyncpg.Pool | None = None
        self._pacing = ConnectPacing(longest_pause=options.reconnect_pause_max)
        self._floor_warnings = PoolFloorWarnings(self._pacing)
        """Every connection to the primary opens through it: the pool's, the
        health probe's, LISTEN's and the retention lock's."""
        self._probe: asyncpg.Connection | None = None
        self._wakeups: PostgresWakeups | None = None
        self.append_groups = AppendGroups(self._append_group)
        """The common-case appends, sent in groups (``append_groups``)."""

    def _server_settings(self) -> dict[str, str]:
        return {
            "application_name": "runstore",
            # Enforced by PostgreSQL itself: frees the locks of work runstore gave up on.
            "statement_timeout": str(int(self.options.statement_timeout * 1000)),
        }

    @property
    def wakeups(self) -> PostgresWakeups:
        """Watchers' wake-ups: this replica's at commit, every replica's by NOTIFY."""
        if self._wakeups is None:
            raise UnavailableError("database is not open")
        return self._wakeups

    async def _listen_connection(self) -> asyncpg.Connection:
        return await self._pacing.connect(
            self._dsn,
            timeout=self.options.connect_timeout,
            server_settings={"application_name": LISTENER_APPLICATION},
        )

    async def _notify_connection(self) -> asyncpg.Connection:
        """The wake-ups' NOTIFY connection: one per replica, outside the calls' pool."""
        return await self._pacing.connect(
            self._dsn,
            timeout=self.options.connect_timeout,
            server_settings={
                "application_name": NOTIFIER_APPLICATION,
                "statement_timeout": str(int(self.options.statement_timeout * 1000)),
            },
        )

    @contextlib.asynccontextmanager
    async def retention_lock(self) -> AsyncIterator[bool]:
        """Whether this replica may run a retention pass now: one replica at a
        time holds a session advisory lock on a connection of its own for the
        whole pass (the pass's transactions use the pool). Another replica's
        pass is not waited for: True or False at once. The lock ends with the
        connection, so a replica that dies mid-pass frees it."""
        conn = await self._pacing.connect(
            self._dsn,
            timeout=self.options.connect_timeout,
            server_settings={"application_name": "runstore-retention"},
        )
        try:
            held = await conn.fetchval("SELECT pg_try_advisory_lock($1)", RETENTION_LOCK_KEY)
            yield bool(held)
        finally:
            await close_connection(conn, self.options.operation_timeout)

    def _committed(self, tx: SqlTransaction) -> None:
        if tx.touched and self._wakeups is not None:
            self._wakeups.committed(tx.touched)

    async def start(self) -> None:
        options = self.options
        logging.getLogger("asyncpg.pool").addFilter(self._floor_warnings)
        self._pool = await asyncpg.create_pool(
            self._dsn,
            connect=self._pacing.connect,
            min_size=min(options.pool_min, options.pool_max),
            max_size=options.pool_max,
            timeout=min(options.connect_timeout, options.operation_timeout),
            server_settings=self._server_settings(),
            reset=_reset,
        )
        self._wakeups = PostgresWakeups(
            self._listen_connection,
            self._notify_connection,
            timeout=options.operation_timeout,
        )
        self._wakeups.start()
        if self.figures is not None:
            pool = self._pool
            self.figures.watch_pool(
                pool.get_idle_size, lambda: pool.get_size() - pool.get_idle_size()
            )
        if self._replica is not None:
            await self._replica.start(self.figures)

    async def close(self) -> None:
        if self._replica is not None:
            await self._replica.close()
        if self._probe is not None:
            self._probe.terminate()
            self._probe = None
        await self.append_groups.close()
        if self._wakeups is not None:
            await self._wakeups.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), self.options.operation_timeout)
            except TimeoutError:
                pool.terminate()
        logging.getLogger("asyncpg.pool").removeFilter(self._floor_warnings)

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def ping(self, within: float) -> None:
        """Raises unless the database answers a trivial query within
        ``within`` seconds, on a connection of its own (a busy pool is not
        a down database)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within
        self._require_pool()
        try:
            if self._probe is None or self._probe.is_closed():
                self._probe = None
                probe = await self._pacing.connect(
                    self._dsn, timeout=within, server_settings=self._server_settings()
                )
                if self._pool is None:  # closed while connecting: nothing may stay open
                    probe.terminate()
                    raise UnavailableError("database is not open")
                self._probe = probe
            probe = self._probe
            timer = loop.call_at(until, probe.terminate)
            try:
                await probe.fetchval("SELECT 1")
            finally:
                timer.cancel()
        except BaseException:
            if self._probe is not None:
                self._probe.terminate()
                self._probe = None
            raise

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise UnavailableError("database is not open")
        return self._pool

    async def _acquire(self, pool: asyncpg.Pool, until: float) -> Any:
        """A pooled connection, or UNAVAILABLE: any failure while acquiring or
        connecting is the database's. The acquire timeout (a timer per call)
        is paid only when no connection is idle."""
        left = bound.remaining(until, self.options.operation_timeout)
        try:
            if pool.get_idle_size() > 0:
                return await pool.acquire()
            return await pool.acquire(timeout=min(self.options.acquire_timeout, left))
        except RunstoreError:
            raise
        except TimeoutError as exc:
            log.warning("no postgres connection within the timeout")
            raise UnavailableError("no database connection available; retry") from exc
        except Exception as exc:
            if self._pacing.refusing:  # said once, when it began (ConnectPacing)
                raise RefusedWhileDown("database connection failed; retry") from exc
            log.warning("postgres connect failed: %s: %s", type(exc).__name__, exc)
            raise _unavailable(exc) from exc

    async def _on_connection(
        self,
        fn: Callable[[Transaction], Coroutine[Any, Any, T]],
        begin: str | None,
        until: float,
        scope: Scope,
        pool: asyncpg.Pool | None = None,
    ) -> T:
        """One operation on one pooled connection (of the primary's pool unless
        ``pool`` says otherwise), inside ``begin`` ... COMMIT (or a single
        statement when ``begin`` is None), over before ``until``, acting on
        ``scope`` (``call_scope``)."""
        pool = pool or self._require_pool()
        conn = await self._acquire(pool, until)
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            _terminate(conn)

        loop = asyncio.get_running_loop()
        timer = loop.call_at(until, expire)
        survives = False
        try:
            if begin is None:
                result = await _single_statement(conn, fn, self._statements, scope, self._committed)
            else:
                result = await _in_transaction(
                    conn, begin, fn, self._statements, scope, self._committed
                )
            survives = True
            return result
        except BaseException as exc:
            survives = not expired and _connection_survives(exc)
            if expired:
                raise bound.timed_out(self.options.operation_timeout) from exc
            raise
        finally:
            timer.cancel()
            if not survives:
                _terminate(conn)
            await pool.release(conn)

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        """One statement, atomic by itself, shared with the appends that
        arrive meanwhile (``append_groups``)."""
        ids = await self.append_groups.append((record,))
        return ids[0] if ids is not None else None

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        """One statement, atomic by itself (``fast_path_sql._start_if_new``)."""
        return await self._one_statement(lambda tx: tx.start_if_new(run, started))

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        """One statement, atomic by itself (``fast_path_sql._start_child_if_new``)."""
        return await self._one_statement(lambda tx: tx.start_child_if_new(run, link, started))

    async def end_if_running(self, ending: RunEnding) -> int | None:
        """One statement, atomic by itself (``fast_path_sql._end_if_running``)."""
        return await self._one_statement(lambda tx: tx.end_if_running(ending))

    async def change_if_running(self, change: GuardedChange) -> int | None:
        """One statement, atomic by itself (``fast_path_sql._change_if_running``)."""
        return await self._one_statement(lambda tx: tx.change_if_running(change))

    async def _one_statement(
        self, write: Callable[[_PostgresTransaction], Coroutine[Any, Any, T | None]]
    ) -> T | None:
        """A fast path's one statement on its own connection, without a
        transaction: one round trip. None when it wrote nothing, or when the
        connection was dead before anything was sent."""

        async def fn(tx: Transaction) -> T | None:
            assert isinstance(tx, _PostgresTransaction)
            return await write(tx)

        scope = call_scope.scope()
        until = bound.deadline(self.options.operation_timeout)
        try:
            return await self._on_connection(fn, None, until, scope)
        except _StaleConnection:
            return None  # nothing was sent: the full rules run on a fresh connection
        except Exception as exc:
            raise _translate(exc) from exc

    async def append_records_if_writable(self, batch: Sequence[RecordDraft]) -> list[int] | None:
        """In a group, like ``append_if_writable``."""
        return await self.append_groups.append(batch)

    async def _append_group(self, batches: list[Sequence[RecordDraft]]) -> list[Outcome]:
        """One group (``append_groups``) in one statement: one round trip, one
        commit. Every request is None (its caller runs the full rules) when the
        connection was dead before anything was sent or the server refused the
        statement cleanly (a lost race, a value it rejects: nothing written)."""

        async def append(tx: Transaction) -> list[list[int] | None]:
            assert isinstance(tx, _PostgresTransaction)
            return await tx.append_requests(batches)

        until = bound.deadline(self.options.operation_timeout)
        try:
            # Each record binds its own namespace: the group's first names the scope.
            scope = batches[0][0].namespace
            return list(await self._on_connection(append, None, until, scope))
        except _StaleConnection:
            return [None] * len(batches)
        except asyncpg.PostgresError as exc:
            if not _connection_survives(exc):
                raise _translate(exc) from exc
            log.debug("a group of %d appends runs again alone: %s", len(batches), exc)
            return [None] * len(batches)
        except Exception as exc:
            raise _translate(exc) from exc

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        return await self._transaction(
            fn, "BEGIN", until=bound.deadline(self.options.operation_timeout)
        )

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        if self._replica is not None and self._replica.serves_now():
            return await self._replica.read(fn, self._read_only_on)
        return await self._transaction(
            fn, _READ_ONLY_SNAPSHOT, bound.deadline(self.options.operation_timeout)
        )

    async def _read_only_on(
        self,
        fn: Callable[[Transaction], Coroutine[Any, Any, T]],
        until: float,
        pool: asyncpg.Pool | None,
    ) -> T:
        """``fn`` in a read-only snapshot on ``pool`` (None: the primary's)."""
        return await self._transaction(fn, _READ_ONLY_SNAPSHOT, until, pool)

    async def _transaction(
        self,
        fn: Callable[[Transaction], Coroutine[Any, Any, T]],
        begin: str,
        until: float,
        pool: asyncpg.Pool | None = None,
    ) -> T:
        """Runs ``fn`` in a transaction, again after a lost race (a bounded
        number of times) or on a fresh connection when the one it got was
        already dead; all within the bound."""
        scope = call_scope.scope()
        attempts = max(1, self.options.transaction_attempts)
        stale = 0
        attempt = 1
        while True:
            try:
                return await self._on_connection(fn, begin, until, scope, pool)
            except _StaleConnection as exc:
                stale += 1
                if stale > self.options.pool_max:
                    raise _translate(exc.__cause__ or exc) from exc
                log.info("a connection died before its commit; retrying on another")
            except Exception as exc:
                if not _is_retryable(exc) or attempt >= attempts:
                    raise _translate(exc) from exc
                log.debug("retrying a transaction (attempt %d): %s", attempt, exc)
                if self.figures is not None:
                    self.figures.retried()
                await asyncio.sleep(RETRY_BACKOFF.pause(attempt))
                attempt += 1


class _StaleConnection(Exception):
    """The connection failed before its transaction's COMMIT was sent (killed
    while idle in the pool, or by an administrator or a failover mid-way):
    the server rolls such a transaction back, so it may run again on another
    connection. A failure during COMMIT is never this: its outcome is unknown."""


def _terminate(conn: Any) -> None:
    """Closes a pooled connection at once (no cancel request, no goodbye); a
    connection the pool already detached after losing it is left alone."""
    with contextlib.suppress(asyncpg.InterfaceError):
        conn.terminate()


async def _single_statement(
    conn: asyncpg.Connection,
    fn: Callable[[Transaction], Coroutine[Any, Any, T]],
    statements: Statements,
    scope: Scope,
    on_commit: Callable[[SqlTransaction], None],
) -> T:
    """``fn``'s one statement on its own. A connection that a kill closed or
    left mid-protocol refuses the statement before sending it: nothing ran."""
    tx = _PostgresTransaction(conn, statements, scope)
    try:
        result = await fn(tx)
    except Exception as exc:
        if _refused_before_sending(exc) or _reaped(exc):
            raise _StaleConnection() from exc
        if _connection_lost(exc):
            raise _outcome_unknown(exc) from exc
        raise
    on_commit(tx)
    return result


async def _in_transaction(
    conn: asyncpg.Connection,
    begin: str,
    fn: Callable[[Transaction], Coroutine[Any, Any, T]],
    statements: Statements,
    scope: Scope,
    on_commit: Callable[[SqlTransaction], None],
) -> T:
    """``fn`` between ``begin`` and COMMIT; rolled back when it fails cleanly;
    ``on_commit`` (the watchers' wake-up) runs only after COMMIT.

    A COMMIT the connection refused to send (a kill closed it, or left it
    mid-protocol, after ``fn``'s last statement) committed nothing, and a
    read-only transaction changes nothing whatever happens to its COMMIT:
    both run again on a fresh connection. Any other failure during COMMIT
    leaves the outcome unknown (UNAVAILABLE).

    No asyncpg transaction object: its exit would roll back on a connection
    the caller is about to terminate, waiting on a server that may never
    answer."""
    try:
        await conn.execute(begin)
        tx = _PostgresTransaction(conn, statements, scope)
        result = await fn(tx)
    except Exception as exc:
        if _connection_survives(exc):
            if conn.is_in_transaction():
                await conn.execute("ROLLBACK")
            raise
        # The connection died before COMMIT was sent: PostgreSQL rolls the
        # transaction back, so nothing of it happened.
        raise _StaleConnection() from exc
    try:
        await conn.execute("COMMIT")
    except Exception as exc:
        if _refused_before_sending(exc) or (
            begin == _READ_ONLY_SNAPSHOT and not _connection_survives(exc)
        ):
            raise _StaleConnection() from exc
        if _connection_lost(exc):
            raise _outcome_unknown(exc) from exc
        raise
    on_commit(tx)
    return result
