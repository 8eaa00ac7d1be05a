"""Concurrent exact duplicates of every mutating method (§7, §8).

A worker whose activity is retried while the first attempt still runs sends
the same command twice at once. Whatever the interleaving, and whichever
replica each copy reaches, exactly one copy inserts and every other copy gets
the original result, as an exact retry would. Each scenario prepares its
target sequentially and then returns the one command to fire many times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.support import Run, Store, now_ms, run_start, ts, unique

COPIES = 16


@dataclass(frozen=True)
class Command:
    """One command, how to send it to a replica and which flag says it inserted."""

    send: Callable[[Store], Awaitable[Message]]
    inserted: Callable[[Message], bool] | None
    """None for methods without an ``inserted`` flag (every copy must then be equal)."""


Prepare = Callable[[Store], Awaitable[Command]]


async def _root_request(store: Store) -> Command:
    run = run_start(session_id=await store.session())
    return Command(lambda s: s.runtime.StartRootRun(run.root_request()), _started_inserted)


def _started_inserted(response: Any) -> bool:
    return bool(response.started.inserted)


async def _child_start(store: Store) -> Command:
    parent = await store.root()
    child = run_start(session_id=parent.start.session_id, parent_run_id=parent.id)
    request = child.child_request(parent.start.agent_id)
    return Command(lambda s: s.runtime.StartChildRun(request), _started_inserted)


async def _one_shot_start(store: Store) -> Command:
    run = run_start()
    return Command(
        lambda s: s.runtime.StartOneShotRun(run.one_shot_request()),
        _record_inserted,
    )


async def _one_shot_child_start(store: Store) -> Command:
    parent = await store.one_shot()
    child = run_start(parent_run_id=parent.id)
    request = child.one_shot_child_request(parent.start.agent_id)
    return Command(lambda s: s.runtime.StartOneShotChildRun(request), _started_inserted)


def _record_inserted(response: Any) -> bool:
    return bool(response.record.inserted)


def _flat_inserted(response: Any) -> bool:
    return bool(response.inserted)


def _append_to(run: Run) -> Command:
    request = rs.AppendRunRecordRequest(record=run.record("tool-1"))
    return Command(lambda s: s.runtime.AppendRunRecord(request), _flat_inserted)


async def _append(store: Store) -> Command:
    return _append_to(await store.root())


async def _sessionless_append(store: Store) -> Command:
    return _append_to(await store.one_shot())


def _all_inserted(response: Any) -> bool:
    return all(result.inserted for result in response.results)


async def _append_batch(store: Store) -> Command:
    run = await store.root()
    request = rs.AppendRunRecordsRequest(
        records=[run.record("thinking-1"), run.record("text-1"), run.record("tool-call-1")]
    )
    return Command(lambda s: s.runtime.AppendRunRecords(request), _all_inserted)


async def _cancellation(store: Store) -> Command:
    run = await store.root()
    return Command(
        lambda s: s.runtime.RecordRunCancellation(run.cancellation_request()), _flat_inserted
    )


async def _suspension(store: Store) -> Command:
    run = await store.root()
    return Command(
        lambda s: s.runtime.RecordRunSuspension(run.suspension_request()), _flat_inserted
    )


async def _terminal(store: Store) -> Command:
    run = await store.root()
    return Command(lambda s: s.runtime.RecordRunTerminal(run.terminal_request()), _flat_inserted)


async def _sessionless_terminal(store: Store) -> Command:
    run = await store.one_shot()
    return Command(lambda s: s.runtime.RecordRunTerminal(run.terminal_request()), _flat_inserted)


async def _repair_terminal(store: Store) -> Command:
    run = await store.root()
    terminal = run.terminal_request(pb.RUN_STATUS_FAILED)
    request = rs.RepairRunTerminalRequest(
        run_id=terminal.run_id, status=terminal.status, record=terminal.record
    )
    return Command(lambda s: s.runtime.RepairRunTerminal(request), _record_inserted)


async def _repair_suspension(store: Store) -> Command:
    run = await store.root()
    suspension = run.suspension_request()
    request = rs.RepairRunSuspensionRequest(
        run_id=suspension.run_id, suspension=suspension.suspension, record=suspension.record
    )
    return Command(lambda s: s.runtime.RepairRunSuspension(request), _record_inserted)


async def _memory_append(store: Store) -> Command:
    request = ms.AppendEventsRequest(
        agent_id=unique("agent"),
        run_id=unique("memory-run"),
        events=[
            ms.MemoryEvent(type="user_message", timestamp=ts(now_ms()), data=b'{"message":"hi"}')
        ],
        idempotency_key="append-1",
    )
    return Command(
        lambda s: s.memory.AppendEvents(request),
        _flat_inserted,
    )


async def _context_save(store: Store) -> Command:
    request = ctx.SaveContextRequest(
        key=unique("context"), snapshot=ctx.ContextSnapshot(system_prompt="be brief")
    )
    return Command(lambda s: s.context.SaveContext(request), None)


async def _context_append(store: Store) -> Command:
    key = unique("context")
    await store.context.SaveContext(ctx.SaveContextRequest(key=key, snapshot=ctx.ContextSnapshot()))
    request = ctx.AppendTranscriptRequest(
        key=key,
        messages=[
            ctx.ContextMessage(
                type="user",
                content=[ctx.ContentBlock(type="text", text=ctx.TextBlock(text="hello"))],
            )
        ],
        idempotency_key="turn-1",
    )
    return Command(
        lambda s: s.context.AppendTranscript(request),
        _flat_inserted,
    )


async def _create_session(store: Store) -> Command:
    request = sa.CreateSessionRequest(session_id=unique("session"), created_at=ts(now_ms()))
    return Command(lambda s: s.admin.CreateSession(request), None)


async def _end_session(store: Store) -> Command:
    request = sa.EndSessionRequest(session_id=await store.session(), ended_at=ts(now_ms()))
    return Command(lambda s: s.admin.EndSession(request), None)


SCENARIOS: dict[str, Prepare] = {
    "start_root": _root_request,
    "start_child": _child_start,
    "start_one_shot": _one_shot_start,
    "start_one_shot_child": _one_shot_child_start,
    "append": _append,
    "append_sessionless": _sessionless_append,
    "append_batch": _append_batch,
    "cancellation": _cancellation,
    "suspension": _suspension,
    "terminal": _terminal,
    "terminal_sessionless": _sessionless_terminal,
    "repair_terminal": _repair_terminal,
    "repair_suspension": _repair_suspension,
    "memory_append": _memory_append,
    "context_save": _context_save,
    "context_append": _context_append,
    "create_session": _create_session,
    "end_session": _end_session,
}


def as_retry(response: Message) -> Message:
    """The response an exact retry gets: nothing inserted, a repair finds it stored."""
    copy = type(response)()
    copy.CopyFrom(response)
    _clear_inserted(copy)
    repair = isinstance(copy, rs.RepairRunTerminalResponse | rs.RepairRunSuspensionResponse)
    if repair and copy.outcome == pb.RUN_REPAIR_OUTCOME_STORED:  # type: ignore[attr-defined]
        copy.outcome = pb.RUN_REPAIR_OUTCOME_ALREADY_STORED  # type: ignore[attr-defined]
    return copy


def _clear_inserted(message: Message) -> None:
    for descriptor, value in message.ListFields():
        if descriptor.name == "inserted":
            message.ClearField("inserted")
        elif descriptor.message_type is not None and not isinstance(value, Sequence):
            _clear_inserted(value)
        elif descriptor.message_type is not None and descriptor.name == "results":
            for item in value:  # AppendRunRecords: one result per record
                _clear_inserted(item)


async def fire_duplicates(name: str, replicas: Sequence[Store], copies: int = COPIES) -> None:
    """Sends ``copies`` identical commands at once, alternating replicas, and
    checks that one inserted and all others answered like exact retries."""
    command = await SCENARIOS[name](replicas[0])
    responses = await asyncio.gather(
        *(command.send(replicas[index % len(replicas)]) for index in range(copies))
    )
    if command.inserted is not None:
        winners = [response for response in responses if command.inserted(response)]
        assert len(winners) == 1, f"{name}: {len(winners)} copies inserted"
    expected = as_retry(responses[0])
    for response in responses:
        assert as_retry(response) == expected, f"{name}: {response} != {expected}"
    # A later exact retry on every replica still gets the original result.
    for replica in replicas:
        assert as_retry(await command.send(replica)) == expected
