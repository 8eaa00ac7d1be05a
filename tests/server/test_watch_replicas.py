"""Watch across PostgreSQL replicas: NOTIFY wakes a watcher on another replica,
and the periodic re-read delivers when a notification is lost (§9.9)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import grpc
import pytest

from runstore.server.app import build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.db import migrate
from runstore.server.db.postgres import PostgresDatabase
from tests import postgres
from tests.processes import server_process
from tests.server.test_watch import append, collect, ids, session_watch
from tests.support import Store

pytestmark = pytest.mark.postgres


async def test_writers_on_two_replicas_reach_a_watcher_on_a_third() -> None:
    """The watcher's replica polls only every 60 s: NOTIFY alone must wake it."""
    async with postgres.fresh_database("runstore_watch") as url, AsyncExitStack() as stack:
        await migrate.upgrade(url)
        replicas = []
        for poll in ("60", "60", "60"):
            server = await stack.enter_async_context(
                server_process("--database-url", url, "--watch-poll-seconds", poll)
            )
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
            replicas.append(Store(channel, target=server.target))
        writer_a, writer_b, watcher = replicas
        session = await writer_a.session()
        runs = [await writer_a.root(session_id=session), await writer_b.root(session_id=session)]
        stream = session_watch(watcher, session)
        first = await stream.read()  # the stream is open before the writes
        seen = ids(first.events)
        keys = itertools.count()
        per_writer = 30

        async def write(replica: Store) -> None:
            for index in range(per_writer):
                await append(replica, runs[index % 2], f"k{next(keys)}")

        tasks = [write(writer_a), write(writer_a), write(writer_b), write(writer_b)]
        total = len(runs) + len(tasks) * per_writer
        rest, *_ = await asyncio.gather(
            asyncio.wait_for(collect(stream, total - len(seen)), 30), *tasks
        )
        stream.cancel()
        assert seen + rest == ids(await writer_a.session_records(session))


@asynccontextmanager
async def replica(url: str, **settings: Any) -> AsyncIterator[tuple[Store, PostgresDatabase]]:
    config = ServerConfig(listen="127.0.0.1:0", database_url=url, **settings)
    async with AsyncExitStack() as stack:
        opened = await stack.enter_async_context(open_database(config))
        db = opened.backend
        assert isinstance(db, PostgresDatabase)
        running = await build_server(config, create_stores(config, opened))
        stack.push_async_callback(running.server.stop, None)
        target = f"127.0.0.1:{running.port}"
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        yield Store(channel, target=target), db


async def test_a_lost_notification_is_covered_by_the_periodic_re_read() -> None:
    async with (
        postgres.fresh_database("runstore_watch") as url,
        replica(url, migrate=True) as (writer, writer_db),
        replica(url, watch_poll_seconds=0.3) as (watcher, watcher_db),
    ):
        sent: list[str] = []
        received: list[str] = []

        async def lose(payload: str) -> None:
            sent.append(payload)  # dropped on purpose

        writer_db.wakeups._notify = lose  # type: ignore[method-assign]
        real_received = watcher_db.wakeups._received

        def counting(*args: Any) -> None:
            received.append(args[-1])
            real_received(*args)

        watcher_db.wakeups._received = counting  # type: ignore[method-assign]
        session = await writer.session()
        run = await writer.root(session_id=session)
        stream = session_watch(watcher, session)
        assert ids((await stream.read()).events) == [(run.id, "1")]
        for index in range(5):
            await append(writer, run, f"lost-{index}")
        assert await asyncio.wait_for(collect(stream, 5), 30) == [
            (run.id, str(i)) for i in range(2, 7)
        ]
        stream.cancel()
        assert sent, "the writer tried to notify"
        assert not received, "no notification reached the watcher's replica"
