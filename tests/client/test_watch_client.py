"""``RemoteStore.watch_*``: records as async iterators that survive a server
restart by resuming from the last cursor (§9.9)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import grpc
import pytest

from runstore.client import RemoteStore, RetryPolicy, RunRecord
from runstore.contract.errors import RunNotFoundError, SessionNotFoundError
from runstore.server.app import RunningServer, build_server, create_stores, open_database, shutdown
from runstore.server.config import ServerConfig
from tests.server.test_watch import append
from tests.support import Store

FAST = RetryPolicy(initial=0.01, maximum=0.05, deadline=30.0)


def free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def serving(url: str, port: int) -> AsyncIterator[tuple[Store, RunningServer]]:
    config = ServerConfig(listen=f"127.0.0.1:{port}", database_url=url, migrate=True)
    async with open_database(config) as db:
        running = await build_server(config, create_stores(config, db))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield Store(channel, target=f"127.0.0.1:{port}"), running
        finally:
            await shutdown(running, 5)


async def test_a_watch_resumes_across_a_server_restart(database_url: str, tmp_path: Path) -> None:
    if database_url.startswith("sqlite"):
        database_url = f"sqlite:///{tmp_path / 'restart.db'}"
    port = free_port()
    got: list[RunRecord] = []
    arrived = asyncio.Condition()
    reconnects: list[int] = []
    client = RemoteStore(
        f"127.0.0.1:{port}", retry=FAST, on_retry=lambda _e, n, _d: reconnects.append(n)
    )

    async def until(count: int) -> None:
        async with arrived:
            await asyncio.wait_for(arrived.wait_for(lambda: len(got) >= count), 30)

    async def watch(session_id: str) -> None:
        async for record in client.watch_session_run_records(session_id):
            async with arrived:
                got.append(record)
                arrived.notify_all()

    async with client:
        async with serving(database_url, port) as (store, _):
            session = await store.session()
            run = await store.root(session_id=session)
            watching = asyncio.ensure_future(watch(session))
            for index in range(3):
                await append(store, run, f"before-{index}")
            await until(4)
        # The first server is gone (its streams ended UNAVAILABLE); a new one
        # serves the same database on the same address.
        async with serving(database_url, port) as (store, _):
            for index in range(3):
                await append(store, run, f"after-{index}")
            await until(7)
            watching.cancel()
            final = await store.session_records(session)
    assert reconnects, "the client reconnected"
    assert [(r.run_id, r.id) for r in got] == [(r.run_id, r.id) for r in final]
    assert [r.event_key for r in got][1:] == [f"before-{i}" for i in range(3)] + [
        f"after-{i}" for i in range(3)
    ]


async def test_watch_errors_are_the_contract_classes(store: Store) -> None:
    async with RemoteStore(store.target, retry=FAST) as client:
        with pytest.raises(SessionNotFoundError):
            async for _ in client.watch_session_run_records("no-such-session"):
                pass
        with pytest.raises(RunNotFoundError):
            async for _ in client.watch_run_records("no-such-run"):
                pass
        run = await store.root()
        await store.runtime.RecordRunTerminal(run.terminal_request())
        records = [record async for record in client.watch_run_records(run.id)]
        assert [record.id for record in records] == ["1", "2"]
