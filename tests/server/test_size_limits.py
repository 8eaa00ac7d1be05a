"""Whatever the server accepts, it can send back (docs/limits.md, "Message and page sizes").

A request of exactly ``--max-message-bytes`` is accepted; the record, event or
snapshot it carried must then come back in a page, and paging must go on past
it. One byte more is refused before anything is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import grpc
import pytest
from google.protobuf.message import Message

from runstore.server.app import build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import runtime_store_pb2 as rs
from tests.support import Run, Store, now_ms, ts, unique

LIMIT = 256 * 1024


@pytest.fixture(scope="module")
async def small(database_url: str) -> AsyncIterator[Store]:
    """A server whose message limit is small enough to reach quickly."""
    config = ServerConfig(
        listen="127.0.0.1:0", database_url=database_url, migrate=True, max_message_bytes=LIMIT
    )
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))
        stack.push_async_callback(running.server.stop, None)
        target = f"127.0.0.1:{running.port}"
        options = [("grpc.max_send_message_length", 2 * LIMIT)]
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(target, options=options)
        )
        yield Store(channel, target=target)


def _padded(build: type[Message], size: int, make: object) -> Message:
    """``make(padding)`` grown until its request serialises to exactly ``size`` bytes."""
    assert callable(make)
    padding = size - len(make(0).SerializeToString())
    for _ in range(8):  # a longer field may need a longer length prefix
        message = make(padding)
        assert isinstance(message, build)
        overshoot = len(message.SerializeToString()) - size
        if overshoot == 0:
            return message
        padding -= overshoot
    raise AssertionError("could not hit the size exactly")


def _record_request(run: Run, key: str, size: int) -> rs.AppendRunRecordRequest:
    def make(padding: int) -> rs.AppendRunRecordRequest:
        payload = b'{"pad":"' + b"x" * max(0, padding) + b'"}'
        return rs.AppendRunRecordRequest(record=run.record(key, payload=payload))

    request = _padded(rs.AppendRunRecordRequest, size, make)
    assert isinstance(request, rs.AppendRunRecordRequest)
    return request


async def test_a_record_at_the_limit_is_readable_in_every_list(small: Store) -> None:
    run = await small.root()
    big = _record_request(run, "big", LIMIT)
    assert big.ByteSize() == LIMIT
    assert (await small.runtime.AppendRunRecord(big)).inserted
    after = await small.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("after"))
    )

    keys = []
    cursor = ""
    while True:
        page = await small.runtime.ListRunRecords(
            rs.ListRunRecordsRequest(run_id=run.id, cursor=cursor, limit=1000)
        )
        keys.extend(record.event_key for record in page.events)
        for record in page.events:
            if record.event_key == "big":
                assert record.payload == big.record.payload
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert keys == ["started", "big", "after"]

    session_keys = [r.event_key for r in await small.session_records(run.start.session_id)]
    assert session_keys == ["started", "big", "after"]
    assert after.id == "3"


async def test_one_byte_over_the_limit_is_refused_and_writes_nothing(small: Store) -> None:
    run = await small.root()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await small.runtime.AppendRunRecord(_record_request(run, "too-big", LIMIT + 1))
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert [r.event_key for r in await small.records(run.id)] == ["started"]


async def test_a_memory_event_at_the_limit_is_readable(small: Store) -> None:
    agent, run_id = unique("agent"), unique("memory")

    def make(padding: int) -> ms.AppendEventsRequest:
        data = b'{"message":"' + b"m" * max(0, padding) + b'"}'
        event = ms.MemoryEvent(type="user_message", timestamp=ts(now_ms()), data=data)
        return ms.AppendEventsRequest(agent_id=agent, run_id=run_id, events=[event])

    request = _padded(ms.AppendEventsRequest, LIMIT, make)
    assert isinstance(request, ms.AppendEventsRequest)
    await small.memory.AppendEvents(request)
    page = await small.memory.LoadRun(ms.MemoryLoadRunRequest(agent_id=agent, run_id=run_id))
    assert [event.data for event in page.events] == [request.events[0].data]


async def test_a_context_snapshot_at_the_limit_is_readable(small: Store) -> None:
    key = unique("context")

    def make(padding: int) -> ctx.SaveContextRequest:
        snapshot = ctx.ContextSnapshot(system_prompt="p" * max(0, padding))
        return ctx.SaveContextRequest(key=key, snapshot=snapshot)

    request = _padded(ctx.SaveContextRequest, LIMIT, make)
    assert isinstance(request, ctx.SaveContextRequest)
    await small.context.SaveContext(request)
    got = await small.context.GetContext(ctx.GetContextRequest(key=key))
    assert got.snapshot == request.snapshot


BIG = LIMIT - 4096
"""An item well inside one request, but two of them exceed a page's byte budget."""

MANY = 20
"""More large items than fit one response (and the client's 4 MiB receive limit)."""


async def test_memory_pages_of_large_events_end_at_the_byte_budget(small: Store) -> None:
    """A page holds as many events as fit the page's byte budget (one always
    does), not the page limit's worth: the whole history comes back in order."""
    agent, run_id = unique("agent"), unique("memory")
    sent = []
    for index in range(MANY):
        data = b'{"message":"' + str(index).encode() + b"m" * BIG + b'"}'
        event = ms.MemoryEvent(type="user_message", timestamp=ts(now_ms()), data=data)
        await small.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id=agent, run_id=run_id, events=[event])
        )
        sent.append(data)
    got: list[bytes] = []
    sizes = []
    cursor = ""
    while True:
        page = await small.memory.LoadRun(
            ms.MemoryLoadRunRequest(agent_id=agent, run_id=run_id, cursor=cursor, limit=0)
        )
        sizes.append(len(page.events))
        got.extend(event.data for event in page.events)
        assert page.meta["event_count"] == str(MANY)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert got == sent
    assert sizes == [1] * MANY


async def test_transcript_pages_of_large_messages_end_at_the_byte_budget(small: Store) -> None:
    key = unique("context")
    sent = []
    for index in range(MANY):
        message = ctx.ContextMessage(
            type="user",
            content=[
                ctx.ContentBlock(type="text", text=ctx.TextBlock(text=f"{index}" + "t" * BIG))
            ],
        )
        await small.context.AppendTranscript(
            ctx.AppendTranscriptRequest(key=key, messages=[message])
        )
        sent.append(message)
    got: list[ctx.ContextMessage] = []
    sizes = []
    cursor = ""
    while True:
        page = await small.context.ListTranscript(
            ctx.ListTranscriptRequest(key=key, cursor=cursor, limit=0)
        )
        sizes.append(len(page.messages))
        got.extend(page.messages)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert got == sent
    assert sizes == [1] * MANY


async def test_small_items_still_fill_a_page_up_to_the_budget(small: Store) -> None:
    """The budget cuts only what would not fit: events of a third of the
    budget come three to a page (the fourth would pass it)."""
    agent, run_id = unique("agent"), unique("memory")
    third = LIMIT // 3 - 64
    for index in range(7):
        data = b'{"message":"' + str(index).encode() + b"m" * third + b'"}'
        event = ms.MemoryEvent(type="user_message", timestamp=ts(now_ms()), data=data)
        await small.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id=agent, run_id=run_id, events=[event])
        )
    sizes = []
    cursor = ""
    while True:
        page = await small.memory.LoadRun(
            ms.MemoryLoadRunRequest(agent_id=agent, run_id=run_id, cursor=cursor, limit=0)
        )
        sizes.append(len(page.events))
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert sizes == [3, 3, 1]
