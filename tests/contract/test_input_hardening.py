"""Bad input never answers INTERNAL or UNKNOWN, on every backend.

Unparsable bodies are MALFORMED_REQUEST, ids and keys follow one rule (D8),
deep JSON is "exceeded max depth", trailers are bounded, every error carries
the call's request id, and every time a Timestamp can carry round-trips.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.server.app import SERVICE_NAMES
from runstore.server.error_status import CUT_MARK, MAX_ECHOED_VALUE_BYTES, MAX_MESSAGE_BYTES
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.seeds import declaration, messages
from tests.support import (
    REQUEST_ID_KEY,
    Store,
    fails,
    fails_with,
    failure_of,
    run_start,
    ts,
    unique,
)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NUL = "\x00"
LONGEST_ID = "é" * 512  # 1024 bytes of UTF-8
TOO_LONG_ID = "é" * 512 + "x"


def _methods() -> list[tuple[str, Any]]:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    methods = []
    for service_name in SERVICE_NAMES:
        service = pool.FindServiceByName(service_name)
        for method in service.methods:
            methods.append((f"/{service.full_name}/{method.name}", method.input_type))
    return methods


METHODS = _methods()

UNPARSABLE = {
    "one-ff-byte": b"\xff",
    "truncated": b"\x0a\x05ab",  # field 1 says 5 bytes, 2 follow
    "invalid-utf8-in-a-string": b"\x0a\x01\xff",  # field 1 is a string or a message
}


def _unparsable_cases() -> list[Any]:
    """Each method with each body that cannot parse as its request: the
    invalid UTF-8 body only where field 1 is a string or a message (for an
    int field 1, as ListNamespaces' page_size, it is a valid unknown field)."""
    length_delimited = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE)
    cases = []
    for name, body in UNPARSABLE.items():
        for path, input_type in METHODS:
            first = input_type.fields_by_number.get(1)
            if name == "invalid-utf8-in-a-string" and (
                first is None or first.type not in length_delimited
            ):
                continue
            cases.append(pytest.param(path, input_type, body, id=f"{name}-{path}"))
    return cases


@pytest.mark.parametrize(("path", "input_type", "body"), _unparsable_cases())
async def test_unparsable_bodies_are_malformed_request(
    store: Store, path: str, input_type: Any, body: bytes
) -> None:
    call = store.channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    failure = await fails_with(call(body), INVALID, "MALFORMED_REQUEST")
    assert failure.message == f"request body is not a valid {input_type.full_name} message"
    assert "Error" not in failure.message and "Exception" not in failure.message


async def test_request_id_is_honoured_replaced_or_generated(store: Store) -> None:
    ghost = unique("ghost")
    request = rs.LoadRunRequest(run_id=ghost)

    async def request_id_of(metadata: tuple[tuple[str, str], ...]) -> str:
        try:
            await store.runtime.LoadRun(request, metadata=metadata)
        except grpc.aio.AioRpcError as err:
            trailers = dict(err.trailing_metadata() or ())
            failure_of(err)  # asserts ErrorInfo request_id == the trailer
            return str(trailers[REQUEST_ID_KEY])
        raise AssertionError("LoadRun of an unknown run succeeded")

    assert await request_id_of(((REQUEST_ID_KEY, "req-42"),)) == "req-42"
    # An id outside the rule is replaced by a fresh one, never silently altered.
    generated = {
        await request_id_of(((REQUEST_ID_KEY, 'a b<c>d"e'),)),
        await request_id_of(((REQUEST_ID_KEY, "x" * 5000),)),
        *[await request_id_of(()) for _ in range(3)],
    }
    assert len(generated) == 5 and all(re.fullmatch("[0-9a-f]{32}", v) for v in generated)

    # Successful calls carry it too.
    session = await store.session()
    call = store.admin.LoadSession(
        sa.LoadSessionRequest(session_id=session), metadata=((REQUEST_ID_KEY, "ok-1"),)
    )
    await call
    assert (REQUEST_ID_KEY, "ok-1") in tuple(await call.trailing_metadata())


async def test_echoed_values_are_bounded_and_marked(store: Store) -> None:
    # A valid but long id comes back in metadata cut to the bound.
    long_id = "r" * 1000
    failure = await fails_with(
        store.runtime.LoadRun(rs.LoadRunRequest(run_id=long_id)),
        grpc.StatusCode.NOT_FOUND,
        "RUN_NOT_FOUND",
    )
    echoed = failure.metadata["run_id"]
    assert len(echoed.encode()) <= MAX_ECHOED_VALUE_BYTES and echoed.endswith(CUT_MARK)
    assert long_id.startswith(echoed.removesuffix(CUT_MARK))

    # A 1 MB value quoted in a message: the message is cut, not the call.
    agent, run = unique("agent"), unique("run")
    event = ms.MemoryEvent(type="t" * 1_000_000, timestamp=ts(1), data=b"{}")
    failure = await fails_with(
        store.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id=agent, run_id=run, events=[event])
        ),
        INVALID,
        "CONTRACT_VALIDATION",
    )
    assert len(failure.message.encode()) <= MAX_MESSAGE_BYTES
    assert failure.message.endswith(CUT_MARK)
    assert failure.metadata["field"] == "events[0].type"

    # A 1 MB id is refused by the id rule, not by the trailer size limit.
    failure = await fails_with(
        store.runtime.LoadRun(rs.LoadRunRequest(run_id="r" * 1_000_000)),
        INVALID,
        "CONTRACT_VALIDATION",
        "run_id is longer than 1024 bytes",
    )
    assert failure.metadata == {"permanent": "true", "field": "run_id"}


# --- The id and key rule (D8) ---------------------------------------------------


def _mutated_start(field: str, value: str) -> Callable[[Any], None]:
    def mutate(request: Any) -> None:
        target, name = field.split(".")
        setattr(getattr(request, target), name, value)

    return mutate


START_FIELDS = [
    "run.run_id",
    "run.agent_id",
    "run.session_id",
    "run.predecessor_run_id",
    "started.event_key",
    "started.turn_id",
    "started.type",
    "canceled.event_key",
]


@pytest.mark.parametrize(
    ("field", "bad"),
    [(field, "nul") for field in START_FIELDS]
    # Types are text, not ids: only U+0000 is refused.
    + [(field, "too-long") for field in START_FIELDS if not field.endswith(".type")],
)
async def test_start_ids_follow_the_id_rule(store: Store, field: str, bad: str) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    request = run.root_request()
    value = f"x{NUL}y" if bad == "nul" else TOO_LONG_ID
    _mutated_start(field, value)(request)
    failure = await fails_with(store.runtime.StartRootRun(request), INVALID, "CONTRACT_VALIDATION")
    assert failure.metadata["field"] == field
    assert ("U+0000" if bad == "nul" else "longer than 1024 bytes") in failure.message
    assert not await store.exists(run.id)
    assert await store.session_records(session) == []


async def test_ids_of_exactly_1024_bytes_are_stored_and_read_back(store: Store) -> None:
    session = await store.session(LONGEST_ID[:-1] + unique("s")[-2:])
    run = run_start(session_id=session, run_id=secrets.token_hex(512), agent_id=LONGEST_ID)
    run.start.labels["k"] = "v"
    await store.runtime.StartRootRun(run.root_request(started_key=LONGEST_ID))
    record = run.record(secrets.token_hex(512), turn_id=secrets.token_hex(512))
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))
    stored = await store.records(run.id)
    assert [event.event_key for event in stored] == [LONGEST_ID, record.event_key]
    assert stored[1].turn_id == record.turn_id

    # Three 1 KiB keys of one memory append: the index still takes them.
    agent, memory_run, key = (secrets.token_hex(512) for _ in range(3))
    events = [ms.MemoryEvent(type="user_message", timestamp=ts(1), data=b"{}")]
    request = ms.AppendEventsRequest(
        agent_id=agent, run_id=memory_run, events=events, idempotency_key=key
    )
    first = await store.memory.AppendEvents(request)
    again = await store.memory.AppendEvents(request)
    assert (first.inserted, again.inserted, again.first_position) == (True, False, 0)

    context_key = secrets.token_hex(512)
    message = ctx.ContextMessage(
        type="user", content=[ctx.ContentBlock(type="text", text=ctx.TextBlock(text="hi"))]
    )
    await store.context.AppendTranscript(
        ctx.AppendTranscriptRequest(
            key=context_key, messages=[message], idempotency_key=secrets.token_hex(512)
        )
    )


def _nul_requests(run: Any, session: str) -> list[tuple[str, Callable[[], Any], str]]:
    """One request per method and id field, with U+0000 in that field."""
    bad = f"a{NUL}b"
    record = run.record("k")
    record.event_key = bad
    cancellation = run.cancellation_request(reason=f"why{NUL}")
    suspension = run.suspension_request(suspension_id=bad)
    labelled = run_start(session_id=session, labels={"site": f"o{NUL}ne"})
    return [
        ("LoadSessionStatus", lambda s: s.runtime.LoadSessionStatus(
            rs.LoadSessionStatusRequest(session_id=bad)), "session_id"),
        ("CreateSession", lambda s: s.admin.CreateSession(
            sa.CreateSessionRequest(session_id=bad, created_at=ts(1))), "session_id"),
        ("LoadSession", lambda s: s.admin.LoadSession(
            sa.LoadSessionRequest(session_id=bad)), "session_id"),
        ("EndSession", lambda s: s.admin.EndSession(
            sa.EndSessionRequest(session_id=bad, ended_at=ts(1))), "session_id"),
        ("PurgeSession", lambda s: s.admin.PurgeSession(
            sa.PurgeSessionRequest(session_id=bad)), "session_id"),
        ("ListRunsBySession", lambda s: s.admin.ListRunsBySession(
            sa.ListRunsBySessionRequest(session_id=bad)), "session_id"),
        ("StartRootRun.labels", lambda s: s.runtime.StartRootRun(
            labelled.root_request()), "run.labels.value"),
        ("AppendRunRecord", lambda s: s.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=record)), "record.event_key"),
        ("RecordRunCancellation", lambda s: s.runtime.RecordRunCancellation(
            cancellation), "reason"),
        ("RecordRunSuspension", lambda s: s.runtime.RecordRunSuspension(
            suspension), "suspension.id"),
        ("RecordRunTerminal", lambda s: s.runtime.RecordRunTerminal(
            rs.RecordRunTerminalRequest(run_id=bad, status=pb.RUN_STATUS_COMPLETED)), "run_id"),
        ("RepairRunTerminal", lambda s: s.runtime.RepairRunTerminal(
            rs.RepairRunTerminalRequest(run_id=bad, status=pb.RUN_STATUS_COMPLETED)), "run_id"),
        ("RepairRunSuspension", lambda s: s.runtime.RepairRunSuspension(
            rs.RepairRunSuspensionRequest(run_id=bad)), "run_id"),
        ("LoadRun", lambda s: s.runtime.LoadRun(rs.LoadRunRequest(run_id=bad)), "run_id"),
        ("LoadRunSuspension", lambda s: s.runtime.LoadRunSuspension(
            rs.LoadRunSuspensionRequest(run_id=bad)), "run_id"),
        ("ListRunRecords", lambda s: s.runtime.ListRunRecords(
            rs.ListRunRecordsRequest(run_id=bad, limit=1)), "run_id"),
        ("ListSessionRunRecords", lambda s: s.runtime.ListSessionRunRecords(
            rs.ListSessionRunRecordsRequest(session_id=bad, limit=1)), "session_id"),
        ("ListRunTranscriptRecords", lambda s: s.runtime.ListRunTranscriptRecords(
            rs.ListRunTranscriptRecordsRequest(run_id=bad, through_record_id="1", limit=1)),
         "run_id"),
        ("BeginRunSeed", lambda s: s.runtime.BeginRunSeed(sd.BeginRunSeedRequest(
            declaration=declaration(command_id=bad))), "declaration.command_id"),
        ("BeginRunSeed.prompts", lambda s: s.runtime.BeginRunSeed(sd.BeginRunSeedRequest(
            declaration=declaration(rendered_prompts=[sd.RenderedPrompt(
                prompt_id="p", scope=sd.PromptScope(labels={"k": bad}))]))),
         "declaration.rendered_prompts[0].scope.labels.value"),
        ("AppendRunSeed", lambda s: s.runtime.AppendRunSeed(sd.AppendRunSeedRequest(
            run_id="r", attempt_id="a", record=messages(bad, "0"))), "record.key"),
        ("PublishRunSeed", lambda s: s.runtime.PublishRunSeed(sd.PublishRunSeedRequest(
            run_id=bad, attempt_id="a")), "run_id"),
        ("FindRunPreparation", lambda s: s.runtime.FindRunPreparation(
            sd.FindRunPreparationRequest(operation=sd.PreparationOperation(
                agent_id="a", run_id=bad, command_id="c"))), "operation.run_id"),
        ("SettleRunPreparation", lambda s: s.runtime.SettleRunPreparation(
            sd.SettleRunPreparationRequest(operation=sd.PreparationOperation(
                agent_id="a", run_id="r", command_id="c"), attempt_id=bad)), "attempt_id"),
        ("ListRunPreparationRecords", lambda s: s.runtime.ListRunPreparationRecords(
            sd.ListRunPreparationRecordsRequest(run_id=bad, limit=1)), "run_id"),
        ("LoadRunSeed", lambda s: s.runtime.LoadRunSeed(
            sd.LoadRunSeedRequest(run_id="r", end_id=bad)), "end_id"),
        ("ListRunSeedRecords", lambda s: s.runtime.ListRunSeedRecords(
            sd.ListRunSeedRecordsRequest(run_id="r", after_id=bad, limit=1)), "after_id"),
        ("MemoryLoadRun", lambda s: s.memory.LoadRun(
            ms.MemoryLoadRunRequest(agent_id="a", run_id=bad)), "run_id"),
        ("AppendEvents", lambda s: s.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id="a", run_id="r", idempotency_key=bad)),
         "idempotency_key"),
        ("AppendEvents.labels", lambda s: s.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id="a", run_id="r", events=[ms.MemoryEvent(
                type="user_message", timestamp=ts(1), data=b"{}", labels={bad: "v"})])),
         "events[0].labels.key"),
        ("GetContext", lambda s: s.context.GetContext(ctx.GetContextRequest(key=bad)), "key"),
        ("SaveContext", lambda s: s.context.SaveContext(ctx.SaveContextRequest(key=bad)), "key"),
        ("DeleteContext", lambda s: s.context.DeleteContext(
            ctx.DeleteContextRequest(key=bad)), "key"),
        ("AppendTranscript", lambda s: s.context.AppendTranscript(
            ctx.AppendTranscriptRequest(key="k", idempotency_key=bad)), "idempotency_key"),
        ("ListTranscript", lambda s: s.context.ListTranscript(
            ctx.ListTranscriptRequest(key=bad)), "key"),
    ]  # fmt: skip


async def test_nul_in_any_id_or_stored_text_is_invalid_argument(store: Store) -> None:
    """On PostgreSQL these reached the database (22021) and came back INTERNAL."""
    run = await store.root()
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    for name, call, field in _nul_requests(run, run.start.session_id):
        failure = await fails(call(store))
        assert (failure.code, failure.reason, failure.metadata.get("field")) == (
            INVALID,
            "CONTRACT_VALIDATION",
            field,
        ), name
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


# --- Deep JSON --------------------------------------------------------------------

DEEP = b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}"  # ~2 KB, 1000 deep


async def test_deep_json_is_exceeded_max_depth_everywhere(store: Store) -> None:
    assert len(DEEP) < 2100
    agent, run = unique("agent"), unique("run")
    event = ms.MemoryEvent(type="user_message", timestamp=ts(1), data=DEEP)
    failure = await fails_with(
        store.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id=agent, run_id=run, events=[event])
        ),
        INVALID,
        "CONTRACT_VALIDATION",
        "exceeded max depth",
    )
    assert failure.metadata["field"] == "events[0].data"

    tool_use = ctx.ContentBlock(
        type="tool_use", tool_use=ctx.ToolUseBlock(id="c1", name="search", input=DEEP)
    )
    cases = {
        "snapshot.messages[0].content[0].tool_use.input": ctx.ContextMessage(
            type="assistant", content=[tool_use]
        ),
        "snapshot.messages[0].meta": ctx.ContextMessage(type="assistant", meta=DEEP),
    }
    for field, message in cases.items():
        key = unique("context")
        failure = await fails_with(
            store.context.SaveContext(
                ctx.SaveContextRequest(key=key, snapshot=ctx.ContextSnapshot(messages=[message]))
            ),
            INVALID,
            "CONTRACT_VALIDATION",
            "exceeded max depth",
        )
        assert failure.metadata["field"] == field
        await fails_with(
            store.context.GetContext(ctx.GetContextRequest(key=key)),
            grpc.StatusCode.NOT_FOUND,
            "CONTEXT_NOT_FOUND",
        )


# --- Every time a Timestamp can carry (D7) ----------------------------------------

LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
FIRST_MS = -62_135_596_799_999  # 0001-01-01T00:00:00.001Z


@pytest.mark.parametrize("at_ms", [LAST_MS, FIRST_MS], ids=["9999", "0001"])
async def test_record_and_start_times_round_trip_over_the_whole_range(
    store: Store, at_ms: int
) -> None:
    session = await store.session()
    run = run_start(session_id=session, started_ms=at_ms)
    await store.runtime.StartRootRun(run.root_request())
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("late", at_ms=at_ms))
    )
    assert (await store.load(run.id)).started_at == ts(at_ms)
    assert [event.timestamp for event in await store.records(run.id)] == [ts(at_ms)] * 2
    runs = await store.admin.ListRunsBySession(sa.ListRunsBySessionRequest(session_id=session))
    assert [meta.started_at for meta in runs.runs] == [ts(at_ms)]


async def test_memory_event_times_keep_nanoseconds_over_the_whole_range(store: Store) -> None:
    agent, run = unique("agent"), unique("run")
    stamps = [
        Timestamp(seconds=253_402_300_799, nanos=999_999_999),
        Timestamp(seconds=-62_135_596_800, nanos=1),
        Timestamp(seconds=-1, nanos=999_999_999),
    ]
    events = [ms.MemoryEvent(type="user_message", timestamp=at, data=b"{}") for at in stamps]
    await store.memory.AppendEvents(
        ms.AppendEventsRequest(agent_id=agent, run_id=run, events=events)
    )
    loaded = await store.memory.LoadRun(ms.MemoryLoadRunRequest(agent_id=agent, run_id=run))
    assert [event.timestamp for event in loaded.events] == stamps


@pytest.mark.parametrize(
    ("at", "last_id"), [(1, "s\x00"), (10**30, "s"), (1, "x" * 1025)], ids=["nul", "time", "long"]
)
async def test_a_forged_page_token_is_invalid_not_internal(
    store: Store, at: int, last_id: str
) -> None:
    """A page token names a row by time and id; forged ones never reach the database."""
    import base64
    import json

    from runstore.contract.model import RunFilter, SessionFilter
    from runstore.server.core.listing import run_filter_digest, session_filter_digest

    def token(digest: str) -> str:
        text = json.dumps({"f": digest, "t": at, "id": last_id})
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    calls = [
        store.admin.ListSessions(
            sa.ListSessionsRequest(page_token=token(session_filter_digest(SessionFilter())))
        ),
        store.admin.ListRuns(sa.ListRunsRequest(page_token=token(run_filter_digest(RunFilter())))),
    ]
    for call in calls:
        failure = await fails_with(call, INVALID, "INVALID_ARGUMENT_READ", "invalid page_token")
        assert failure.metadata["field"] == "page_token"
    failure = await fails_with(
        store.admin.ListRuns(sa.ListRunsRequest(agent_id="a\x00")), INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.metadata["field"] == "agent_id"
