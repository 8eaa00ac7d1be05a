"""Coalesced appends (``runstore.client.coalesce``) against a real server:
a lone append goes out at once and alone, concurrent ones share messages,
each keeps its own result and error, the queued-bytes bound holds callers
back within their deadline, and ``coalescing=None`` sends one call each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from runstore.client import RemoteStore, RunNotFoundError, RunRecord
from runstore.client.coalesce import AppendCoalescer, AppendCoalescing
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.support import Run, unique
from tests.support import Store as StubStore

RUNTIME = "/runstore.v1.RuntimeStore/"


class Methods(grpc.aio.UnaryUnaryClientInterceptor):
    """Records the method of every message the client sends."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method
        self.sent.append(method.decode() if isinstance(method, bytes) else method)
        return await continuation(details, request)


@pytest.fixture
async def counted(
    store: StubStore,
) -> AsyncIterator[tuple[StubStore, Methods, grpc.aio.Channel]]:
    methods = Methods()
    async with grpc.aio.insecure_channel(store.target, interceptors=[methods]) as channel:
        yield store, methods, channel


def _record(run: Run, key: str, **changes: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "event_key": key,
        "run_id": run.id,
        "agent_id": run.start.agent_id,
        "session_id": run.start.session_id,
        "type": "tool_result_received",
        "payload": b'{"n":"' + key.encode() + b'"}',
        "timestamp": datetime.fromtimestamp(run.start.started_at.seconds + 1, UTC),
    }
    fields.update(changes)
    return RunRecord(**fields)


async def test_a_lone_append_goes_out_at_once_as_one_plain_call(
    counted: tuple[StubStore, Methods, grpc.aio.Channel],
) -> None:
    store, methods, channel = counted
    run = await store.root()
    remote = RemoteStore(channel=channel)
    result = await remote.append_run_record(_record(run, "alone"))
    assert result.inserted
    assert methods.sent == [RUNTIME + "AppendRunRecord"]


async def test_concurrent_appends_share_messages_and_keep_their_own_results(
    counted: tuple[StubStore, Methods, grpc.aio.Channel],
) -> None:
    store, methods, channel = counted
    runs = [await store.root() for _ in range(4)]
    remote = RemoteStore(channel=channel)
    records = [_record(runs[i % 4], f"k{i}") for i in range(64)]
    results = await asyncio.gather(*(remote.append_run_record(r) for r in records))
    assert all(result.inserted for result in results)
    assert len(methods.sent) < 64 and RUNTIME + "AppendRunRecordCalls" in methods.sent
    for run in runs:
        stored = {r.event_key: (r.id, r.payload) for r in await store.records(run.id)}
        for record, result in zip(records, results, strict=True):
            if record.run_id == run.id:
                assert stored[record.event_key] == (result.id, record.payload)
    # An exact retry of each returns its original result, coalesced again.
    again = await asyncio.gather(*(remote.append_run_record(r) for r in records))
    assert [(a.id, a.inserted) for a in again] == [(r.id, False) for r in results]


async def test_a_bad_append_fails_alone_among_its_neighbours(
    counted: tuple[StubStore, Methods, grpc.aio.Channel],
) -> None:
    store, methods, channel = counted
    run = await store.root()
    remote = RemoteStore(channel=channel)
    records = [_record(run, f"k{i}") for i in range(16)]
    records[7] = _record(run, "k7", run_id=unique("missing"))
    outcomes = await asyncio.gather(
        *(remote.append_run_record(r) for r in records), return_exceptions=True
    )
    assert isinstance(outcomes[7], RunNotFoundError)
    assert outcomes[7].run_id == records[7].run_id
    assert all(
        not isinstance(o, BaseException) and o.inserted for i, o in enumerate(outcomes) if i != 7
    )
    assert RUNTIME + "AppendRunRecordCalls" in methods.sent
    assert {r.event_key for r in await store.records(run.id)} >= {
        f"k{i}" for i in range(16) if i != 7
    }


async def test_coalescing_off_sends_one_call_per_append(
    counted: tuple[StubStore, Methods, grpc.aio.Channel],
) -> None:
    store, methods, channel = counted
    run = await store.root()
    remote = RemoteStore(channel=channel, coalescing=None)
    await asyncio.gather(*(remote.append_run_record(_record(run, f"k{i}")) for i in range(16)))
    assert methods.sent == [RUNTIME + "AppendRunRecord"] * 16


async def test_each_carried_call_has_its_own_request_id(store: StubStore) -> None:
    run = await store.root()
    calls = [
        rs.AppendRunRecordCall(
            request=rs.AppendRunRecordRequest(record=run.record(f"k{i}")), request_id=f"req-{i}"
        )
        for i in range(3)
    ] + [rs.AppendRunRecordCall(request=rs.AppendRunRecordRequest(record=run.record("k3")))]
    response = await store.runtime.AppendRunRecordCalls(rs.AppendRunRecordCallsRequest(calls=calls))
    ids = [outcome.request_id for outcome in response.outcomes]
    assert ids[:3] == ["req-0", "req-1", "req-2"] and ids[3] not in ids[:3] and ids[3]
    assert all(outcome.HasField("response") for outcome in response.outcomes)


async def test_a_carried_call_past_its_own_deadline_fails_alone(store: StubStore) -> None:
    """The server holds each carried call to its own ``timeout``: one already
    past it ends DEADLINE_EXCEEDED while its neighbour in the message is
    stored; sent again, it is stored once (or found, if it got in first)."""
    run = await store.root()
    late = rs.AppendRunRecordRequest(record=run.record("late"))
    due = rs.AppendRunRecordCall(request=late)
    due.timeout.FromNanoseconds(1)
    calls = [due, rs.AppendRunRecordCall(request=rs.AppendRunRecordRequest(record=run.record("k")))]
    response = await store.runtime.AppendRunRecordCalls(rs.AppendRunRecordCallsRequest(calls=calls))
    late_outcome, neighbour = response.outcomes
    assert late_outcome.error.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert neighbour.response.inserted
    again = await store.runtime.AppendRunRecord(late)
    keys = [r.event_key for r in await store.records(run.id)]
    assert keys.count("late") == 1 and again.id


async def test_at_the_queued_bytes_bound_a_caller_waits_within_its_deadline() -> None:
    """Unit level: the wire is held by a send that has not answered."""
    release = asyncio.Event()
    sent: list[int] = []

    async def send_one(request: rs.AppendRunRecordRequest, seconds: float | None) -> Any:
        sent.append(1)
        await release.wait()
        return rs.AppendRunRecordResponse(id="1", inserted=True)

    async def send(request: rs.AppendRunRecordCallsRequest, seconds: float | None) -> Any:
        sent.append(len(request.calls))
        return rs.AppendRunRecordCallsResponse(
            outcomes=[
                rs.AppendRunRecordCallOutcome(response=rs.AppendRunRecordResponse(id=str(i)))
                for i, _ in enumerate(request.calls)
            ]
        )

    bounds = AppendCoalescing(max_messages_in_flight=1, max_message_bytes=100, max_queued_bytes=100)
    coalescer = AppendCoalescer(bounds, send, send_one)

    def request(size: int) -> rs.AppendRunRecordRequest:
        return rs.AppendRunRecordRequest(record=pb.RunRecord(payload=b"x" * size))

    first = asyncio.create_task(coalescer.append(request(10), None))
    queued = asyncio.create_task(coalescer.append(request(100), None))
    for _ in range(10):
        await asyncio.sleep(0)
    assert sent == [1] and not queued.done()
    # No room for even one more byte: the caller waits, and gives up at its deadline.
    with pytest.raises(TimeoutError):
        await coalescer.append(request(1), 0.05)
    waiting = asyncio.create_task(coalescer.append(request(1), 5.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done()
    release.set()
    await asyncio.gather(first, queued, waiting)
    assert sent[0] == 1 and sum(sent) == 3


async def test_appends_arriving_together_behind_a_message_leave_in_one() -> None:
    """Unit level: with one message on the wire and room for a second, the
    appends of one loop turn go out together, not the first of them alone."""
    release = asyncio.Event()
    sent: list[int] = []

    async def send_one(request: rs.AppendRunRecordRequest, seconds: float | None) -> Any:
        sent.append(1)
        await release.wait()
        return rs.AppendRunRecordResponse(id="1", inserted=True)

    async def send(request: rs.AppendRunRecordCallsRequest, seconds: float | None) -> Any:
        sent.append(len(request.calls))
        await release.wait()
        return rs.AppendRunRecordCallsResponse(
            outcomes=[
                rs.AppendRunRecordCallOutcome(response=rs.AppendRunRecordResponse(id=str(i)))
                for i, _ in enumerate(request.calls)
            ]
        )

    coalescer = AppendCoalescer(AppendCoalescing(max_messages_in_flight=2), send, send_one)
    request = rs.AppendRunRecordRequest(record=pb.RunRecord(payload=b"x"))
    first = asyncio.create_task(coalescer.append(request, None))
    await asyncio.sleep(0)
    assert sent == [1]  # alone on an empty wire, at once
    together = [asyncio.create_task(coalescer.append(request, None)) for _ in range(5)]
    for _ in range(10):
        await asyncio.sleep(0)
    assert sent == [1, 5]
    release.set()
    await asyncio.gather(first, *together)
    assert coalescer.messages_sent == 2
