"""Builders and assertions shared by the contract tests.

Requests are built as protobuf messages, exactly what a Go or Python worker
sends; lifecycle payloads come from ``runstore.contract.lifecycle`` so they are
the canonical bytes of §5.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from runstore.contract import lifecycle
from runstore.v1 import context_store_pb2_grpc as ctx_grpc
from runstore.v1 import memory_store_pb2_grpc as ms_grpc
from runstore.v1 import namespace_admin_pb2_grpc as na_grpc
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from runstore.v1 import types_pb2 as pb

_counter = itertools.count(1)

REQUEST_ID_KEY = "x-request-id"


SERVER_OWN_TABLES = frozenset({"quota_replicas"})
"""Tables written by the server's own clock (each replica's heartbeat, every
2 s whatever the calls do: the commit-stall probe), never by a call: left out
of the tests' "wrote nothing" comparisons."""


def unique(prefix: str) -> str:
    """An ID no other test uses (tests share one server per backend)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}-{next(_counter)}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ts(ms: int) -> Timestamp:
    seconds, millis = divmod(ms, 1000)
    return Timestamp(seconds=seconds, nanos=millis * 1_000_000)


# --- Records ---------------------------------------------------------------


def record(
    *,
    run_id: str,
    agent_id: str,
    session_id: str,
    key: str,
    type: str,
    payload: bytes,
    at_ms: int,
    turn_id: str = "",
) -> pb.RunRecord:
    return pb.RunRecord(
        event_key=key,
        run_id=run_id,
        agent_id=agent_id,
        session_id=session_id,
        turn_id=turn_id,
        type=type,
        payload=payload,
        timestamp=ts(at_ms),
    )


def started_record(run: pb.RunStart, key: str = "started") -> pb.RunRecord:
    payload = lifecycle.encode_run_started(
        lifecycle.RunStartedPayload(
            parent_run_id=run.parent_run_id,
            predecessor_run_id=run.predecessor_run_id,
            labels=dict(run.labels),
        )
    )
    return record(
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        key=key,
        type=lifecycle.RUN_STARTED,
        payload=payload,
        at_ms=_ms(run.started_at),
    )


def canceled_record(run: pb.RunStart, key: str = "stopped") -> pb.RunRecord:
    """The ended-session record a session start must always carry (V5)."""
    payload = lifecycle.encode_run_completed(
        lifecycle.RunCompletedPayload(
            status="canceled",
            phase="canceled",
            cancellation_reason=lifecycle.REASON_SESSION_ENDED,
            labels=dict(run.labels),
        )
    )
    return record(
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        key=key,
        type=lifecycle.RUN_COMPLETED,
        payload=payload,
        at_ms=_ms(run.started_at),
    )


def link_record(
    child: pb.RunStart,
    parent_agent_id: str,
    key: str = "linked",
    tool_name: str = "tools.search",
    tool_call_id: str = "call-1",
    at_ms: int | None = None,
) -> pb.RunRecord:
    payload = lifecycle.encode_child_run_linked(
        lifecycle.ChildRunLinkedPayload(
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            child_run_id=child.run_id,
            child_agent_id=child.agent_id,
        )
    )
    return record(
        run_id=child.parent_run_id,
        agent_id=parent_agent_id,
        session_id=child.session_id,
        key=key,
        type=lifecycle.CHILD_RUN_LINKED,
        payload=payload,
        at_ms=at_ms if at_ms is not None else _ms(child.started_at),
    )


def _ms(stamp: Timestamp) -> int:
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def _ms_of(stamp: Timestamp) -> int:
    return _ms(stamp)


@dataclass
class Run:
    """A run under test: its RunStart and helpers to build its records."""

    start: pb.RunStart

    @property
    def id(self) -> str:
        return self.start.run_id

    def record(
        self,
        key: str,
        type: str = "tool_result_received",
        payload: bytes = b'{"ok":true}',
        at_ms: int | None = None,
        **overrides: Any,
    ) -> pb.RunRecord:
        fields = {
            "run_id": self.start.run_id,
            "agent_id": self.start.agent_id,
            "session_id": self.start.session_id,
            "key": key,
            "type": type,
            "payload": payload,
            "at_ms": at_ms if at_ms is not None else _ms(self.start.started_at) + 1,
        }
        fields.update(overrides)
        return record(**fields)

    def completed(
        self,
        key: str = "completed",
        status: str = "success",
        reason: str | None = None,
        labels: Mapping[str, str] | None = None,
        at_ms: int | None = None,
        failure: lifecycle.RunFailure | None = None,
    ) -> pb.RunRecord:
        phase = {"success": "completed", "failed": "failed", "canceled": "canceled"}.get(
            status, status
        )
        if status == "failed" and failure is None:
            failure = lifecycle.RunFailure(message="boom", kind="internal")
        payload = lifecycle.encode_run_completed(
            lifecycle.RunCompletedPayload(
                status=status,
                phase=phase,
                failure=failure,
                cancellation_reason=reason,
                labels=dict(self.start.labels if labels is None else labels),
            )
        )
        return self.record(key, lifecycle.RUN_COMPLETED, payload, at_ms=at_ms)

    def suspended(
        self, key: str = "suspended", suspension_id: str = "checkpoint-1"
    ) -> pb.RunRecord:
        payload = lifecycle.encode_run_suspended(
            lifecycle.RunSuspendedPayload(
                suspension_id=suspension_id, version="v6", pending_count=1, required_tools=None
            )
        )
        return self.record(key, lifecycle.RUN_SUSPENDED, payload)

    def cancellation(self, key: str = "cancel", reason: str = "user_requested") -> pb.RunRecord:
        payload = lifecycle.encode_cancellation_intent(
            lifecycle.CancellationIntentPayload(reason=reason)
        )
        return self.record(key, lifecycle.CANCELLATION_INTENT, payload)

    # Commands ------------------------------------------------------------

    def root_request(self, started_key: str = "started", canceled_key: str = "stopped") -> Any:
        return rs.StartRootRunRequest(
            run=self.start,
            started=started_record(self.start, started_key),
            canceled=canceled_record(self.start, canceled_key),
        )

    def child_request(
        self,
        parent_agent_id: str,
        link_key: str = "linked",
        started_key: str = "started",
        canceled_key: str = "stopped",
        tool_call_id: str = "call-1",
    ) -> Any:
        return rs.StartChildRunRequest(
            run=self.start,
            parent_linked=link_record(
                self.start, parent_agent_id, link_key, tool_call_id=tool_call_id
            ),
            started=started_record(self.start, started_key),
            canceled=canceled_record(self.start, canceled_key),
        )

    def one_shot_request(self, started_key: str = "started") -> Any:
        return rs.StartOneShotRunRequest(
            run=self.start, started=started_record(self.start, started_key)
        )

    def one_shot_child_request(
        self, parent_agent_id: str, link_key: str = "linked", started_key: str = "started"
    ) -> Any:
        return rs.StartOneShotChildRunRequest(
            run=self.start,
            parent_linked=link_record(self.start, parent_agent_id, link_key),
            started=started_record(self.start, started_key),
        )

    def terminal_request(self, status: int = pb.RUN_STATUS_COMPLETED, **kwargs: Any) -> Any:
        completion = {
            pb.RUN_STATUS_COMPLETED: "success",
            pb.RUN_STATUS_FAILED: "failed",
            pb.RUN_STATUS_CANCELED: "canceled",
        }.get(status, "success")
        kwargs.setdefault("status", completion)
        if completion == "canceled":
            kwargs.setdefault("reason", "engine_canceled")
        return rs.RecordRunTerminalRequest(
            run_id=self.id, status=status, record=self.completed(**kwargs)
        )

    def suspension_request(
        self, key: str = "suspended", suspension_id: str = "checkpoint-1", data: bytes = b'{"s":1}'
    ) -> Any:
        return rs.RecordRunSuspensionRequest(
            run_id=self.id,
            suspension=pb.Checkpoint(id=suspension_id, data=data),
            record=self.suspended(key, suspension_id),
        )

    def cancellation_request(self, key: str = "cancel", reason: str = "user_requested") -> Any:
        return rs.RecordRunCancellationRequest(
            run_id=self.id, reason=reason, record=self.cancellation(key, reason)
        )


def run_start(
    *,
    session_id: str = "",
    parent_run_id: str = "",
    predecessor_run_id: str = "",
    agent_id: str = "agent",
    run_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    started_ms: int | None = None,
    seed_end_id: str = "",
) -> Run:
    return Run(
        pb.RunStart(
            run_id=run_id or unique("run"),
            agent_id=agent_id,
            session_id=session_id,
            parent_run_id=parent_run_id,
            predecessor_run_id=predecessor_run_id,
            started_at=ts(started_ms if started_ms is not None else now_ms()),
            labels=dict(labels) if labels is not None else {"site": "one"},
            seed_end_id=seed_end_id,
        )
    )


# --- The store under test ---------------------------------------------------


@dataclass
class Store:
    """Stubs of one running server."""

    channel: grpc.aio.Channel
    runtime: rs_grpc.RuntimeStoreAsyncStub = field(init=False)
    admin: sa_grpc.SessionAdminAsyncStub = field(init=False)
    memory: ms_grpc.MemoryStoreAsyncStub = field(init=False)
    context: ctx_grpc.ContextStoreAsyncStub = field(init=False)
    namespaces: na_grpc.NamespaceAdminAsyncStub = field(init=False)
    target: str = ""

    def __post_init__(self) -> None:
        self.runtime = rs_grpc.RuntimeStoreStub(self.channel)
        self.admin = sa_grpc.SessionAdminStub(self.channel)
        self.memory = ms_grpc.MemoryStoreStub(self.channel)
        self.context = ctx_grpc.ContextStoreStub(self.channel)
        self.namespaces = na_grpc.NamespaceAdminStub(self.channel)

    async def session(self, session_id: str | None = None) -> str:
        session_id = session_id or unique("session")
        await self.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=ts(now_ms()))
        )
        return session_id

    async def end(self, session_id: str) -> None:
        await self.admin.EndSession(
            sa.EndSessionRequest(session_id=session_id, ended_at=ts(now_ms()))
        )

    async def root(self, session_id: str | None = None, **kwargs: Any) -> Run:
        """A started root run in a (new) active session."""
        session_id = session_id or await self.session()
        run = run_start(session_id=session_id, **kwargs)
        await self.runtime.StartRootRun(run.root_request())
        return run

    async def one_shot(self, **kwargs: Any) -> Run:
        run = run_start(**kwargs)
        await self.runtime.StartOneShotRun(run.one_shot_request())
        return run

    async def records(self, run_id: str) -> list[pb.RunRecord]:
        page = await self.runtime.ListRunRecords(
            rs.ListRunRecordsRequest(run_id=run_id, limit=1000)
        )
        return list(page.events)

    async def session_records(self, session_id: str) -> list[pb.RunRecord]:
        events: list[pb.RunRecord] = []
        cursor = ""
        while True:
            page = await self.runtime.ListSessionRunRecords(
                rs.ListSessionRunRecordsRequest(session_id=session_id, cursor=cursor, limit=1000)
            )
            events.extend(page.events)
            if not page.next_cursor:
                return events
            cursor = page.next_cursor

    async def load(self, run_id: str) -> pb.RunMeta:
        return (await self.runtime.LoadRun(rs.LoadRunRequest(run_id=run_id))).run

    async def exists(self, run_id: str) -> bool:
        try:
            await self.load(run_id)
        except grpc.aio.AioRpcError as err:
            if err.code() is grpc.StatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def state(self, *, session_id: str = "", run_ids: tuple[str, ...] = ()) -> Any:
        """Everything a failed command must leave untouched."""
        snapshot: dict[str, Any] = {}
        if session_id:
            snapshot["session"] = await self.session_records(session_id)
            snapshot["runs"] = (
                await self.admin.ListRunsBySession(
                    sa.ListRunsBySessionRequest(session_id=session_id)
                )
            ).runs
        for run_id in run_ids:
            if await self.exists(run_id):
                snapshot[run_id] = (await self.load(run_id), await self.records(run_id))
            else:
                snapshot[run_id] = None
        return snapshot


# --- Errors -----------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    code: grpc.StatusCode
    message: str
    reason: str
    domain: str
    metadata: dict[str, str]


def failure_of(err: grpc.aio.AioRpcError) -> Failure:
    """The status and the single ErrorInfo of a failed call."""
    status = rpc_status.from_call(err)
    assert status is not None, f"no rich status on {err.code()}: {err.details()}"
    infos = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            infos.append(info)
    assert len(infos) == 1, f"expected exactly one ErrorInfo, got {len(infos)}"
    info = infos[0]
    metadata = dict(info.metadata)
    # Every ErrorInfo carries the call's request id, also sent as a trailer.
    request_id = metadata.pop("request_id", "")
    assert request_id, f"ErrorInfo without request_id: {metadata}"
    assert (REQUEST_ID_KEY, request_id) in tuple(err.trailing_metadata() or ()), request_id
    return Failure(err.code(), err.details() or "", info.reason, info.domain, metadata)


async def fails(call: Awaitable[Any]) -> Failure:
    """Awaits a call that must fail; returns its status and ErrorInfo."""
    try:
        response = await call
    except grpc.aio.AioRpcError as err:
        return failure_of(err)
    raise AssertionError(f"call succeeded unexpectedly: {response}")


async def outcome(call: Awaitable[Any]) -> str:
    """ "ok", the ErrorInfo reason of a failed call, or the bare status code of a
    call the server never handled (for tallying racing commands)."""
    try:
        await call
    except grpc.aio.AioRpcError as err:
        if rpc_status.from_call(err) is None:
            return err.code().name
        return failure_of(err).reason
    return "ok"


async def fails_with(
    call: Awaitable[Any], code: grpc.StatusCode, reason: str, message: str | None = None
) -> Failure:
    failure = await fails(call)
    assert (failure.code, failure.reason) == (code, reason), failure
    assert failure.domain == "runstore"
    if message is not None:
        assert message in failure.message, failure
    return failure


SERVER_NOTICES_WITHIN = 60.0
"""How long a test waits for the server to notice what a client did (a
cancelled stream released, a deleted namespace's streams ended). Only a
failing test waits that long; it is generous because a shared CI host can
freeze the whole process for seconds, and a stream cancelled during a
PostgreSQL read is released only once the database answers the cancel."""


async def until(condition: Callable[[], bool], what: str) -> None:
    """Waits (polled, bounded by ``SERVER_NOTICES_WITHIN``) until ``condition``."""
    deadline = time.monotonic() + SERVER_NOTICES_WITHIN
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def serving(database_url: str, *, migrate: bool = True) -> AsyncIterator[Store]:
    """A real server on an ephemeral port over ``database_url``, in this process
    (tests/backends.py's ``served``)."""
    from tests import backends

    async with backends.served(database_url, migrate=migrate) as server:
        yield server.store
