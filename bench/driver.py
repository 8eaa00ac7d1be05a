"""The benchmark client: a separate process that drives one server over gRPC.

Reads a plan (JSON on stdin: target, measurements), runs each measurement with
``concurrency`` calls in flight for ``duration`` seconds after a warm-up, and
writes one JSON result per measurement on stdout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from runstore.v1 import types_pb2 as pb

PAYLOAD_1K = b'{"data":"' + b"x" * (1024 - 11) + b'"}'
AGENT = "bench-agent"

Op = Callable[[], Awaitable[Any]]

BATCH_RECORDS = 4
"""Records per AppendRunRecords call of ``append_batch`` (one model response:
thinking, text and two tool calls, ~1 KiB each). Its ``ops_per_s`` counts
records, comparable with one-record appends; ``calls_per_s`` counts calls."""
RECORDS_PER_OP = {"append_batch": BATCH_RECORDS}


def _now() -> Timestamp:
    ms = time.time_ns() // 1_000_000
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _record(
    run: pb.RunStart, key: str, type_: str, payload: bytes, stamp: Timestamp
) -> pb.RunRecord:
    return pb.RunRecord(
        event_key=key,
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        type=type_,
        payload=payload,
        timestamp=stamp,
    )


_STARTED = lifecycle.encode_run_started(lifecycle.RunStartedPayload())
_CANCELED = lifecycle.encode_run_completed(
    lifecycle.RunCompletedPayload(
        status="canceled", phase="canceled", cancellation_reason=lifecycle.REASON_SESSION_ENDED
    )
)
_COMPLETED = lifecycle.encode_run_completed(
    lifecycle.RunCompletedPayload(status="success", phase="completed")
)


class Client:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.runtime = rs_grpc.RuntimeStoreStub(channel)
        self.admin = sa_grpc.SessionAdminStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)

    async def session(self) -> str:
        session_id = f"bench-{uuid.uuid4().hex}"
        await self.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=_now())
        )
        return session_id

    async def start(self, session_id: str) -> pb.RunStart:
        run = pb.RunStart(
            run_id=f"run-{uuid.uuid4().hex}",
            agent_id=AGENT,
            session_id=session_id,
            started_at=_now(),
        )
        await self.runtime.StartRootRun(
            rs.StartRootRunRequest(
                run=run,
                started=_record(run, "started", lifecycle.RUN_STARTED, _STARTED, run.started_at),
                canceled=_record(
                    run, "stopped", lifecycle.RUN_COMPLETED, _CANCELED, run.started_at
                ),
            )
        )
        return run

    async def complete(self, run: pb.RunStart) -> None:
        await self.runtime.RecordRunTerminal(
            rs.RecordRunTerminalRequest(
                run_id=run.run_id,
                status=pb.RUN_STATUS_COMPLETED,
                record=_record(run, "completed", lifecycle.RUN_COMPLETED, _COMPLETED, _now()),
            )
        )

    async def append(self, run: pb.RunStart, key: str) -> None:
        await self.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(
                record=_record(run, key, "tool_result_received", PAYLOAD_1K, _now())
            )
        )


def _check_last_page(page: Any, spec: dict[str, Any]) -> None:
    """A read benchmark must read what it claims: a full last page of the history."""
    if len(page.events) != 100 or page.next_cursor:
        raise RuntimeError(
            f"{spec['workload']} of history {spec['history']}: expected the last 100 records, "
            f"got {len(page.events)} (next cursor {page.next_cursor!r}); was the history seeded?"
        )


async def _make_op(client: Client, workload: str, spec: dict[str, Any]) -> Op:
    """Sets up one in-flight worker (untimed) and returns its timed operation."""
    keys = itertools.count()
    if workload == "ceiling":
        request = health_pb2.HealthCheckRequest(service="")
        return lambda: client.health.Check(request)
    if workload == "append":
        run = await client.start(await client.session())
        # One request reused, only its key changes: the client's own cost per
        # call stays as small as the ceiling's, so the ratio measures the server.
        request = rs.AppendRunRecordRequest(
            record=_record(run, "", "tool_result_received", PAYLOAD_1K, _now())
        )
        record = request.record

        def append() -> Any:
            record.event_key = f"k{next(keys)}"
            return client.runtime.AppendRunRecord(request)

        return append
    if workload == "append_batch":
        run = await client.start(await client.session())
        # Like "append": one request reused, only its keys change.
        batch = rs.AppendRunRecordsRequest(
            records=[
                _record(run, "", type_, PAYLOAD_1K, _now())
                for type_ in ("thinking", "assistant_text", "tool_call", "tool_call")
            ]
        )
        assert len(batch.records) == BATCH_RECORDS

        def append_batch() -> Any:
            turn = next(keys)
            for index, record in enumerate(batch.records):
                record.event_key = f"k{turn}-{index}"
            return client.runtime.AppendRunRecords(batch)

        return append_batch
    if workload == "start_terminal":
        session_id = await client.session()

        async def start_and_finish() -> None:
            await client.complete(await client.start(session_id))

        return start_and_finish
    if workload == "turn":
        session_id = await client.session()

        async def turn() -> None:
            run = await client.start(session_id)
            for index in range(10):
                await client.append(run, f"k{index}")
            await client.complete(run)

        return turn
    if workload == "list_run":
        request = rs.ListRunRecordsRequest(
            run_id=spec["run_id"], cursor=spec.get("cursor", ""), limit=100
        )
        _check_last_page(await client.runtime.ListRunRecords(request), spec)
        return lambda: client.runtime.ListRunRecords(request)
    if workload == "list_session":
        session_request = rs.ListSessionRunRecordsRequest(
            session_id=spec["session_id"], cursor=spec.get("cursor", ""), limit=100
        )
        _check_last_page(await client.runtime.ListSessionRunRecords(session_request), spec)
        return lambda: client.runtime.ListSessionRunRecords(session_request)
    if workload == "listing":
        return await _listing_op(client, spec)
    raise ValueError(f"unknown workload {workload!r}")


async def _listing_op(client: Client, spec: dict[str, Any]) -> Op:
    """One ListSessions or ListRuns page of 100; it must be full and have a next page."""
    if spec["rpc"] == "ListSessions":
        request: Any = json_format.ParseDict(spec["request"], sa.ListSessionsRequest())
        call = client.admin.ListSessions
    else:
        request = json_format.ParseDict(spec["request"], sa.ListRunsRequest())
        call = client.admin.ListRuns
    request.page_size = 100
    page = await call(request)
    items = page.sessions if spec["rpc"] == "ListSessions" else page.runs
    if len(items) != 100 or not page.next_page_token:
        raise RuntimeError(f"{spec['case']}: expected a full page, got {len(items)} rows")
    return lambda: call(request)


async def measure(client: Client, spec: dict[str, Any]) -> dict[str, Any]:
    workload = spec["workload"]
    concurrency = int(spec["concurrency"])
    ops = [await _make_op(client, workload, spec) for _ in range(concurrency)]
    latencies: list[float] = []
    timing = False
    deadline = 0.0

    async def worker(op: Op) -> None:
        while True:
            started = time.perf_counter()
            if started >= deadline:
                return
            await op()
            if timing:
                latencies.append(time.perf_counter() - started)

    deadline = time.perf_counter() + float(spec.get("warmup", 0.2))
    await asyncio.gather(*(worker(op) for op in ops))
    timing = True
    began = time.perf_counter()
    deadline = began + float(spec["duration"])
    await asyncio.gather(*(worker(op) for op in ops))
    elapsed = time.perf_counter() - began
    latencies.sort()
    per_op = RECORDS_PER_OP.get(workload, 1)
    return {
        **{k: v for k, v in spec.items() if k not in ("run_id", "session_id", "cursor", "request")},
        "ops": len(latencies) * per_op,
        "ops_per_s": len(latencies) * per_op / elapsed,
        **(
            {"records_per_call": per_op, "calls_per_s": len(latencies) / elapsed}
            if per_op > 1
            else {}
        ),
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else None,
    }


class _Bearer(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Sends ``authorization: Bearer <token>`` with every call (the chain-on server)."""

    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = (*(details.metadata or ()), *self._metadata)
        return await continuation(details._replace(metadata=metadata), request)


async def main() -> None:
    plan = json.load(sys.stdin)
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    interceptors = [_Bearer(plan["token"])] if plan.get("token") else None
    async with grpc.aio.insecure_channel(
        plan["target"], options=options, interceptors=interceptors
    ) as channel:
        client = Client(channel)
        for spec in plan["measurements"]:
            print(json.dumps(await measure(client, spec)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
