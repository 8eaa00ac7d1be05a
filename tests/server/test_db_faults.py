"""Database faults under a running server (docs/limits.md, "Database operation bound").

The database refuses connections, a row lock outlasts the operation bound, a
connection's work is cut off: callers get UNAVAILABLE (reason TRANSIENT) or
their own deadline, never INTERNAL and never a hang; health follows the
database; interrupted connections never go back to the pool.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2

from runstore.contract.errors import (
    InternalError,
    UnavailableError,
    ValidationError,
)
from runstore.contract.model import SessionStatus
from runstore.server.config import ServerConfig
from runstore.server.core.model import Session
from runstore.server.core.ports import Transaction
from runstore.server.db import migrate
from runstore.server.db import postgres as postgres_db
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions, asyncpg_dsn
from runstore.server.db.postgres_errors import OutcomeUnknown, connection_survives
from runstore.server.db.postgres_errors import translate as _translate
from runstore.server.db.sqlite import SqliteDatabase, SqliteOptions
from runstore.v1 import session_admin_pb2 as sa
from tests import postgres
from tests.faults import NOT_SERVING, SERVING, served, timed
from tests.support import now_ms, ts, unique

pytestmark = pytest.mark.usefixtures("acting_in_default")  # direct database work

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
BOUND = 1.0
"""A short operation bound, so the tests wait it out quickly."""


def _create(session_id: str | None = None) -> sa.CreateSessionRequest:
    return sa.CreateSessionRequest(session_id=session_id or unique("s"), created_at=ts(now_ms()))


# --- Classification: which database failure becomes which code ------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (asyncpg.exceptions.ConnectionFailureError("08006"), UnavailableError),
        (asyncpg.exceptions.TooManyConnectionsError("53300"), UnavailableError),
        (asyncpg.exceptions.DiskFullError("53100"), UnavailableError),
        (asyncpg.exceptions.ObjectNotInPrerequisiteStateError("55000"), UnavailableError),
        (asyncpg.exceptions.LockNotAvailableError("55P03"), UnavailableError),
        (asyncpg.exceptions.AdminShutdownError("57P01"), UnavailableError),
        (asyncpg.exceptions.QueryCanceledError("57014"), UnavailableError),
        (asyncpg.exceptions.CannotConnectNowError("57P03"), UnavailableError),
        (asyncpg.exceptions.PostgresIOError("58030"), UnavailableError),
        (asyncpg.exceptions.CharacterNotInRepertoireError("22021"), ValidationError),
        (asyncpg.exceptions.NumericValueOutOfRangeError("22003"), ValidationError),
        (asyncpg.exceptions.InternalClientError("cannot switch to state 15"), UnavailableError),
        (asyncpg.exceptions.ConnectionDoesNotExistError("closed"), UnavailableError),
        (ConnectionResetError(), UnavailableError),
        (asyncpg.exceptions.UndefinedTableError("42P01"), InternalError),
    ],
)
def test_database_failures_are_classified_by_what_failed(
    error: BaseException, expected: type[BaseException]
) -> None:
    translated = _translate(error)
    assert type(translated) is expected
    assert "asyncpg" not in str(translated) and "Error" not in str(translated)


class _CommitFails:
    """A connection whose COMMIT fails with ``error``; everything before it works."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def execute(self, sql: str) -> str:
        if sql == "COMMIT":
            raise self.error
        return "OK"

    def is_in_transaction(self) -> bool:
        return True


@pytest.mark.parametrize(
    "lost",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed mid-operation"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        ConnectionResetError(),
    ],
)
async def test_a_connection_lost_during_commit_is_one_line_and_outcome_unknown(
    lost: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    """The write may have happened: UNAVAILABLE (the exact retry settles it),
    said once by the database layer, so the call's own line drops to DEBUG,
    and the connection never goes back to the pool."""

    async def nothing(tx: Transaction) -> None:
        return None

    with pytest.raises(OutcomeUnknown) as raised:
        await postgres_db._in_transaction(
            _CommitFails(lost), "BEGIN", nothing, None, "default", lambda tx: None
        )
    assert isinstance(raised.value, UnavailableError) and raised.value.cause_logged
    assert not connection_survives(raised.value)
    said = [r.getMessage() for r in caplog.records if "during its commit" in r.getMessage()]
    assert len(said) == 1 and "outcome is unknown" in said[0]


async def test_a_commit_the_server_refused_is_not_an_unknown_outcome() -> None:
    """A statement timeout on COMMIT is the server's answer, not a lost
    connection: it stays what the classification says."""

    async def nothing(tx: Transaction) -> None:
        return None

    refused = asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout")
    with pytest.raises(asyncpg.exceptions.QueryCanceledError):
        await postgres_db._in_transaction(
            _CommitFails(refused), "BEGIN", nothing, None, "default", lambda tx: None
        )


# --- PostgreSQL on the shared server: a fresh database each ---------------------------


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with postgres.fresh_database("runstore_faults") as url:
        await migrate.upgrade(url)
        yield url


async def _admin(url: str, sql: str) -> None:
    """Runs ``sql`` from the shared server's own database (not the one under test)."""
    conn = await asyncpg.connect(asyncpg_dsn(postgres.require_postgres()))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _db_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def _kill_backends(url: str) -> None:
    await _admin(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{_db_name(url)}' AND pid <> pg_backend_pid()",
    )


@pytest.mark.postgres
async def test_refused_connections_are_unavailable_and_health_flips(pg_url: str) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0", database_url=pg_url, health_probe_interval=0.2, pg_pool_min=1
    )
    name = _db_name(pg_url)
    async with served(config) as server:
        assert await server.status() == SERVING
        await _admin(pg_url, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            await _kill_backends(pg_url)
            results = await asyncio.gather(
                *(timed(server.store.admin.CreateSession(_create())) for _ in range(8))
            )
            assert {(r.code, r.reason, r.permanent) for r in results} == {
                (UNAVAILABLE, "TRANSIENT", "false")
            }
            await server.wait_for_status(NOT_SERVING, within=5)
            listed = await server.health.List(health_pb2.HealthListRequest(), timeout=2)
            assert listed.statuses[""].status == NOT_SERVING
            assert listed.statuses["runstore.v1.RuntimeStore"].status == NOT_SERVING
        finally:
            await _admin(pg_url, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await server.wait_for_status(SERVING, within=5)
        request = _create()
        assert (await server.store.admin.CreateSession(request)).session.id == request.session_id


async def _hold_session_lock(url: str, session_id: str) -> asyncpg.Connection:
    holder = await asyncpg.connect(asyncpg_dsn(url))
    await holder.execute("BEGIN")
    await holder.execute("SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE", session_id)
    return holder


async def _waiting_backends(url: str) -> int:
    conn = await asyncpg.connect(asyncpg_dsn(postgres.require_postgres()))
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
            "AND application_name = 'runstore' AND wait_event_type = 'Lock'",
            _db_name(url),
        )
    finally:
        await conn.close()
    return count


@pytest.mark.postgres
async def test_a_lock_outlasting_the_bound_ends_the_call_unavailable(pg_url: str) -> None:
    """A caller without a deadline (or with a longer one) gets UNAVAILABLE when
    the bound passes, not a hang and not DEADLINE_EXCEEDED; the connection
    that waited is terminated and the pool (of one) still serves."""
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=pg_url,
        db_operation_timeout=BOUND,
        pg_pool_min=1,
        pg_pool_max=1,
    )
    async with served(config) as server:
        session_id = await server.store.session()
        holder = await _hold_session_lock(pg_url, session_id)
        try:
            end = sa.EndSessionRequest(session_id=session_id, ended_at=ts(now_ms()))
            no_deadline, long_deadline = await asyncio.gather(
                timed(server.store.admin.EndSession(end)),
                timed(server.store.admin.EndSession(end, timeout=30)),
            )
            for result in (no_deadline, long_deadline):
                assert (result.code, result.reason) == (UNAVAILABLE, "TRANSIENT")
                assert result.seconds < BOUND + 1
            short = await timed(server.store.admin.EndSession(end, timeout=0.3))
            assert short.code is grpc.StatusCode.DEADLINE_EXCEEDED
            assert short.seconds < BOUND
        finally:
            await holder.execute("ROLLBACK")
            await holder.close()
        # Nothing of the abandoned calls keeps waiting: once the lock is free
        # their backends find their client gone (PostgreSQL's statement
        # timeout, 5 s, bounds even that).
        for _ in range(100):
            if not await _waiting_backends(pg_url):
                break
            await asyncio.sleep(0.05)
        assert await _waiting_backends(pg_url) == 0
        loaded = await server.store.admin.EndSession(
            sa.EndSessionRequest(session_id=session_id, ended_at=ts(now_ms())), timeout=5
        )
        assert loaded.session.status == 2


@pytest.mark.postgres
async def test_a_cancelled_operation_never_returns_its_connection(pg_url: str) -> None:
    """An operation cancelled while the server works on it leaves its
    connection mid-protocol: it is terminated, and the next operation gets a
    fresh one instead of 'cannot switch to state' on the old one."""
    db = PostgresDatabase(pg_url, PostgresOptions(pool_min=1, pool_max=1))
    await db.start()
    try:
        session_id = unique("cancel")

        async def create(tx: Transaction) -> None:
            await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))

        await db.write(create)
        holder = await _hold_session_lock(pg_url, session_id)
        try:

            async def end(tx: Transaction) -> None:
                await tx.session(session_id, for_update=True)

            pids_before = await _runstore_pids(pg_url)
            task = asyncio.ensure_future(db.write(end))
            for _ in range(500):  # until the write waits for the lock inside PostgreSQL
                if await _waiting_backends(pg_url):
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await holder.execute("ROLLBACK")
            await holder.close()

        async def look(tx: Transaction) -> object:
            return await tx.session(session_id)

        assert isinstance(await db.read(look), Session)
        assert not (await _runstore_pids(pg_url)) & pids_before
    finally:
        await db.close()


async def _runstore_pids(url: str) -> set[int]:
    conn = await asyncpg.connect(asyncpg_dsn(postgres.require_postgres()))
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'runstore'",
            _db_name(url),
        )
    finally:
        await conn.close()
    return {row["pid"] for row in rows}


@pytest.mark.postgres
async def test_data_errors_are_invalid_argument_not_internal(pg_url: str) -> None:
    db = PostgresDatabase(pg_url, PostgresOptions(pool_min=1, pool_max=1))
    await db.start()
    try:

        async def nul(tx: Transaction) -> None:
            await tx.insert_session(Session("nul\x00id", SessionStatus.ACTIVE, 1))

        with pytest.raises(ValidationError) as raised:
            await db.write(nul)
        assert raised.value.code == "INVALID_ARGUMENT"
        assert "22021" not in str(raised.value)
    finally:
        await db.close()


# --- SQLite -----------------------------------------------------------------------------


async def test_sqlite_drops_queued_work_whose_caller_is_gone(tmp_path: Path) -> None:
    """Only work still queued can be dropped: with the writer busy, queued
    writes end UNAVAILABLE within the bound and never run afterwards."""
    path = tmp_path / "runstore.db"
    await migrate.ensure_schema(f"sqlite:///{path}", migrate=True)
    db = SqliteDatabase(path, SqliteOptions(operation_timeout=BOUND))
    await db.start()
    try:
        running, release = threading.Event(), threading.Event()
        ran: list[str] = []

        async def hold_writer(tx: Transaction) -> None:
            running.set()
            release.wait(timeout=30)  # blocks the writer thread, as a slow disk would

        def writer_of(session_id: str) -> object:
            async def write(tx: Transaction) -> None:
                ran.append(session_id)
                await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))

            return write

        holding = asyncio.ensure_future(db.write(hold_writer))
        await asyncio.to_thread(running.wait, 10)
        queued = [unique("queued") for _ in range(10)]
        results = await asyncio.gather(
            *(db.write(writer_of(s)) for s in queued),  # type: ignore[arg-type]
            return_exceptions=True,
        )
        assert all(isinstance(result, UnavailableError) for result in results), results
        release.set()
        with pytest.raises(UnavailableError):
            await holding  # its own bound passed too; the transaction itself commits
        after = unique("after")
        await db.write(writer_of(after))  # type: ignore[arg-type]
        assert ran == [after]
    finally:
        await db.close()


async def test_sqlite_health_follows_a_locked_database(tmp_path: Path) -> None:
    """Another process holding SQLite's write lock: writes end UNAVAILABLE
    within the bound, health reports NOT_SERVING, then SERVING once it lets go."""
    path = tmp_path / "runstore.db"
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{path}",
        migrate=True,
        db_operation_timeout=BOUND,
        health_probe_interval=0.2,
    )
    async with served(config) as server:
        assert await server.status() == SERVING
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            result = await timed(server.store.admin.CreateSession(_create()))
            assert (result.code, result.reason) == (UNAVAILABLE, "TRANSIENT")
            assert result.seconds < BOUND + 1
            await server.wait_for_status(NOT_SERVING, within=5)
            listed = await server.health.List(health_pb2.HealthListRequest(), timeout=2)
            assert {status.status for status in listed.statuses.values()} == {NOT_SERVING}
        finally:
            other.execute("ROLLBACK")
            other.close()
        await server.wait_for_status(SERVING, within=10)
        await server.store.admin.CreateSession(_create(), timeout=5)
