"""``--read-database-url``: the reads that may lag go to a standby, every
worker-facing read stays on the primary, and the standby's lag is exported.

The standby's WAL replay is paused (``pg_wal_replay_pause``), so what the
primary commits afterwards is, for a while, only on the primary: a listing
that leaves it out was served by the standby, a load that finds it by the
primary. With metrics on, ``runstore_replica_lag_seconds`` grows while the
replay is paused and falls back to 0 once the standby has caught up.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

import asyncpg
import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runstore.server.app import Telemetry, build_server, create_stores, open_database, shutdown
from runstore.server.config import ServerConfig
from runstore.server.db import migrate
from runstore.server.metrics import Metrics
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests import pg_standby
from tests.support import Store, unique

pytestmark = pytest.mark.postgres


def _lag(metrics: Metrics) -> float | None:
    for family in text_string_to_metric_families(metrics.scrape()):
        for sample in family.samples:
            if sample.name == "runstore_replica_lag_seconds":
                return float(sample.value)
    return None


async def _until(what: str, check: Callable[[], Awaitable[bool]], within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(0.05)


async def _listed_sessions(store: Store) -> set[str]:
    response = await store.admin.ListSessions(sa.ListSessionsRequest(page_size=1000))
    return {session.id for session in response.sessions}


async def _listed_runs(store: Store, session_id: str) -> set[str]:
    response = await store.admin.ListRuns(sa.ListRunsRequest(session_id=session_id))
    return {run.run_id for run in response.runs}


@pytest.fixture
async def pair() -> AsyncIterator[pg_standby.Pair]:
    async with pg_standby.primary_and_standby("reads", synchronous=False) as pair:
        await migrate.upgrade(pair.primary.url("reads"))
        # The standby replays the schema at its own pace: a listing there
        # before it has the tables would fail for the test's setup, not the server.
        standby = await asyncpg.connect(pair.standby_url())
        try:
            await _until(
                "the standby has the schema",
                lambda: _has_table(standby, "sessions"),
                within=120,
            )
        finally:
            await standby.close()
        yield pair


async def _has_table(connection: asyncpg.Connection, name: str) -> bool:
    return bool(await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", name))


@pytest.mark.timeout(600)  # several processes on a loaded machine
async def test_listings_lag_on_the_standby_while_worker_reads_see_every_write(
    pair: pg_standby.Pair,
) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=pair.primary.url("reads"),
        read_database_url=pair.standby_url(),
        health_probe_interval=0.2,
    )
    metrics = Metrics("9.9.9-test")
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config, Telemetry(metrics=metrics)))
        running = await build_server(config, create_stores(config, db), telemetry=None)
        stack.push_async_callback(running.server.stop, None)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
        )
        store = Store(channel)

        replicated = await store.session()
        await _until("the standby has the first session", lambda: _has(store, replicated))

        standby = await asyncpg.connect(pair.standby_url())
        stack.push_async_callback(standby.close)
        await standby.execute("SELECT pg_wal_replay_pause()")
        session = await store.session(unique("unreplicated"))
        run = await store.root(session)

        # Worker-facing reads: the primary, which has every write.
        assert (await store.load(run.id)).run_id == run.id
        assert [r.run_id for r in await store.session_records(session)] == [run.id]
        # The operator's listings: the paused standby, which has neither yet.
        assert session not in await _listed_sessions(store)
        assert not await _listed_runs(store, session)

        async def lagging() -> bool:
            lag = _lag(metrics)
            return lag is not None and lag > 0.3

        await _until("the lag gauge shows the paused replay", lagging)

        await standby.execute("SELECT pg_wal_replay_resume()")
        await _until("the standby lists the session", lambda: _has(store, session))
        assert await _listed_runs(store, session) == {run.id}

        async def caught_up() -> bool:
            return _lag(metrics) == 0

        await _until("the lag gauge falls to 0", caught_up)

        # A standby that is down: the listings come from the primary meanwhile.
        await pair.standby.stop("immediate")
        other = await store.session()
        assert other in await _listed_sessions(store)

        async def unknown() -> bool:
            lag = _lag(metrics)
            return lag is not None and math.isnan(lag)

        await _until("the lag gauge says it does not know", unknown)


async def _has(store: Store, session_id: str) -> bool:
    return session_id in await _listed_sessions(store)


async def test_a_worker_read_is_never_sent_to_the_standby(pair: pg_standby.Pair) -> None:
    """With the standby's replay paused, a record appended a moment ago is
    read back at once, through every worker-facing read."""
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=pair.primary.url("reads"),
        read_database_url=pair.standby_url(),
    )
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))
        stack.push_async_callback(running.server.stop, None)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
        )
        store = Store(channel)
        standby = await asyncpg.connect(pair.standby_url())
        stack.push_async_callback(standby.close)
        await standby.execute("SELECT pg_wal_replay_pause()")
        run = await store.root()
        appended = await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record("k1"))
        )
        assert [r.id for r in await store.records(run.id)][-1] == appended.id
        status = await store.runtime.LoadSessionStatus(
            rs.LoadSessionStatusRequest(session_id=run.start.session_id)
        )
        assert status.status
        runs = await store.admin.ListRunsBySession(
            sa.ListRunsBySessionRequest(session_id=run.start.session_id)
        )
        assert [r.run_id for r in runs.runs] == [run.id]


@pytest.mark.timeout(600)
async def test_export_and_console_pages_read_the_standby_and_live_pages_the_primary(
    pair: pg_standby.Pair,
) -> None:
    """With the replay paused, ``runstore export`` (which sends
    ``x-runstore-read-lag: tolerated``) and a console page miss the newest
    record, which the standby has not replayed; the same listing without the
    header, as a worker sends it, has it. Once the replay resumes, both do."""
    from tests.cli.test_admin_cli import runstore

    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=pair.primary.url("reads"),
        read_database_url=pair.standby_url(),
        console_listen="127.0.0.1:0",
    )
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))
        stack.push_async_callback(shutdown, running, 0)
        assert running.console is not None
        target = f"127.0.0.1:{running.port}"
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        store = Store(channel, target=target)
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{running.console.port}", timeout=30)
        )

        run = await store.root()
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record("replicated"))
        )
        before = [r.id for r in await store.records(run.id)]

        async def exported() -> list[str] | None:
            """The export's record IDs; None while the standby lacks the run."""
            result = await runstore(store, "export", "--run", run.id)
            if result.code != 0 and "RUN_NOT_FOUND" in result.err:
                return None
            assert result.code == 0, result.err
            return [line["id"] for line in result.lines()]

        async def replicated() -> bool:
            return await exported() == before

        await _until("the standby has the first record", replicated)

        standby = await asyncpg.connect(pair.standby_url())
        stack.push_async_callback(standby.close)
        await standby.execute("SELECT pg_wal_replay_pause()")
        newest = await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record("unreplicated"))
        )

        assert [r.id for r in await store.records(run.id)] == [*before, newest.id]
        assert await exported() == before
        page = await http.get("/run", params={"id": run.id})
        assert page.status_code == 200, page.text
        assert "key replicated" in page.text and "key unreplicated" not in page.text

        await standby.execute("SELECT pg_wal_replay_resume()")

        async def caught_up() -> bool:
            return await exported() == [*before, newest.id]

        await _until("the export has the newest record", caught_up)
        assert "key unreplicated" in (await http.get("/run", params={"id": run.id})).text
