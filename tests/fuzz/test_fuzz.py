"""Property-based fuzzing of every RPC of every service, on every backend.

Each RPC gets valid-ish requests (built against real stored state) with one to
three fields replaced by edge values (empty, U+0000, huge, 1 KiB ids, deep
JSON, invalid UTF-8, out-of-range times, negative limits, unknown enum values,
cleared messages), plus raw bodies (random bytes, truncated and bit-flipped
serialisations). The properties:

* no call answers INTERNAL, UNKNOWN, DATA_LOSS, UNAVAILABLE or anything else
  outside the contract's codes, and every failure carries runstore's ErrorInfo;
* a rejected call wrote nothing: a fingerprint of every table (row counts and a
  hash of the contents, read directly from the database) is unchanged.

``make test`` runs ``RUNSTORE_FUZZ_EXAMPLES`` (default 12) examples per RPC and
per kind; a longer run: ``RUNSTORE_FUZZ_EXAMPLES=5000 pytest tests/fuzz``. The
tally of cases and codes is printed at the end of the module (``-s``) and, if
``RUNSTORE_FUZZ_REPORT`` names a file, written there as JSON.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import grpc
import pytest
from google.protobuf import descriptor as _descriptor
from google.protobuf import field_mask_pb2
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from runstore.server.app import SERVICE_NAMES, build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.db.postgres import asyncpg_dsn
from runstore.server.db.schema import metadata
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import namespace_admin_pb2_grpc as na_grpc
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests import postgres
from tests.seeds import Upload, declaration, messages, synchronous_request
from tests.support import Run, Store, failure_of, now_ms, run_start, ts, unique

T = TypeVar("T")

EXAMPLES = int(os.environ.get("RUNSTORE_FUZZ_EXAMPLES", "12"))
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=EXAMPLES <= 50,  # CI runs are reproducible; long runs explore
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)

LONG_RUN_TIMEOUT = pytest.mark.timeout(max(120, EXAMPLES))
"""A long run may take longer than the suite's per-test timeout."""

ALLOWED_FAILURES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,  # CONTEXT_VERSION_CONFLICT
}

# --- The server under fuzz: its own database, served from a loop thread ------------


SERVER_OWN_TABLES = frozenset({"quota_replicas"})
"""Written by the server's own clock (each replica's heartbeat, every 2 s
whatever the calls do: the commit-stall probe), never by a call."""


@dataclass
class Served:
    """A server and a channel on an event loop in a thread of their own, so
    Hypothesis (synchronous) can drive calls one at a time."""

    backend: str
    database_url: str
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    store: Store | None = None
    tally: collections.Counter[str] = field(default_factory=collections.Counter)
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _pg: asyncpg.Connection | None = None

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout=60)

    async def start(self) -> None:
        config = ServerConfig(listen="127.0.0.1:0", database_url=self.database_url, migrate=True)
        db = await self._stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))
        self._stack.push_async_callback(running.server.stop, None)
        target = f"127.0.0.1:{running.port}"
        channel = await self._stack.enter_async_context(grpc.aio.insecure_channel(target))
        self.store = Store(channel, target=target)
        if self.backend == "postgres":
            self._pg = await asyncpg.connect(asyncpg_dsn(self.database_url))
            self._stack.push_async_callback(self._pg.close)

    async def stop(self) -> None:
        await self._stack.aclose()

    async def fingerprint(self) -> dict[str, tuple[int, str]]:
        """Row count and content hash of every table the calls write, read
        straight from the database (PostgreSQL hashes on its side; SQLite rows
        are hashed here, bytes as they are)."""
        prints: dict[str, tuple[int, str]] = {}
        for table in metadata.sorted_tables:
            if table.name in SERVER_OWN_TABLES:
                continue
            order = ", ".join(column.name for column in table.primary_key.columns)
            if self._pg is not None:
                count, digest = await self._pg.fetchrow(
                    f"SELECT count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY {order}), ''))"
                    f" FROM {table.name} AS t"
                )
                prints[table.name] = (count, digest)
                continue
            path = make_url(self.database_url).database or ""
            hashed = hashlib.sha256()
            count = 0
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                for row in conn.execute(f"SELECT * FROM {table.name} ORDER BY {order}"):
                    count += 1
                    for value in row:
                        raw = value if isinstance(value, bytes) else repr(value).encode()
                        hashed.update(len(raw).to_bytes(8, "big") + raw)
            conn.close()
            prints[table.name] = (count, hashed.hexdigest())
        return prints


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    thread_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=thread_loop.run_forever, name="fuzz-server", daemon=True)
    thread.start()
    pg_database: Any = None

    def run(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, thread_loop).result(timeout=120)

    try:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'runstore.db'}"
        else:
            pg_database = postgres.fresh_database("runstore_fuzz")
            url = run(pg_database.__aenter__())
        env = Served(request.param, url, loop=thread_loop)
        run(env.start())
        try:
            yield env
        finally:
            run(env.stop())
            _report(env)
    finally:
        if pg_database is not None:
            run(pg_database.__aexit__(None, None, None))
        thread_loop.call_soon_threadsafe(thread_loop.stop)
        thread.join()
        thread_loop.close()


def _report(env: Served) -> None:
    cases = sum(count for key, count in env.tally.items() if key.startswith("code:"))
    summary = {"backend": env.backend, "examples_per_rpc": EXAMPLES, "cases": cases}
    summary.update(sorted(env.tally.items()))
    print(f"\nfuzz {json.dumps(summary)}")
    report = os.environ.get("RUNSTORE_FUZZ_REPORT")
    if report:
        with Path(report).open("a") as out:
            out.write(json.dumps(summary) + "\n")


# --- Valid-ish requests, one builder per RPC -------------------------------------


@dataclass
class World:
    """Stored state the base requests refer to, made once per backend."""

    session: str
    root: Run
    one_shot: Run
    agent: str
    memory_run: str
    context_key: str


_worlds: dict[str, World] = {}


async def _world(store: Store, backend: str) -> World:
    if backend not in _worlds:
        root = await store.root()
        await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=root.record("r1")))
        one_shot = await store.one_shot()
        agent, memory_run, context_key = unique("agent"), unique("memory"), unique("context")
        await store.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id=agent, run_id=memory_run, events=[_event()])
        )
        await store.context.SaveContext(
            ctx.SaveContextRequest(key=context_key, snapshot=_snapshot(), expected_version=0)
        )
        await store.context.AppendTranscript(
            ctx.AppendTranscriptRequest(key=context_key, messages=list(_snapshot().messages))
        )
        _worlds[backend] = World(
            root.start.session_id, root, one_shot, agent, memory_run, context_key
        )
    return _worlds[backend]


def _event() -> ms.MemoryEvent:
    return ms.MemoryEvent(
        type="tool_call",
        timestamp=ts(now_ms()),
        data=b'{"tool_call_id":"c1","tool_name":"search","args":{"q":"x"}}',
        labels={"k": "v"},
    )


def _snapshot() -> ctx.ContextSnapshot:
    return ctx.ContextSnapshot(
        messages=[
            ctx.ContextMessage(
                type="user", content=[ctx.ContentBlock(type="text", text=ctx.TextBlock(text="hi"))]
            ),
            ctx.ContextMessage(
                type="assistant",
                meta=b'{"m":1}',
                content=[
                    ctx.ContentBlock(
                        type="tool_use",
                        tool_use=ctx.ToolUseBlock(id="t1", name="search", input=b'{"q":"x"}'),
                    )
                ],
            ),
        ]
    )


Builder = Callable[[Store, World], Awaitable[Message]]


async def _fresh_root(store: Store, world: World) -> Run:
    return await store.root(world.session)


async def _start_root(store: Store, world: World) -> Message:
    request: Message = run_start(session_id=world.session).root_request()
    return request


async def _start_child(store: Store, world: World) -> Message:
    child = run_start(session_id=world.session, parent_run_id=world.root.id, agent_id="helper")
    request: Message = child.child_request(world.root.start.agent_id, link_key=unique("link"))
    return request


async def _start_one_shot(store: Store, world: World) -> Message:
    request: Message = run_start().one_shot_request()
    return request


async def _start_one_shot_child(store: Store, world: World) -> Message:
    child = run_start(parent_run_id=world.one_shot.id, agent_id="helper")
    request: Message = child.one_shot_child_request(
        world.one_shot.start.agent_id, link_key=unique("link")
    )
    return request


async def _cancellation(store: Store, world: World) -> Message:
    request: Message = (await _fresh_root(store, world)).cancellation_request()
    return request


async def _suspension(store: Store, world: World) -> Message:
    request: Message = (await _fresh_root(store, world)).suspension_request()
    return request


async def _repair_suspension(store: Store, world: World) -> Message:
    base = (await _fresh_root(store, world)).suspension_request()
    return rs.RepairRunSuspensionRequest(
        run_id=base.run_id, suspension=base.suspension, record=base.record
    )


async def _terminal(store: Store, world: World) -> Message:
    request: Message = (await _fresh_root(store, world)).terminal_request()
    return request


async def _repair_terminal(store: Store, world: World) -> Message:
    base = (await _fresh_root(store, world)).terminal_request(pb.RUN_STATUS_FAILED)
    return rs.RepairRunTerminalRequest(run_id=base.run_id, status=base.status, record=base.record)


async def _ended_session(store: Store, world: World) -> Message:
    session = await store.session()
    await store.end(session)
    return sa.PurgeSessionRequest(session_id=session)


async def _end_session(store: Store, world: World) -> Message:
    return sa.EndSessionRequest(session_id=await store.session(), ended_at=ts(now_ms()))


async def _const(message: Message) -> Message:
    return message


def _namespace_name() -> str:
    """A fresh namespace name of the name rule ([a-z0-9][a-z0-9-]*)."""
    return f"fz-{uuid.uuid4().hex[:12]}"


async def _created_namespace(store: Store, world: World) -> str:
    name = _namespace_name()
    await na_grpc.NamespaceAdminStub(store.channel).CreateNamespace(
        na.CreateNamespaceRequest(namespace=na.Namespace(name=name))
    )
    return name


async def _update_namespace(store: Store, world: World) -> Message:
    return na.UpdateNamespaceRequest(
        namespace=na.Namespace(name=await _created_namespace(store, world), description="fuzzed"),
        update_mask=field_mask_pb2.FieldMask(paths=["description"]),
    )


async def _delete_namespace(store: Store, world: World) -> Message:
    return na.DeleteNamespaceRequest(name=await _created_namespace(store, world))


async def _seed_upload(store: Store, world: World, stage: str) -> Upload:
    """A fresh upload of the world's session: begun, appended or published."""
    upload = Upload(store.runtime, declaration(session_id=world.session))
    await upload.begin()
    if stage != "begun":
        await upload.history()
        await upload.compiled()
    if stage == "published":
        await upload.publish()
    return upload


async def _synchronous_start(store: Store, world: World) -> Message:
    return await synchronous_request(store.runtime)


async def _begin_seed(store: Store, world: World) -> Message:
    decl = declaration(session_id=world.session)
    decl.rendered_prompts.add(prompt_id="p", version="1").scope.labels["k"] = "v"
    return sd.BeginRunSeedRequest(declaration=decl)


async def _append_seed(store: Store, world: World) -> Message:
    upload = await _seed_upload(store, world, "begun")
    return upload.request(messages(unique("m"), "0"))


async def _publish_seed(store: Store, world: World) -> Message:
    return (await _seed_upload(store, world, "appended")).publication()


async def _find_preparation(store: Store, world: World) -> Message:
    return (await _seed_upload(store, world, "published")).find()


async def _settle_preparation(store: Store, world: World) -> Message:
    return (await _seed_upload(store, world, "appended")).settle()


async def _load_seed(store: Store, world: World) -> Message:
    upload = await _seed_upload(store, world, "published")
    return sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="1")


async def _list_seed_records(store: Store, world: World) -> Message:
    upload = await _seed_upload(store, world, "published")
    return sd.ListRunSeedRecordsRequest(run_id=upload.run_id, end_id="1", limit=5)


async def _list_preparation_records(store: Store, world: World) -> Message:
    upload = await _seed_upload(store, world, "published")
    return sd.ListRunPreparationRecordsRequest(
        run_id=upload.run_id, end_id="2", after_id="", limit=5
    )


def _static(make: Callable[[World], Message]) -> Builder:
    async def build(store: Store, world: World) -> Message:
        return make(world)

    return build


BUILDERS: dict[str, Builder] = {
    "/runstore.v1.RuntimeStore/LoadSessionStatus": _static(
        lambda w: rs.LoadSessionStatusRequest(session_id=w.session)
    ),
    "/runstore.v1.RuntimeStore/StartRootRun": _start_root,
    "/runstore.v1.RuntimeStore/StartChildRun": _start_child,
    "/runstore.v1.RuntimeStore/StartOneShotRun": _start_one_shot,
    "/runstore.v1.RuntimeStore/StartOneShotChildRun": _start_one_shot_child,
    "/runstore.v1.RuntimeStore/AppendRunRecord": _static(
        lambda w: rs.AppendRunRecordRequest(record=w.root.record(unique("key"), turn_id="t1"))
    ),
    "/runstore.v1.RuntimeStore/AppendRunRecords": _static(
        lambda w: rs.AppendRunRecordsRequest(
            records=[w.root.record(unique("key"), turn_id="t1") for _ in range(3)]
        )
    ),
    "/runstore.v1.RuntimeStore/AppendRunRecordCalls": _static(
        lambda w: rs.AppendRunRecordCallsRequest(
            calls=[
                rs.AppendRunRecordCall(
                    request=rs.AppendRunRecordRequest(
                        record=w.root.record(unique("key"), turn_id="t1")
                    )
                )
                for _ in range(3)
            ]
        )
    ),
    "/runstore.v1.RuntimeStore/RecordRunCancellation": _cancellation,
    "/runstore.v1.RuntimeStore/RecordRunSuspension": _suspension,
    "/runstore.v1.RuntimeStore/RecordRunTerminal": _terminal,
    "/runstore.v1.RuntimeStore/RepairRunSuspension": _repair_suspension,
    "/runstore.v1.RuntimeStore/RepairRunTerminal": _repair_terminal,
    "/runstore.v1.RuntimeStore/LoadRun": _static(lambda w: rs.LoadRunRequest(run_id=w.root.id)),
    "/runstore.v1.RuntimeStore/LoadRunSuspension": _static(
        lambda w: rs.LoadRunSuspensionRequest(run_id=w.root.id)
    ),
    "/runstore.v1.RuntimeStore/ListRunRecords": _static(
        lambda w: rs.ListRunRecordsRequest(run_id=w.root.id, cursor="1", limit=10)
    ),
    "/runstore.v1.RuntimeStore/ListSessionRunRecords": _static(
        lambda w: rs.ListSessionRunRecordsRequest(session_id=w.session, cursor="1", limit=10)
    ),
    "/runstore.v1.RuntimeStore/WatchSessionRunRecords": _static(
        lambda w: rs.WatchSessionRunRecordsRequest(session_id=w.session, cursor="1")
    ),
    "/runstore.v1.RuntimeStore/WatchRunRecords": _static(
        lambda w: rs.WatchRunRecordsRequest(run_id=w.root.id, cursor="1")
    ),
    "/runstore.v1.RuntimeStore/ListRunTranscriptRecords": _static(
        lambda w: rs.ListRunTranscriptRecordsRequest(
            run_id=w.root.id, through_record_id="2", after_record_id="1", limit=10
        )
    ),
    "/runstore.v1.RuntimeStore/StartSynchronousRun": _synchronous_start,
    "/runstore.v1.RuntimeStore/BeginRunSeed": _begin_seed,
    "/runstore.v1.RuntimeStore/AppendRunSeed": _append_seed,
    "/runstore.v1.RuntimeStore/PublishRunSeed": _publish_seed,
    "/runstore.v1.RuntimeStore/FindRunPreparation": _find_preparation,
    "/runstore.v1.RuntimeStore/SettleRunPreparation": _settle_preparation,
    "/runstore.v1.RuntimeStore/ListRunPreparationRecords": _list_preparation_records,
    "/runstore.v1.RuntimeStore/LoadRunSeed": _load_seed,
    "/runstore.v1.RuntimeStore/ListRunSeedRecords": _list_seed_records,
    "/runstore.v1.SessionAdmin/CreateSession": _static(
        lambda w: sa.CreateSessionRequest(session_id=unique("session"), created_at=ts(now_ms()))
    ),
    "/runstore.v1.SessionAdmin/LoadSession": _static(
        lambda w: sa.LoadSessionRequest(session_id=w.session)
    ),
    "/runstore.v1.SessionAdmin/EndSession": _end_session,
    "/runstore.v1.SessionAdmin/PurgeSession": _ended_session,
    "/runstore.v1.SessionAdmin/ListRunsBySession": _static(
        lambda w: sa.ListRunsBySessionRequest(
            session_id=w.session, statuses=[pb.RUN_STATUS_RUNNING]
        )
    ),
    "/runstore.v1.SessionAdmin/ListSessions": _static(
        lambda w: sa.ListSessionsRequest(
            statuses=[pb.SESSION_STATUS_ACTIVE],
            created_after=ts(1),
            created_before=ts(now_ms() + 60_000),
            page_size=2,
        )
    ),
    "/runstore.v1.SessionAdmin/ListRuns": _static(
        lambda w: sa.ListRunsRequest(
            session_id=w.session,
            agent_id=w.root.start.agent_id,
            statuses=[pb.RUN_STATUS_RUNNING],
            started_after=ts(1),
            started_before=ts(now_ms() + 60_000),
            page_size=2,
        )
    ),
    "/runstore.v1.MemoryStore/LoadRun": _static(
        lambda w: ms.MemoryLoadRunRequest(
            agent_id=w.agent, run_id=w.memory_run, cursor="1", limit=5
        )
    ),
    "/runstore.v1.MemoryStore/AppendEvents": _static(
        lambda w: ms.AppendEventsRequest(
            agent_id=w.agent,
            run_id=w.memory_run,
            events=[_event(), _event()],
            idempotency_key=unique("idem"),
        )
    ),
    "/runstore.v1.MemoryStore/DeleteRun": _static(
        lambda w: ms.MemoryDeleteRunRequest(agent_id=w.agent, run_id=unique("mrun"))
    ),
    # A cut-off long before any session of the fuzz world ended.
    "/runstore.v1.SessionAdmin/PurgeEndedSessions": _static(
        lambda w: sa.PurgeEndedSessionsRequest(ended_before=ts(-9_000_000_000_000), limit=1)
    ),
    "/runstore.v1.SessionAdmin/PurgeSessionlessRuns": _static(
        lambda w: sa.PurgeSessionlessRunsRequest(finished_before=ts(-9_000_000_000_000), limit=1)
    ),
    "/runstore.v1.NamespaceAdmin/CreateNamespace": _static(
        lambda w: na.CreateNamespaceRequest(namespace=na.Namespace(name=_namespace_name()))
    ),
    "/runstore.v1.NamespaceAdmin/GetNamespace": _static(
        lambda w: na.GetNamespaceRequest(name="default")
    ),
    "/runstore.v1.NamespaceAdmin/ListNamespaces": _static(
        lambda w: na.ListNamespacesRequest(page_size=2)
    ),
    "/runstore.v1.NamespaceAdmin/UpdateNamespace": _update_namespace,
    "/runstore.v1.NamespaceAdmin/DeleteNamespace": _delete_namespace,
    "/runstore.v1.ContextStore/GetContext": _static(
        lambda w: ctx.GetContextRequest(key=w.context_key, version=1)
    ),
    "/runstore.v1.ContextStore/SaveContext": _static(
        lambda w: ctx.SaveContextRequest(
            key=unique("context"), snapshot=_snapshot(), expected_version=0
        )
    ),
    "/runstore.v1.ContextStore/DeleteContext": _static(
        lambda w: ctx.DeleteContextRequest(key=unique("context"))
    ),
    "/runstore.v1.ContextStore/AppendTranscript": _static(
        lambda w: ctx.AppendTranscriptRequest(
            key=w.context_key, messages=list(_snapshot().messages), idempotency_key=unique("i")
        )
    ),
    "/runstore.v1.ContextStore/ListTranscript": _static(
        lambda w: ctx.ListTranscriptRequest(key=w.context_key, cursor="1", limit=1)
    ),
}


def _all_methods() -> list[str]:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    return [
        f"/{name}/{method.name}"
        for name in SERVICE_NAMES
        for method in pool.FindServiceByName(name).methods
    ]


METHODS = _all_methods()


def test_every_rpc_of_every_service_is_fuzzed() -> None:
    assert sorted(BUILDERS) == sorted(METHODS)


# --- Mutations -------------------------------------------------------------------

DEEP_JSON = b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}"

EDGE_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "\x00",
            "a\x00b",
            " ",
            "0",
            "-1",
            "01",
            "18446744073709551617",
            "x" * 1024,
            "x" * 1025,
            "é" * 512,
            "é" * 513,
            "🙂" * 257,
            "\u2028\ufeff",
            "'; DROP TABLE runs; --",
            "runtime.run_started",
            "runtime.run_completed",
            "session_ended",
        ]
    ),
    st.text(max_size=40),
    st.builds(lambda n: "y" * n, st.sampled_from([5_000, 300_000])),
)

EDGE_BYTES = st.one_of(
    st.sampled_from(
        [
            b"",
            b"\xff",
            b"\xc3\x28",
            b"null",
            b"[]",
            b"{}",
            b'{"a":1}{"b":2}',
            b'{"reason":"a\\u0000"}',
            b'{"labels":{"site":"\\u0000"}}',
            b'{"status":"success","phase":"completed","labels":{"site":"one"}}',
            DEEP_JSON,
            b"[" * 100_000,
        ]
    ),
    st.binary(max_size=48),
    st.builds(lambda n: b"z" * n, st.sampled_from([5_000, 300_000])),
)

_INT_RANGES = {
    _descriptor.FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    _descriptor.FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    _descriptor.FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    _descriptor.FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    _descriptor.FieldDescriptor.TYPE_ENUM: (-(2**31), 2**31 - 1),
}


def _edge_int(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [value for value in (0, -1, 1, 2, 5, 99, low, high) if low <= value <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


EDGE_TIMESTAMP = st.builds(
    lambda seconds, nanos: Timestamp(seconds=seconds, nanos=nanos),
    st.one_of(
        st.sampled_from(
            [0, -1, -62135596801, -62135596800, 253402300799, 253402300800, 2**62, -(2**62)]
        ),
        st.integers(-(2**63), 2**63 - 1),
    ),
    st.one_of(
        st.sampled_from([0, 1, 999_999_999, 1_000_000_000, -1]), st.integers(-(2**31), 2**31 - 1)
    ),
)


def _paths(message: Message, prefix: tuple[Any, ...] = (), depth: int = 0) -> list[tuple[Any, ...]]:
    """Every field path of ``message`` worth mutating (set sub-messages included)."""
    paths: list[tuple[Any, ...]] = []
    for fd in message.DESCRIPTOR.fields:
        path = (*prefix, fd.name)
        paths.append(path)
        if fd.type != fd.TYPE_MESSAGE or depth >= 4:
            continue
        if fd.message_type.GetOptions().map_entry:
            continue
        if fd.is_repeated:
            items = getattr(message, fd.name)
            if len(items):
                paths.extend(_paths(items[0], (*path, 0), depth + 1))
        elif message.HasField(fd.name) and fd.message_type.full_name != "google.protobuf.Timestamp":
            paths.extend(_paths(getattr(message, fd.name), path, depth + 1))
    return paths


def _resolve(message: Message, path: tuple[Any, ...]) -> tuple[Message, str]:
    target: Any = message
    for step in path[:-1]:
        target = target[step] if isinstance(step, int) else getattr(target, step)
    return target, path[-1]


@st.composite
def _mutation(draw: st.DrawFn, message: Message) -> str:
    """Applies one edge-value mutation to ``message``; returns what it did."""
    path = draw(st.sampled_from(_paths(message)))
    target, name = _resolve(message, path)
    fd = target.DESCRIPTOR.fields_by_name[name]
    where = ".".join(str(step) for step in path)
    if fd.type == fd.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry:
        key = draw(EDGE_TEXT)
        value = draw(EDGE_TEXT)
        getattr(target, name)[key] = value
        return f"{where}[+]"
    if fd.is_repeated:
        items = getattr(target, name)
        action = draw(st.sampled_from(["clear", "duplicate", "append"]))
        if action == "clear" or not len(items):
            del items[:]
        elif fd.type == fd.TYPE_MESSAGE:
            items.add().CopyFrom(items[0])
        elif fd.type == fd.TYPE_ENUM:
            items.append(draw(_edge_int(*_INT_RANGES[fd.TYPE_ENUM])))
        else:
            items.append(items[0])
        return f"{where}:{action}"
    if fd.type == fd.TYPE_MESSAGE:
        if fd.message_type.full_name == "google.protobuf.Timestamp" and draw(st.booleans()):
            getattr(target, name).CopyFrom(draw(EDGE_TIMESTAMP))
            return f"{where}=timestamp"
        target.ClearField(name)
        return f"{where}:clear"
    if fd.type == fd.TYPE_STRING:
        setattr(target, name, draw(EDGE_TEXT))
    elif fd.type == fd.TYPE_BYTES:
        setattr(target, name, draw(EDGE_BYTES))
    elif fd.type == fd.TYPE_BOOL:
        setattr(target, name, draw(st.booleans()))
    elif fd.type in _INT_RANGES:
        setattr(target, name, draw(_edge_int(*_INT_RANGES[fd.type])))
    else:  # pragma: no cover - no other scalar types in runstore.v1
        raise AssertionError(f"unhandled field type {fd.type} at {where}")
    return where


@st.composite
def _raw_body(draw: st.DrawFn, valid: bytes) -> bytes:
    """Draws do not depend on ``valid`` (ids differ in length between runs):
    positions are drawn large and taken modulo its length."""
    kind = draw(st.sampled_from(["random", "truncated", "flipped", "garbage-tail"]))
    positions = draw(st.lists(st.integers(0, 2**20), min_size=4, max_size=4))
    bits = draw(st.lists(st.integers(0, 7), min_size=4, max_size=4))
    extra = draw(st.binary(min_size=1, max_size=64))
    if kind == "random" or not valid:
        return extra
    if kind == "truncated":
        return valid[: positions[0] % len(valid)]
    if kind == "flipped":
        data = bytearray(valid)
        for position, bit in zip(positions[: 1 + positions[1] % 4], bits, strict=False):
            data[position % len(data)] ^= 1 << bit
        return bytes(data)
    return valid + extra[:16]


# --- The properties -----------------------------------------------------------------


async def _send(served: Served, method: str, body: bytes) -> None:
    """Sends ``body`` to ``method``; asserts the outcome and that a rejection wrote nothing."""
    assert served.store is not None
    before = await served.fingerprint()
    try:
        if "/Watch" in method:
            await _first_of_stream(served, method, body)
        else:
            call = served.store.channel.unary_unary(
                method, request_serializer=None, response_deserializer=None
            )
            await call(body, timeout=30)
    except grpc.aio.AioRpcError as err:
        code = err.code()
        served.tally[f"code:{code.name}"] += 1
        assert code in ALLOWED_FAILURES, f"{method} answered {code.name}: {err.details()}"
        failure = failure_of(err)  # runstore's ErrorInfo, with a request id
        served.tally[f"reason:{failure.reason}"] += 1
        after = await served.fingerprint()
        changed = [table for table in before if before[table] != after[table]]
        assert not changed, f"{method} was rejected ({failure.reason}) but wrote {changed}"
        return
    served.tally["code:OK"] += 1


async def _first_of_stream(served: Served, method: str, body: bytes) -> None:
    """A Watch stream's first message or its failure; a stream that is just
    quietly open after a second is fine (it waits for records)."""
    assert served.store is not None
    stream = served.store.channel.unary_stream(
        method, request_serializer=None, response_deserializer=None
    )(body, timeout=30)
    try:
        await asyncio.wait_for(stream.read(), 1.0)
    except TimeoutError:
        pass
    finally:
        stream.cancel()


async def _base(served: Served, method: str) -> Message:
    """A fresh valid-ish request of ``method`` against the backend's stored world."""
    assert served.store is not None
    return await BUILDERS[method](served.store, await _world(served.store, served.backend))


@LONG_RUN_TIMEOUT
@pytest.mark.parametrize("method", METHODS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_requests_never_fail_outside_the_contract_and_rejections_write_nothing(
    served: Served, method: str, data: st.DataObject
) -> None:
    request = served.call(_base(served, method))
    steps = data.draw(st.integers(1, 3), label="mutations")
    for _ in range(steps):
        data.draw(_mutation(request), label="mutation")
    served.call(_send(served, method, request.SerializeToString()))


@LONG_RUN_TIMEOUT
@pytest.mark.parametrize("method", METHODS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_unparsable_bodies_never_fail_outside_the_contract_and_write_nothing(
    served: Served, method: str, data: st.DataObject
) -> None:
    valid = served.call(_base(served, method)).SerializeToString()
    body = data.draw(_raw_body(valid), label="body")
    served.call(_send(served, method, body))
