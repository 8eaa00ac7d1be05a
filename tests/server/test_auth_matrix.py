"""Every RPC of every service × every role, no credential and a bogus token.

Each call is either allowed (it succeeds: every request is one that really
writes or finds what it reads) or refused exactly: UNAUTHENTICATED for no or a
wrong credential, PERMISSION_DENIED for a role the table does not allow, both
with ErrorInfo metadata ``method``. A refused call writes nothing: the whole
database is compared before and after. Runs on a fresh database per backend.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.app import SERVICE_NAMES
from runstore.server.auth import roles
from runstore.server.config import ServerConfig
from runstore.server.core.namespaces import NamespaceStore
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests import backends
from tests.secured import (
    ROLES,
    Entry,
    bearer,
    channel_with_token,
    dump_database,
    refusal,
    running_server,
    write_auth_file,
)
from tests.seeds import Upload, declaration, messages, synchronous_request
from tests.support import Run, Store, now_ms, run_start, ts, unique

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
CALLERS = (*ROLES, "none", "bogus")


@dataclass
class Secured:
    admin: Store
    """Stubs whose every call carries the admin token (for setting up state)."""
    anonymous: Store
    """Stubs on a channel that sends no credential of its own."""
    tokens: dict[str, str]
    database_url: str
    namespaces: NamespaceStore | None
    """The server's namespace store: a deleted namespace's purge runs in the
    background, and must be over before the next case fingerprints the tables."""

    def metadata(self, caller: str) -> tuple[tuple[str, str], ...]:
        # Every call names the namespace "default" (the admin is bound to "*",
        # so it must; the others act there anyway): the roles are under test.
        in_default = ((NAMESPACE_KEY, "default"),)
        if caller == "none":
            return in_default
        if caller == "bogus":
            return (*bearer(secrets.token_urlsafe(24)), *in_default)
        return (*bearer(self.tokens[caller]), *in_default)


@pytest.fixture(scope="module", params=backends.BACKENDS)
async def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Secured]:
    directory = tmp_path_factory.mktemp("matrix")
    # The admin may manage namespaces (bound to every one); the other roles
    # are bound to "default" (no namespaces key).
    entries = {role: Entry(role, namespaces=["*"] if role == "admin" else None) for role in ROLES}
    auth_file = write_auth_file(directory / "auth.toml", entries)
    async with backends.database(request.param, directory) as url:
        async for secured in _serve(url, auth_file, entries):
            yield secured


async def _serve(url: str, auth_file: Path, entries: dict[str, Entry]) -> AsyncIterator[Secured]:
    config = ServerConfig(
        listen="127.0.0.1:0", database_url=url, migrate=True, auth_file=str(auth_file)
    )
    async with running_server(config) as running:
        target = f"127.0.0.1:{running.port}"
        async with (
            channel_with_token(target, entries["admin"].token, namespace="default") as admin,
            grpc.aio.insecure_channel(target) as anonymous,
        ):
            yield Secured(
                Store(admin, target=target),
                Store(anonymous, target=target),
                {role: entry.token for role, entry in entries.items()},
                url,
                running.namespaces,
            )


# --- One request per method, each one that succeeds when allowed ---------------------

Builder = Callable[[Store], Awaitable[Any]]


def _memory_event() -> ms.MemoryEvent:
    return ms.MemoryEvent(type="user_message", timestamp=ts(now_ms()), data=b'{"message":"hi"}')


def _context_message() -> ctx.ContextMessage:
    return ctx.ContextMessage(
        type="user", content=[ctx.ContentBlock(type="text", text=ctx.TextBlock(text="hi"))]
    )


async def _suspended(store: Store) -> Run:
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    return run


async def _ended_session(store: Store) -> str:
    session_id = await store.session()
    await store.end(session_id)
    return session_id


async def _memory_run(store: Store) -> tuple[str, str]:
    agent, run = unique("agent"), unique("mrun")
    await store.memory.AppendEvents(
        ms.AppendEventsRequest(agent_id=agent, run_id=run, events=[_memory_event()])
    )
    return agent, run


async def _context_key(store: Store) -> str:
    key = unique("ctx")
    await store.context.SaveContext(
        ctx.SaveContextRequest(key=key, snapshot=ctx.ContextSnapshot(system_prompt="s"))
    )
    await store.context.AppendTranscript(
        ctx.AppendTranscriptRequest(key=key, messages=[_context_message()])
    )
    return key


async def _child(store: Store) -> Any:
    parent = await store.root()
    child = run_start(session_id=parent.start.session_id, parent_run_id=parent.id)
    return child.child_request(parent.start.agent_id)


async def _one_shot_child(store: Store) -> Any:
    parent = await store.one_shot()
    child = run_start(parent_run_id=parent.id)
    return child.one_shot_child_request(parent.start.agent_id)


async def _root_request(store: Store) -> Any:
    return run_start(session_id=await store.session()).root_request()


async def _one_shot_request(store: Store) -> Any:
    return run_start().one_shot_request()


async def _append(store: Store) -> Any:
    return rs.AppendRunRecordRequest(record=(await store.root()).record(unique("key")))


async def _append_batch(store: Store) -> Any:
    run = await store.root()
    return rs.AppendRunRecordsRequest(records=[run.record(unique("key")) for _ in range(2)])


async def _append_calls(store: Store) -> Any:
    run = await store.root()
    return rs.AppendRunRecordCallsRequest(
        calls=[
            rs.AppendRunRecordCall(
                request=rs.AppendRunRecordRequest(record=run.record(unique("k")))
            )
            for _ in range(2)
        ]
    )


async def _cancel(store: Store) -> Any:
    return (await store.root()).cancellation_request()


async def _suspend(store: Store) -> Any:
    return (await store.root()).suspension_request()


async def _terminal(store: Store) -> Any:
    return (await store.root()).terminal_request()


async def _repair_suspension(store: Store) -> Any:
    request = (await store.root()).suspension_request()
    return rs.RepairRunSuspensionRequest(
        run_id=request.run_id, suspension=request.suspension, record=request.record
    )


async def _repair_terminal(store: Store) -> Any:
    request = (await store.root()).terminal_request()
    return rs.RepairRunTerminalRequest(
        run_id=request.run_id, status=request.status, record=request.record
    )


async def _session_status(store: Store) -> Any:
    return rs.LoadSessionStatusRequest(session_id=await store.session())


async def _load_run(store: Store) -> Any:
    return rs.LoadRunRequest(run_id=(await store.root()).id)


async def _load_suspension(store: Store) -> Any:
    return rs.LoadRunSuspensionRequest(run_id=(await _suspended(store)).id)


async def _list_records(store: Store) -> Any:
    return rs.ListRunRecordsRequest(run_id=(await store.root()).id, limit=10)


async def _list_session_records(store: Store) -> Any:
    return rs.ListSessionRunRecordsRequest(session_id=await store.session(), limit=10)


async def _list_transcript(store: Store) -> Any:
    return rs.ListRunTranscriptRecordsRequest(
        run_id=(await store.root()).id, through_record_id="1", limit=10
    )


async def _synchronous_start(store: Store) -> Any:
    return await synchronous_request(store.runtime)


async def _begin_seed(store: Store) -> Any:
    return sd.BeginRunSeedRequest(declaration=declaration())


async def _append_seed(store: Store) -> Any:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    return upload.request(messages(unique("m"), "0"))


async def _appended(store: Store) -> Upload:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    await upload.history()
    await upload.compiled()
    return upload


async def _publish_seed(store: Store) -> Any:
    return (await _appended(store)).publication()


async def _find_preparation(store: Store) -> Any:
    return (await Upload(store.runtime, declaration()).published()).find()


async def _settle_preparation(store: Store) -> Any:
    return (await _appended(store)).settle()


async def _list_preparation(store: Store) -> Any:
    upload = await Upload(store.runtime, declaration()).published()
    return sd.ListRunPreparationRecordsRequest(run_id=upload.run_id, end_id="2", limit=5)


async def _load_seed(store: Store) -> Any:
    upload = await Upload(store.runtime, declaration()).published()
    return sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="1")


async def _list_seed(store: Store) -> Any:
    upload = await Upload(store.runtime, declaration()).published()
    return sd.ListRunSeedRecordsRequest(run_id=upload.run_id, end_id="1", limit=5)


async def _finished_run(store: Store) -> Any:
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    return run


async def _watch_session(store: Store) -> Any:
    """A watch of a session whose run finished: the backlog, then (for this
    test) the caller stops reading."""
    run = await _finished_run(store)
    return rs.WatchSessionRunRecordsRequest(session_id=run.start.session_id)


async def _watch_run(store: Store) -> Any:
    """A watch of a finished run: the backlog, then the stream ends."""
    return rs.WatchRunRecordsRequest(run_id=(await _finished_run(store)).id)


async def _create_session(store: Store) -> Any:
    return sa.CreateSessionRequest(session_id=unique("session"), created_at=ts(now_ms()))


async def _load_session(store: Store) -> Any:
    return sa.LoadSessionRequest(session_id=await store.session())


async def _end_session(store: Store) -> Any:
    return sa.EndSessionRequest(session_id=await store.session(), ended_at=ts(now_ms()))


async def _purge_session(store: Store) -> Any:
    return sa.PurgeSessionRequest(session_id=await _ended_session(store))


async def _purge_ended_sessions(store: Store) -> Any:
    await _ended_session(store)
    return sa.PurgeEndedSessionsRequest(ended_before=ts(now_ms() + 60_000), limit=1)


async def _purge_sessionless_runs(store: Store) -> Any:
    # A cut-off before any run of the shared database finished: the role is
    # what is under test, not what gets deleted.
    return sa.PurgeSessionlessRunsRequest(finished_before=ts(-9_000_000_000_000), limit=1)


async def _runs_by_session(store: Store) -> Any:
    return sa.ListRunsBySessionRequest(session_id=(await store.root()).start.session_id)


async def _list_sessions(store: Store) -> Any:
    await _ended_session(store)
    return sa.ListSessionsRequest(statuses=[pb.SESSION_STATUS_ENDED], page_size=1)


async def _list_runs(store: Store) -> Any:
    return sa.ListRunsRequest(session_id=(await store.root()).start.session_id, page_size=1)


async def _memory_load(store: Store) -> Any:
    agent, run = await _memory_run(store)
    return ms.MemoryLoadRunRequest(agent_id=agent, run_id=run)


async def _memory_append(store: Store) -> Any:
    agent, run = await _memory_run(store)
    return ms.AppendEventsRequest(
        agent_id=agent, run_id=run, events=[_memory_event()], idempotency_key=unique("idem")
    )


async def _memory_delete(store: Store) -> Any:
    agent, run = await _memory_run(store)
    return ms.MemoryDeleteRunRequest(agent_id=agent, run_id=run)


async def _get_context(store: Store) -> Any:
    return ctx.GetContextRequest(key=await _context_key(store))


async def _save_context(store: Store) -> Any:
    return ctx.SaveContextRequest(
        key=await _context_key(store),
        snapshot=ctx.ContextSnapshot(system_prompt="t"),
        expected_version=1,
    )


async def _delete_context(store: Store) -> Any:
    return ctx.DeleteContextRequest(key=await _context_key(store))


async def _append_transcript(store: Store) -> Any:
    return ctx.AppendTranscriptRequest(
        key=await _context_key(store), messages=[_context_message()], idempotency_key=unique("i")
    )


async def _list_context_transcript(store: Store) -> Any:
    return ctx.ListTranscriptRequest(key=await _context_key(store))


async def _namespace(store: Store) -> str:
    name = unique("ns")
    await store.namespaces.CreateNamespace(
        na.CreateNamespaceRequest(namespace=na.Namespace(name=name))
    )
    return name


async def _create_namespace(store: Store) -> Any:
    return na.CreateNamespaceRequest(namespace=na.Namespace(name=unique("ns")))


async def _get_namespace(store: Store) -> Any:
    return na.GetNamespaceRequest(name=await _namespace(store))


async def _list_namespaces(store: Store) -> Any:
    return na.ListNamespacesRequest(page_size=1)


async def _update_namespace(store: Store) -> Any:
    return na.UpdateNamespaceRequest(
        namespace=na.Namespace(name=await _namespace(store), description="changed"),
        update_mask={"paths": ["description"]},
    )


async def _delete_namespace(store: Store) -> Any:
    return na.DeleteNamespaceRequest(name=await _namespace(store))


BUILDERS: dict[str, tuple[str, Builder]] = {
    "/runstore.v1.RuntimeStore/LoadSessionStatus": ("runtime", _session_status),
    "/runstore.v1.RuntimeStore/StartRootRun": ("runtime", _root_request),
    "/runstore.v1.RuntimeStore/StartChildRun": ("runtime", _child),
    "/runstore.v1.RuntimeStore/StartOneShotRun": ("runtime", _one_shot_request),
    "/runstore.v1.RuntimeStore/StartOneShotChildRun": ("runtime", _one_shot_child),
    "/runstore.v1.RuntimeStore/StartSynchronousRun": ("runtime", _synchronous_start),
    "/runstore.v1.RuntimeStore/AppendRunRecord": ("runtime", _append),
    "/runstore.v1.RuntimeStore/AppendRunRecords": ("runtime", _append_batch),
    "/runstore.v1.RuntimeStore/AppendRunRecordCalls": ("runtime", _append_calls),
    "/runstore.v1.RuntimeStore/RecordRunCancellation": ("runtime", _cancel),
    "/runstore.v1.RuntimeStore/RecordRunSuspension": ("runtime", _suspend),
    "/runstore.v1.RuntimeStore/RecordRunTerminal": ("runtime", _terminal),
    "/runstore.v1.RuntimeStore/RepairRunSuspension": ("runtime", _repair_suspension),
    "/runstore.v1.RuntimeStore/RepairRunTerminal": ("runtime", _repair_terminal),
    "/runstore.v1.RuntimeStore/LoadRun": ("runtime", _load_run),
    "/runstore.v1.RuntimeStore/LoadRunSuspension": ("runtime", _load_suspension),
    "/runstore.v1.RuntimeStore/ListRunRecords": ("runtime", _list_records),
    "/runstore.v1.RuntimeStore/ListSessionRunRecords": ("runtime", _list_session_records),
    "/runstore.v1.RuntimeStore/ListRunTranscriptRecords": ("runtime", _list_transcript),
    "/runstore.v1.RuntimeStore/WatchSessionRunRecords": ("runtime", _watch_session),
    "/runstore.v1.RuntimeStore/WatchRunRecords": ("runtime", _watch_run),
    "/runstore.v1.RuntimeStore/BeginRunSeed": ("runtime", _begin_seed),
    "/runstore.v1.RuntimeStore/AppendRunSeed": ("runtime", _append_seed),
    "/runstore.v1.RuntimeStore/PublishRunSeed": ("runtime", _publish_seed),
    "/runstore.v1.RuntimeStore/FindRunPreparation": ("runtime", _find_preparation),
    "/runstore.v1.RuntimeStore/SettleRunPreparation": ("runtime", _settle_preparation),
    "/runstore.v1.RuntimeStore/ListRunPreparationRecords": ("runtime", _list_preparation),
    "/runstore.v1.RuntimeStore/LoadRunSeed": ("runtime", _load_seed),
    "/runstore.v1.RuntimeStore/ListRunSeedRecords": ("runtime", _list_seed),
    "/runstore.v1.SessionAdmin/CreateSession": ("admin", _create_session),
    "/runstore.v1.SessionAdmin/LoadSession": ("admin", _load_session),
    "/runstore.v1.SessionAdmin/EndSession": ("admin", _end_session),
    "/runstore.v1.SessionAdmin/PurgeSession": ("admin", _purge_session),
    "/runstore.v1.SessionAdmin/ListRunsBySession": ("admin", _runs_by_session),
    "/runstore.v1.SessionAdmin/ListSessions": ("admin", _list_sessions),
    "/runstore.v1.SessionAdmin/ListRuns": ("admin", _list_runs),
    "/runstore.v1.SessionAdmin/PurgeEndedSessions": ("admin", _purge_ended_sessions),
    "/runstore.v1.SessionAdmin/PurgeSessionlessRuns": ("admin", _purge_sessionless_runs),
    "/runstore.v1.MemoryStore/LoadRun": ("memory", _memory_load),
    "/runstore.v1.MemoryStore/AppendEvents": ("memory", _memory_append),
    "/runstore.v1.MemoryStore/DeleteRun": ("memory", _memory_delete),
    "/runstore.v1.ContextStore/GetContext": ("context", _get_context),
    "/runstore.v1.ContextStore/SaveContext": ("context", _save_context),
    "/runstore.v1.ContextStore/DeleteContext": ("context", _delete_context),
    "/runstore.v1.ContextStore/AppendTranscript": ("context", _append_transcript),
    "/runstore.v1.ContextStore/ListTranscript": ("context", _list_context_transcript),
    "/runstore.v1.NamespaceAdmin/CreateNamespace": ("namespaces", _create_namespace),
    "/runstore.v1.NamespaceAdmin/GetNamespace": ("namespaces", _get_namespace),
    "/runstore.v1.NamespaceAdmin/ListNamespaces": ("namespaces", _list_namespaces),
    "/runstore.v1.NamespaceAdmin/UpdateNamespace": ("namespaces", _update_namespace),
    "/runstore.v1.NamespaceAdmin/DeleteNamespace": ("namespaces", _delete_namespace),
}

READ_ONLY_PREFIXES = ("Load", "List", "Get", "Watch")


def _served_methods() -> set[str]:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    return {
        f"/{name}/{method.name}"
        for name in SERVICE_NAMES
        for method in pool.FindServiceByName(name).methods
    }


def test_every_runstore_method_is_in_the_matrix_and_the_role_table() -> None:
    """A new RPC fails here until it has a role-table entry and a matrix request."""
    served = _served_methods()
    assert served == set(BUILDERS)
    assert served <= set(roles.METHOD_ROLES)


def _call(store: Store, method: str, request: Any, caller: str, secured: Secured) -> Any:
    stub_name, _ = BUILDERS[method]
    stub = getattr(store, stub_name)
    call = getattr(stub, method.rsplit("/", 1)[1])(request, metadata=secured.metadata(caller))
    return _first_message(call) if "/Watch" in method else call


async def _first_message(stream: Any) -> Any:
    """A Watch call as an awaitable: its first message (refusals raise here)."""
    try:
        return await stream.read()
    finally:
        stream.cancel()


@pytest.mark.parametrize("method", sorted(BUILDERS))
async def test_every_caller_is_allowed_or_refused_exactly(secured: Secured, method: str) -> None:
    _, build = BUILDERS[method]
    allowed = roles.METHOD_ROLES[method]
    # Refusals first: one request that would write (or read) for real if allowed.
    request = await build(secured.admin)
    before = await dump_database(secured.database_url)
    for caller in CALLERS:
        if caller in allowed:
            continue
        expected = (
            (PERMISSION_DENIED, "PERMISSION_DENIED", method)
            if caller in ROLES
            else (UNAUTHENTICATED, "UNAUTHENTICATED", method)
        )
        got = await refusal(_call(secured.anonymous, method, request, caller, secured))
        assert got == expected, (caller, got)
    assert await dump_database(secured.database_url) == before, "a refused call wrote"
    # Then every allowed role succeeds with a fresh request of its own.
    for caller in ROLES:
        if caller in allowed:
            request = await build(secured.admin)
            await _call(secured.anonymous, method, request, caller, secured)
            if method.endswith("/DeleteNamespace") and secured.namespaces is not None:
                await asyncio.wait_for(secured.namespaces.wait_purged(request.name), 60)


def test_the_table_gives_each_role_what_the_security_page_says() -> None:
    for method, allowed in roles.METHOD_ROLES.items():
        name = method.rsplit("/", 1)[1]
        service = method.split("/")[1]
        read_only = name.startswith(READ_ONLY_PREFIXES) or "Reflection" in service
        assert "admin" in allowed, method
        if service == "runstore.v1.NamespaceAdmin":
            assert allowed == {"admin"}, method  # and bound to "*" (docs/namespaces.md)
            continue
        assert ("reader" in allowed) == read_only, method
        if read_only or service in ("runstore.v1.MemoryStore", "runstore.v1.ContextStore"):
            assert "host" in allowed, method
        if service == "runstore.v1.SessionAdmin":
            assert "worker" not in allowed, method
            assert "host" in allowed, method
        if service in (
            "runstore.v1.RuntimeStore",
            "runstore.v1.MemoryStore",
            "runstore.v1.ContextStore",
        ):
            assert "worker" in allowed, method
        if service == "runstore.v1.RuntimeStore" and not read_only:
            assert "host" not in allowed, method


async def test_health_is_open_to_anyone(secured: Secured) -> None:
    health = health_pb2_grpc.HealthStub(secured.anonymous.channel)
    for caller in CALLERS:
        response = await health.Check(
            health_pb2.HealthCheckRequest(service="runstore.v1.RuntimeStore"),
            metadata=secured.metadata(caller),
        )
        assert response.status == health_pb2.HealthCheckResponse.SERVING


async def _list_services(secured: Secured, caller: str, *, ask: bool = True) -> list[str]:
    """The services reflection lists to ``caller``.

    ``ask=False`` sends no request and only reads: the server refuses a caller from the
    headers alone, and a request message still being written when the refusal lands
    fails locally in grpc as INTERNAL ("Failed execute_batch"), hiding the real status.
    """
    stub = reflection_pb2_grpc.ServerReflectionStub(secured.anonymous.channel)
    requests = [reflection_pb2.ServerReflectionRequest(list_services="")] if ask else []
    call = stub.ServerReflectionInfo(iter(requests), metadata=secured.metadata(caller))
    names: list[str] = []
    async for response in call:
        names.extend(service.name for service in response.list_services_response.service)
    return names


async def test_reflection_needs_a_valid_principal(secured: Secured) -> None:
    for caller in ROLES:
        assert "runstore.v1.SessionAdmin" in await _list_services(secured, caller)
    method = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    for caller in ("none", "bogus"):
        got = await refusal(_list_services(secured, caller, ask=False))
        assert got == (UNAUTHENTICATED, "UNAUTHENTICATED", method)


async def test_a_worker_cannot_end_or_purge_a_session(secured: Secured) -> None:
    session_id = await secured.admin.session()
    for request, call in (
        (sa.EndSessionRequest(session_id=session_id, ended_at=ts(now_ms())), "EndSession"),
        (sa.PurgeSessionRequest(session_id=session_id), "PurgeSession"),
    ):
        got = await refusal(
            getattr(secured.anonymous.admin, call)(request, metadata=secured.metadata("worker"))
        )
        assert got[:2] == (PERMISSION_DENIED, "PERMISSION_DENIED")
    status = await secured.admin.runtime.LoadSessionStatus(
        rs.LoadSessionStatusRequest(session_id=session_id)
    )
    assert status.status == pb.SESSION_STATUS_ACTIVE


async def test_refusals_do_not_reveal_whether_a_session_exists(secured: Secured) -> None:
    existing = await secured.admin.session()
    answers = set()
    for session_id in (existing, unique("never-created")):
        for caller in ("none", "bogus", "worker"):
            answers.add(
                (
                    caller,
                    await refusal(
                        secured.anonymous.admin.LoadSession(
                            sa.LoadSessionRequest(session_id=session_id),
                            metadata=secured.metadata(caller),
                        )
                    ),
                )
            )
    assert len(answers) == 3  # one answer per caller, the same for both sessions


async def test_a_malformed_authorization_header_is_unauthenticated(secured: Secured) -> None:
    for value in ("Basic dXNlcjpwYXNz", "Bearer", secured.tokens["admin"]):
        got = await refusal(
            secured.anonymous.admin.LoadSession(
                sa.LoadSessionRequest(session_id="x"), metadata=(("authorization", value),)
            )
        )
        assert got == (UNAUTHENTICATED, "UNAUTHENTICATED", "/runstore.v1.SessionAdmin/LoadSession")
