"""WatchSessionRunRecords and WatchRunRecords on every backend (docs/contract.md §9.9)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from runstore.server.app import build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.core import paging
from runstore.server.db import sqlite_wal_sync
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests.processes import server_process
from tests.support import Run, Store, fails_with, failure_of, run_start

Pair = tuple[str, str]


def ids(events: Any) -> list[Pair]:
    return [(record.run_id, record.id) for record in events]


@asynccontextmanager
async def watch_server(database_url: str, **settings: Any) -> AsyncIterator[tuple[Store, Any]]:
    """A server of its own over ``database_url`` with Watch settings of a test's
    choosing; yields its stubs and its ``Stores``."""
    config = ServerConfig(listen="127.0.0.1:0", database_url=database_url, migrate=True, **settings)
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        stores = create_stores(config, db)
        running = await build_server(config, stores)
        stack.push_async_callback(running.server.stop, None)
        target = f"127.0.0.1:{running.port}"
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        yield Store(channel, target=target), stores


async def append(store: Store, run: Run, key: str, payload: bytes = b'{"ok":true}') -> None:
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record(key, payload=payload))
    )


async def collect(
    stream: Any, want: int, *, on_batch: Callable[[Any], None] | None = None
) -> list[Pair]:
    """Reads batches until ``want`` records arrived; checks cursors as it goes."""
    seen: list[Pair] = []
    while (batch := await stream.read()) is not grpc.aio.EOF:
        if on_batch is not None:
            on_batch(batch)
        seen.extend(ids(batch.events))
        if len(seen) >= want:
            return seen
    return seen


def session_watch(store: Store, session_id: str, cursor: str = "") -> Any:
    return store.runtime.WatchSessionRunRecords(
        rs.WatchSessionRunRecordsRequest(session_id=session_id, cursor=cursor)
    )


async def test_records_appended_while_watching_arrive_in_order_once(store: Store) -> None:
    session = await store.session()
    runs = [await store.root(session_id=session) for _ in range(3)]
    writers = 6
    per_writer = 25
    total = len(runs) + writers * per_writer
    cursors: list[str] = []
    keys = itertools.count()

    async def writer(index: int) -> None:
        for _ in range(per_writer):
            await append(store, runs[index % len(runs)], f"k{next(keys)}")

    def check(batch: Any) -> None:
        assert batch.next_cursor, "a batch with records names its last position"
        cursors.append(batch.next_cursor)

    stream = session_watch(store, session)
    seen, *_ = await asyncio.gather(
        collect(stream, total, on_batch=check), *(writer(i) for i in range(writers))
    )
    stream.cancel()
    final = ids(await store.session_records(session))
    assert len(final) == total
    assert seen == final
    assert [int(c) for c in cursors] == sorted({int(c) for c in cursors})

    # Resuming from every cursor it sent continues exactly after it.
    for cursor in cursors:
        position = int(cursor)
        rest = final[position:]
        if not rest:
            continue
        resumed = session_watch(store, session, cursor)
        assert await collect(resumed, len(rest)) == rest
        resumed.cancel()


async def test_run_watch_delivers_the_run_and_ends_after_its_terminal(store: Store) -> None:
    run = await store.root()
    await append(store, run, "a")
    stream = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=run.id))
    seen: list[Pair] = []

    async def finish() -> None:
        await append(store, run, "b")
        await store.runtime.RecordRunTerminal(run.terminal_request())

    async def read() -> None:
        while (batch := await stream.read()) is not grpc.aio.EOF:
            seen.extend(ids(batch.events))

    await asyncio.gather(read(), finish())
    assert await stream.code() == grpc.StatusCode.OK
    assert seen == ids(await store.records(run.id))
    assert len(seen) == 4


async def test_run_watch_of_a_suspended_run_ends_after_the_backlog(store: Store) -> None:
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    stream = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=run.id, cursor="1"))
    batches = []
    while (batch := await stream.read()) is not grpc.aio.EOF:
        batches.append(batch)
    assert [ids(b.events) for b in batches] == [[(run.id, "2")]]
    assert batches[-1].next_cursor == "2"


async def test_run_watch_past_the_end_of_an_ended_run_ends_at_once(store: Store) -> None:
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    stream = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=run.id, cursor="2"))
    assert await stream.read() is grpc.aio.EOF
    assert await stream.code() == grpc.StatusCode.OK


async def test_unknown_session_or_run_is_not_found_at_once(store: Store) -> None:
    await fails_with(
        _first(session_watch(store, "no-such-session")),
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    await fails_with(
        _first(store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id="no-such-run"))),
        grpc.StatusCode.NOT_FOUND,
        "RUN_NOT_FOUND",
    )
    session = await store.session()
    await fails_with(
        _first(session_watch(store, session, "abc")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT_READ",
    )


async def _first(stream: Any) -> Any:
    return await stream.read()


async def test_purge_ends_the_session_stream_with_session_purged(store: Store) -> None:
    session = await store.session()
    run = await store.root(session_id=session)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await store.end(session)
    stream = session_watch(store, session)
    first = await _first_of(stream)
    assert len(first.events) == 2
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        while True:
            await stream.read()
    failure = failure_of(raised.value)
    assert (failure.code, failure.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_PURGED")


async def _first_of(stream: Any) -> Any:
    """The next message of a stream that must send one."""
    return await stream.read()


async def test_idle_stream_sends_heartbeats_with_its_cursor(database_url: str) -> None:
    async with watch_server(database_url, watch_heartbeat_seconds=0.3) as (store, _):
        session = await store.session()
        run = await store.root(session_id=session)
        stream = session_watch(store, session)
        first = await stream.read()
        assert ids(first.events) == [(run.id, "1")]
        beats = [await stream.read() for _ in range(2)]
        assert [(list(b.events), b.next_cursor) for b in beats] == [([], "1"), ([], "1")]
        await append(store, run, "after-beats")
        batch = await stream.read()
        assert (ids(batch.events), batch.next_cursor) == ([(run.id, "2")], "2")
        stream.cancel()
        # Before the first record the heartbeat's cursor is the start.
        empty = await store.session()
        idle = session_watch(store, empty)
        beat = await idle.read()
        assert (list(beat.events), beat.next_cursor) == ([], "")
        idle.cancel()


async def test_the_watcher_limit_refuses_with_overloaded(database_url: str) -> None:
    async with watch_server(database_url, max_watchers=2) as (store, stores):
        session = await store.session()
        await store.root(session_id=session)
        streams = [session_watch(store, session) for _ in range(2)]
        for stream in streams:
            await stream.read()
        await fails_with(
            _first(session_watch(store, session)),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "OVERLOADED",
        )
        # Unary calls are not counted against watchers.
        assert len(await store.session_records(session)) == 1
        streams[0].cancel()
        while stores.watch.open_streams == 2:  # noqa: ASYNC110 (the server sees the cancel)
            await asyncio.sleep(0.01)
        third = session_watch(store, session)
        assert len((await third.read()).events) == 1
        third.cancel()
        streams[1].cancel()


async def test_a_slow_reader_holds_at_most_a_page_or_so(database_url: str) -> None:
    """The server reads the next page only once the previous one was sent."""
    async with watch_server(database_url, page_limit=1) as (store, stores):
        session = await store.session()
        run = await store.root(session_id=session)
        reads = 0
        original = stores.runtime.session_records_after

        async def counting(session_id: str, after: int) -> paging.Cut:
            nonlocal reads
            reads += 1
            return await original(session_id, after)

        stores.runtime.session_records_after = counting  # type: ignore[method-assign]
        channel = grpc.aio.insecure_channel(store.target, options=[("grpc.http2.bdp_probe", 0)])
        async with channel:
            slow = Store(channel, target=store.target)
            stream = session_watch(slow, session)
            await stream.read()
            payload = b'"' + b"x" * (128 * 1024) + b'"'
            appended = 40
            for index in range(appended):
                await append(store, run, f"big-{index}", payload)
            # Not reading: give the server every chance to read ahead.
            await asyncio.sleep(1.0)
            held = reads
            # the page being written and the one read after it, no more
            assert held <= 3, f"the server read {held} pages for a reader that reads none"
            seen = await collect(stream, appended)
            assert seen == [(run.id, str(i)) for i in range(2, appended + 2)]
            stream.cancel()


async def append_batch(store: Store, run: Run, key: str) -> None:
    """Three records in one AppendRunRecords call (§9.3.1)."""
    records = [run.record(f"{key}-{part}") for part in ("thinking", "text", "call")]
    await store.runtime.AppendRunRecords(rs.AppendRunRecordsRequest(records=records))


async def test_batches_arrive_whole_and_in_order(store: Store) -> None:
    session = await store.session()
    runs = [await store.root(session_id=session) for _ in range(2)]
    calls = 12
    total = len(runs) + 3 * calls
    stream = session_watch(store, session)
    run_stream = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=runs[0].id))
    seen, seen_run, *_ = await asyncio.gather(
        collect(stream, total),
        collect(run_stream, 1 + 3 * calls // 2),
        *(append_batch(store, runs[i % 2], f"t{i}") for i in range(calls)),
    )
    stream.cancel()
    run_stream.cancel()
    assert seen == ids(await store.session_records(session))
    assert seen_run == ids(await store.records(runs[0].id))


@pytest.mark.parametrize("appender", ["single", "batch"])
async def test_sqlite_full_sends_a_record_only_after_its_wal_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, appender: str
) -> None:
    url = f"sqlite:///{tmp_path / 'sync.db'}"
    async with watch_server(url, watch_poll_seconds=0.1, sqlite_synchronous="FULL") as (store, _):
        session = await store.session()
        run = await store.root(session_id=session)
        stream = session_watch(store, session)
        assert len((await stream.read()).events) == 1
        release = threading.Event()
        syncing = threading.Event()
        real_sync = os.fdatasync

        def held_sync(fd: int) -> None:
            syncing.set()
            release.wait(30)
            real_sync(fd)

        monkeypatch.setattr(sqlite_wal_sync.os, "fdatasync", held_sync)
        write = append if appender == "single" else append_batch
        appending = asyncio.ensure_future(write(store, run, "held"))
        await asyncio.to_thread(syncing.wait, 30)
        # Committed and visible to readers, not yet durable...
        written = 1 if appender == "single" else 3
        assert len(await store.session_records(session)) == 1 + written
        reading = asyncio.ensure_future(stream.read())
        await asyncio.sleep(0.5)  # five poll intervals
        assert not reading.done(), "a watcher sent a record before its WAL sync"
        monkeypatch.setattr(sqlite_wal_sync.os, "fdatasync", real_sync)
        release.set()
        batch = await reading
        await appending
        delivered = ids(batch.events)
        while len(delivered) < written:
            delivered += ids((await stream.read()).events)
        assert delivered == [(run.id, str(2 + i)) for i in range(written)]
        stream.cancel()


async def test_sigterm_ends_streams_with_unavailable(database_url: str, tmp_path: Path) -> None:
    if database_url.startswith("sqlite"):  # a file of its own: the process migrates it
        database_url = f"sqlite:///{tmp_path / 'term.db'}"
    async with (
        server_process(
            "--database-url", database_url, "--migrate", "--grace-seconds", "60"
        ) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        store = Store(channel, target=server.target)
        session = await store.session()
        await store.root(session_id=session)
        stream = session_watch(store, session)
        await stream.read()
        server.process.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stream.read()
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        await asyncio.wait_for(server.process.wait(), 30)


async def test_the_lifecycle_fast_paths_wake_watchers(database_url: str) -> None:
    """A child start, a cancellation and a suspension (each its common case's
    one write, ``core.fast_paths``) wake a session's watcher and a sessionless
    parent's: with re-reads and heartbeats an hour apart, only each call's own wake-up
    delivers its records (each is awaited before the next call)."""
    quiet = {"watch_poll_seconds": 3600.0, "watch_heartbeat_seconds": 3600.0}
    async with watch_server(database_url, **quiet) as (store, _):
        root = await store.root()
        stream = session_watch(store, root.start.session_id)
        assert ids((await stream.read()).events) == [(root.id, "1")]
        child = run_start(session_id=root.start.session_id, parent_run_id=root.id, agent_id="child")
        calls_and_records = [
            (
                lambda: store.runtime.StartChildRun(child.child_request(root.start.agent_id)),
                [(root.id, "2"), (child.id, "1")],
            ),
            (
                lambda: store.runtime.RecordRunCancellation(root.cancellation_request()),
                [(root.id, "3")],
            ),
            (
                lambda: store.runtime.RecordRunSuspension(child.suspension_request()),
                [(child.id, "2")],
            ),
        ]
        for call, records in calls_and_records:
            await call()
            assert await asyncio.wait_for(collect(stream, len(records)), 30) == records
        stream.cancel()

        parent = await store.one_shot()
        stream = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=parent.id))
        assert ids((await stream.read()).events) == [(parent.id, "1")]
        one_shot_child = run_start(parent_run_id=parent.id, agent_id="child")
        calls_and_records = [
            (
                lambda: store.runtime.StartOneShotChildRun(
                    one_shot_child.one_shot_child_request(parent.start.agent_id)
                ),
                [(parent.id, "2")],
            ),
            (
                lambda: store.runtime.RecordRunSuspension(parent.suspension_request()),
                [(parent.id, "3")],
            ),
        ]
        for call, records in calls_and_records:
            await call()
            assert await asyncio.wait_for(collect(stream, len(records)), 30) == records
        stream.cancel()
