"""Database trouble on PostgreSQL is transient, never a contract error, never partial."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import grpc
import pytest

from runstore.contract.errors import AbortedError, UnavailableError
from runstore.contract.model import SessionStatus
from runstore.server.app import OpenDatabase, Telemetry, build_server, create_stores
from runstore.server.config import ServerConfig
from runstore.server.core.model import Session
from runstore.server.core.ports import Transaction
from runstore.server.db import migrate
from runstore.server.db import postgres as postgres_backend
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions, asyncpg_dsn
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests import postgres
from tests.faults import served
from tests.support import Store, fails, failure_of, now_ms, ts, unique

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.usefixtures("acting_in_default"),
]  # direct database work


@pytest.fixture(scope="module")
async def pg_url() -> AsyncIterator[str]:
    async with postgres.fresh_database("runstore_failures") as url:
        await migrate.upgrade(url)
        yield url


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[PostgresDatabase]:
    database = PostgresDatabase(pg_url, PostgresOptions(pool_min=1, pool_max=2))
    await database.start()
    try:
        yield database
    finally:
        await database.close()


async def _terminate_runstore_backends(url: str) -> int:
    admin = await asyncpg.connect(asyncpg_dsn(url))
    try:
        killed: int = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'runstore' AND pid <> pg_backend_pid() "
            "AND datname = current_database()"
        )
    finally:
        await admin.close()
    return killed


async def test_connection_lost_mid_transaction_runs_it_again_on_a_fresh_one(
    db: PostgresDatabase, pg_url: str
) -> None:
    """PostgreSQL rolls back a transaction whose connection died before its
    COMMIT, so the backend runs the function again on another connection: the
    caller sees one clean write, not UNAVAILABLE, and nothing of the first
    attempt stays behind."""
    session_id = unique("lost")
    inside = asyncio.Event()
    resume = asyncio.Event()
    attempts = 0

    async def create_then_continue(tx: Transaction) -> None:
        nonlocal attempts
        attempts += 1
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))
        inside.set()
        await resume.wait()
        await tx.end_session(session_id, 2)

    write = asyncio.ensure_future(db.write(create_then_continue))
    await inside.wait()
    assert await _terminate_runstore_backends(pg_url) >= 1
    resume.set()
    await write
    assert attempts == 2

    async def look(tx: Transaction) -> object:
        return await tx.session(session_id)

    assert await db.read(look) == Session(session_id, SessionStatus.ENDED, 1, 2)


async def test_connection_lost_during_commit_is_unavailable(
    db: PostgresDatabase, pg_url: str
) -> None:
    """A connection lost while COMMIT is on its way leaves the outcome unknown:
    that is UNAVAILABLE (reason TRANSIENT), never a silent second attempt."""
    session_id = unique("commit")
    killed = False

    async def create(tx: Transaction) -> None:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))

    original = asyncpg.Connection.execute

    async def execute(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal killed
        if query == "COMMIT" and not killed:
            killed = True  # cut once COMMIT is written, before its answer
            asyncio.get_running_loop().call_soon(self.terminate)
        return await original(self, query, *args, **kwargs)

    asyncpg.Connection.execute = execute  # type: ignore[method-assign]
    try:
        with pytest.raises(UnavailableError) as raised:
            await db.write(create)
    finally:
        asyncpg.Connection.execute = original  # type: ignore[method-assign]
    assert killed and not raised.value.permanent


async def test_serialisation_failures_are_retried_then_aborted(db: PostgresDatabase) -> None:
    attempts = 0

    async def flaky(tx: Transaction) -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise asyncpg.SerializationError("could not serialize access")
        return "done"

    assert await db.write(flaky) == "done"
    assert attempts == 3

    attempts = 0

    async def always_losing(tx: Transaction) -> None:
        nonlocal attempts
        attempts += 1
        await tx.insert_session(Session(unique("never"), SessionStatus.ACTIVE, 1))
        raise asyncpg.DeadlockDetectedError("deadlock detected")

    with pytest.raises(AbortedError) as raised:
        await db.write(always_losing)
    assert attempts == db.options.transaction_attempts
    assert raised.value.code == "ABORTED" and not raised.value.permanent


async def test_server_recovers_when_its_connections_are_killed(pg_url: str) -> None:
    """Killed backends (a failover, an admin) cost at most transient failures:
    UNAVAILABLE with reason TRANSIENT, never a contract error; then the pool
    reconnects and the identical command succeeds."""
    config = ServerConfig(listen="127.0.0.1:0", database_url=pg_url, pg_pool_min=2, pg_pool_max=2)
    database = PostgresDatabase(pg_url, PostgresOptions(pool_min=2, pool_max=2))
    await database.start()
    opened = OpenDatabase(database, database, Telemetry())
    running = await build_server(config, create_stores(config, opened))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            store = Store(channel)
            session_id = await store.session()
            assert await _terminate_runstore_backends(pg_url) >= 1
            request = sa.CreateSessionRequest(session_id=unique("after"), created_at=ts(now_ms()))
            outcomes: list[Any] = []
            for _ in range(3):  # the pool replaces dead connections as calls find them
                try:
                    outcomes.append(await store.admin.CreateSession(request))
                    break
                except grpc.aio.AioRpcError as err:
                    failure = failure_of(err)
                    assert err.code() is grpc.StatusCode.UNAVAILABLE
                    assert (failure.reason, failure.metadata["permanent"]) == ("TRANSIENT", "false")
                    outcomes.append(failure)
            assert outcomes[-1].session.id == request.session_id  # the identical retry succeeded
            loaded = await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))
            assert loaded.session.status == 1
            missing = await fails(
                store.admin.LoadSession(sa.LoadSessionRequest(session_id=unique("x")))
            )
            assert missing.reason == "SESSION_NOT_FOUND"
    finally:
        await running.server.stop(None)
        await database.close()


async def test_an_append_refused_before_it_was_sent_falls_back_to_the_full_rules(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection that a kill left mid-protocol refuses the fast
    path's statement before sending it ("cannot switch to state"): nothing ran,
    so the append goes through the full rules on a fresh connection."""
    refused = 0
    original = postgres_backend._PostgresTransaction.append_if_writable

    async def refuse_once(self: Any, record: Any) -> int | None:
        nonlocal refused
        if not refused:
            refused += 1
            raise asyncpg.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )
        return await original(self, record)

    config = ServerConfig(listen="127.0.0.1:0", database_url=pg_url)
    async with served(config) as server:
        run = await server.store.root()
        monkeypatch.setattr(
            postgres_backend._PostgresTransaction, "append_if_writable", refuse_once
        )
        appended = await server.store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record("after-refusal"))
        )
        assert refused == 1
        assert (appended.id, appended.inserted) == ("2", True)


async def _kill_and_wait(tx: Transaction, admin: asyncpg.Connection) -> None:
    """Kills the backend behind ``tx`` and returns once its connection saw
    the loss (an event, not a sleep)."""
    conn = tx._conn  # type: ignore[attr-defined]
    lost = asyncio.Event()
    conn.add_termination_listener(lambda _conn: lost.set())
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", conn.get_server_pid())
    await lost.wait()


async def test_a_commit_refused_by_a_killed_connection_runs_the_transaction_again(
    db: PostgresDatabase, pg_url: str
) -> None:
    """A kill after the last statement and before COMMIT: the driver refuses
    to send COMMIT on the dead connection, so nothing was committed and the
    transaction runs again on a fresh one, not UNAVAILABLE (nor INTERNAL)."""
    session_id = unique("refused")
    attempts = 0
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))

    async def create_then_lose_the_connection(tx: Transaction) -> None:
        nonlocal attempts
        attempts += 1
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))
        if attempts == 1:
            await _kill_and_wait(tx, admin)

    try:
        await db.write(create_then_lose_the_connection)
    finally:
        await admin.close()
    assert attempts == 2

    async def look(tx: Transaction) -> object:
        return await tx.session(session_id)

    assert await db.read(look) == Session(session_id, SessionStatus.ACTIVE, 1)


async def test_a_read_whose_connection_dies_at_commit_is_read_again(
    db: PostgresDatabase, pg_url: str
) -> None:
    """A read-only transaction changes nothing, so a connection lost at its
    COMMIT (before or while it is sent) costs a second read, never UNAVAILABLE."""
    session_id = unique("read")

    async def create(tx: Transaction) -> None:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))

    await db.write(create)
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    attempts = 0

    async def look_then_lose_the_connection(tx: Transaction) -> object:
        nonlocal attempts
        attempts += 1
        found = await tx.session(session_id)
        if attempts == 1:
            await _kill_and_wait(tx, admin)
        return found

    try:
        assert await db.read(look_then_lose_the_connection) == Session(
            session_id, SessionStatus.ACTIVE, 1
        )
    finally:
        await admin.close()
    assert attempts == 2

    original = asyncpg.Connection.execute
    cut = 0

    async def execute(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal cut
        if query == "COMMIT" and not cut:
            cut += 1  # cut once COMMIT is written, before its answer
            asyncio.get_running_loop().call_soon(self.terminate)
        return await original(self, query, *args, **kwargs)

    asyncpg.Connection.execute = execute  # type: ignore[method-assign]
    try:
        assert await db.read(look_then_lose_the_connection) == Session(
            session_id, SessionStatus.ACTIVE, 1
        )
    finally:
        asyncpg.Connection.execute = original  # type: ignore[method-assign]
    assert cut == 1 and attempts == 4


async def test_killed_and_cancelled_calls_under_load_are_only_ever_transient(
    pg_url: str,
) -> None:
    """Many concurrent lifecycle writes and reads on a small pool while its
    backends are killed (once per round, at a different point of the load
    each time) and some callers give up: a write is done or UNAVAILABLE, a
    read is always answered, nothing is INTERNAL or a raw driver error, no
    connection goes back to the pool mid-transaction, and every session is
    either wholly written or absent."""
    database = PostgresDatabase(pg_url, PostgresOptions(pool_min=2, pool_max=2))
    await database.start()
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    anchor = unique("anchor")

    async def create_anchor(tx: Transaction) -> None:
        await tx.insert_session(Session(anchor, SessionStatus.ACTIVE, 1))

    await database.write(create_anchor)
    outcomes: dict[str, int] = {}
    written: dict[str, str] = {}

    def count(outcome: str) -> None:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    async def lifecycle(session_id: str) -> None:
        async def create_and_end(tx: Transaction) -> None:
            await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))
            await tx.session(session_id, for_update=True)
            await tx.end_session(session_id, 2)

        try:
            await database.write(create_and_end)
        except UnavailableError as exc:
            assert not exc.permanent
            written[session_id] = "unknown"
            count("write unavailable")
        else:
            written[session_id] = "done"
            count("write done")

    async def look() -> None:
        async def read(tx: Transaction) -> object:
            return await tx.session(anchor)

        assert await database.read(read) == Session(anchor, SessionStatus.ACTIVE, 1)
        count("read")

    try:
        for round_ in range(40):
            tasks = [
                asyncio.ensure_future(lifecycle(unique("load")) if i % 2 else look())
                for i in range(24)
            ]
            for _ in range(round_ % 8):  # the kill lands at a different point each round
                await asyncio.sleep(0)
            given_up = tasks[round_ % 3 :: 7]
            for task in given_up:
                task.cancel()
            await _terminate_runstore_backends(pg_url)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for task, result in zip(tasks, results, strict=True):
                if isinstance(result, asyncio.CancelledError):
                    assert task in given_up
                elif isinstance(result, BaseException):
                    raise result
            pool = database._pool
            assert pool is not None
            for holder in pool._holders:
                conn = holder._con
                if holder._in_use is None and conn is not None and not conn.is_closed():
                    assert not conn.is_in_transaction()

        async def statuses(tx: Transaction) -> dict[str, object]:
            return {key: await tx.session(key) for key in written}

        found = await database.read(statuses)
    finally:
        await admin.close()
        await database.close()
    for session_id, state in written.items():
        if state == "done":
            assert found[session_id] == Session(session_id, SessionStatus.ENDED, 1, 2)
        else:  # the commit's outcome was unknown: all of it or none of it
            assert found[session_id] in (None, Session(session_id, SessionStatus.ENDED, 1, 2))
    assert outcomes.get("read", 0) > 0 and outcomes.get("write done", 0) > 0
