"""The benchmark client: a separate process that drives one server over gRPC.

Reads a plan (JSON on stdin: target, measurements, and how to call the server:
tokens, a CA for TLS; and which processes' CPU to read: the server's pid, the
PostgreSQL database), runs each measurement with ``concurrency`` calls in
flight for ``duration`` seconds after a warm-up, and writes one JSON result per
measurement on stdout, with the CPU the server, the database and the driver
spent in the timed window (``bench/cpu.py``).

With tokens, the measured runtime calls carry the **worker** token, the setup
calls a worker may not make (CreateSession) and the host's listings carry the
**host** token, and the ceiling carries none (Health is open, as for a load
balancer). Before measuring, the driver checks the server refuses a call
without a token, so a figure labelled "protections on" is one.
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
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import cpu, messages
from bench.closed_loop import ClosedLoop
from bench.messages import now
from bench.messages import record as run_record
from runstore.client.model import RunRecord
from runstore.client.remote import RemoteStore
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from runstore.v1 import types_pb2 as pb

PAYLOAD_1K = b'{"data":"' + b"x" * (1024 - 11) + b'"}'
AGENT = "bench-agent"

Op = Callable[[], Awaitable[Any]]
Metadata = tuple[tuple[str, str], ...]

BATCH_RECORDS = 4
"""Records per AppendRunRecords call of ``append_batch`` (one model response:
thinking, text and two tool calls, ~1 KiB each). Its ``ops_per_s`` counts
records, comparable with one-record appends; ``calls_per_s`` counts calls."""
RECORDS_PER_OP = {"append_batch": BATCH_RECORDS}

RUNS_PER_SESSION = 4
"""Runs of one session appending at once in ``append_shared_session``: each in-flight
worker owns a run, and every 4 consecutive workers share a session, so appends
wait on the session's lock and contend for its next position."""

VARIED_SIZES = (200, 1024, 4096, 16 * 1024, 64 * 1024)
"""Payload sizes of ``append_varied``, cycled per call (200 B to 64 KiB; mean ~17 KiB)."""

COMMITTING_WORKLOADS = frozenset(
    {
        "append",
        "append_client",
        "append_batch",
        "append_shared_session",
        "append_varied",
        "start_terminal",
        "turn",
    }
)
"""Workloads whose PostgreSQL commits per operation are counted: the
``pg_stat_database.xact_commit`` delta over the timed window. Each backend
publishes its counts at most once a second while busy (and may hold them for
10 s once idle), so both reads are taken under load, with as much unpublished
at the start as at the end: a window of a few seconds is within about ±15 %."""


def _varied_payload(size: int) -> bytes:
    return b'{"data":"' + b"v" * (size - 11) + b'"}'


def _bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),) if token else ()


class Client:
    def __init__(self, channel: grpc.aio.Channel, tokens: dict[str, str] | None = None) -> None:
        self.runtime = rs_grpc.RuntimeStoreStub(channel)
        self.store = RemoteStore(channel=channel, token=(tokens or {}).get("worker") or None)
        """The typed client a worker process uses (``append_client``): one for
        all the measurement's tasks, as a worker's runs share it."""
        self.admin = sa_grpc.SessionAdminStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)
        tokens = tokens or {}
        self.worker: Metadata = _bearer(tokens.get("worker", ""))
        """Metadata of the measured runtime calls (a worker's)."""
        self.host: Metadata = _bearer(tokens.get("host", ""))
        """Metadata of session administration (a host's)."""

    async def check_protections(self) -> None:
        """A server with authentication refuses a call without a token, and a
        worker's CreateSession: otherwise the figures are not what they say."""
        request = sa.CreateSessionRequest(session_id=f"bench-{uuid.uuid4().hex}")
        for metadata, code in (
            ((), grpc.StatusCode.UNAUTHENTICATED),
            (self.worker, grpc.StatusCode.PERMISSION_DENIED),
        ):
            try:
                await self.admin.CreateSession(request, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                if error.code() == code:
                    continue
                raise
            raise RuntimeError(f"the server accepted CreateSession where {code.name} was due")

    async def session(self) -> str:
        session_id = f"bench-{uuid.uuid4().hex}"
        await self.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=now()),
            metadata=self.host,
        )
        return session_id

    async def start(self, session_id: str) -> pb.RunStart:
        run = pb.RunStart(
            run_id=f"run-{uuid.uuid4().hex}",
            agent_id=AGENT,
            session_id=session_id,
            started_at=now(),
        )
        await self.runtime.StartRootRun(
            rs.StartRootRunRequest(
                run=run,
                started=messages.started(run),
                canceled=messages.stopped_at_session_end(run),
            ),
            metadata=self.worker,
        )
        return run

    async def complete(self, run: pb.RunStart) -> None:
        await self.runtime.RecordRunTerminal(
            rs.RecordRunTerminalRequest(
                run_id=run.run_id,
                status=pb.RUN_STATUS_COMPLETED,
                record=messages.completed(run, now()),
            ),
            metadata=self.worker,
        )

    async def append(self, run: pb.RunStart, key: str) -> None:
        await self.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(
                record=run_record(run, key, "tool_result_received", PAYLOAD_1K, now())
            ),
            metadata=self.worker,
        )


def _check_last_page(page: Any, spec: dict[str, Any]) -> None:
    """A read benchmark must read what it claims: a full last page of the history."""
    if len(page.events) != 100 or page.next_cursor:
        raise RuntimeError(
            f"{spec['workload']} of history {spec['history']}: expected the last 100 records, "
            f"got {len(page.events)} (next cursor {page.next_cursor!r}); was the history seeded?"
        )


async def _make_op(
    client: Client, workload: str, spec: dict[str, Any], index: int = 0, shared: Any = None
) -> Op:
    """Sets up one in-flight worker (untimed) and returns its timed operation;
    ``index`` is the worker's number and ``shared`` a dict the measurement's
    workers share (the sessions of ``append_shared_session``)."""
    keys = itertools.count()
    shared = {} if shared is None else shared
    if workload == "ceiling":
        request = health_pb2.HealthCheckRequest(service="")
        return lambda: client.health.Check(request)
    if workload == "append":
        run = await client.start(await client.session())
        # One request reused, only its key changes: the client's own cost per
        # call stays as small as the ceiling's, so the ratio measures the server.
        request = rs.AppendRunRecordRequest(
            record=run_record(run, "", "tool_result_received", PAYLOAD_1K, now())
        )
        record = request.record
        metadata = client.worker

        def append() -> Any:
            record.event_key = f"k{next(keys)}"
            return client.runtime.AppendRunRecord(request, metadata=metadata)

        return append
    if workload == "append_client":
        run = await client.start(await client.session())
        started = datetime.fromtimestamp(run.started_at.seconds, UTC)

        def append_client() -> Any:
            return client.store.append_run_record(
                RunRecord(
                    event_key=f"k{next(keys)}",
                    run_id=run.run_id,
                    agent_id=run.agent_id,
                    session_id=run.session_id,
                    type="tool_result_received",
                    payload=PAYLOAD_1K,
                    timestamp=started,
                )
            )

        return append_client
    if workload == "append_shared_session":
        group = index // RUNS_PER_SESSION
        if group not in shared:
            shared[group] = await client.session()
        run = await client.start(shared[group])
        shared_request = rs.AppendRunRecordRequest(
            record=run_record(run, "", "tool_result_received", PAYLOAD_1K, now())
        )

        def append_shared() -> Any:
            shared_request.record.event_key = f"k{next(keys)}"
            return client.runtime.AppendRunRecord(shared_request, metadata=client.worker)

        return append_shared
    if workload == "append_varied":
        run = await client.start(await client.session())
        requests = [
            rs.AppendRunRecordRequest(
                record=run_record(run, "", "tool_result_received", _varied_payload(size), now())
            )
            for size in VARIED_SIZES
        ]
        # Workers start at different sizes, so every size is in flight at once.
        sizes = itertools.cycle(
            requests[index % len(requests) :] + requests[: index % len(requests)]
        )

        def append_varied() -> Any:
            varied = next(sizes)
            varied.record.event_key = f"k{next(keys)}"
            return client.runtime.AppendRunRecord(varied, metadata=client.worker)

        return append_varied
    if workload == "append_batch":
        run = await client.start(await client.session())
        # Like "append": one request reused, only its keys change.
        batch = rs.AppendRunRecordsRequest(
            records=[
                run_record(run, "", type_, PAYLOAD_1K, now())
                for type_ in ("thinking", "assistant_text", "tool_call", "tool_call")
            ]
        )
        assert len(batch.records) == BATCH_RECORDS

        def append_batch() -> Any:
            turn = next(keys)
            for index, record in enumerate(batch.records):
                record.event_key = f"k{turn}-{index}"
            return client.runtime.AppendRunRecords(batch, metadata=client.worker)

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
        _check_last_page(await client.runtime.ListRunRecords(request, metadata=client.worker), spec)
        return lambda: client.runtime.ListRunRecords(request, metadata=client.worker)
    if workload == "list_session":
        session_request = rs.ListSessionRunRecordsRequest(
            session_id=spec["session_id"], cursor=spec.get("cursor", ""), limit=100
        )
        _check_last_page(
            await client.runtime.ListSessionRunRecords(session_request, metadata=client.worker),
            spec,
        )
        return lambda: client.runtime.ListSessionRunRecords(session_request, metadata=client.worker)
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
    page = await call(request, metadata=client.host)
    items = page.sessions if spec["rpc"] == "ListSessions" else page.runs
    if len(items) != 100 or not page.next_page_token:
        raise RuntimeError(f"{spec['case']}: expected a full page, got {len(items)} rows")
    return lambda: call(request, metadata=client.host)


class CpuProbe:
    """Reads the CPU seconds of the server process, of the PostgreSQL backends
    connected to the benchmark's database (not this probe's own) and of this
    driver, so a timed window's CPU can be divided by its calls."""

    def __init__(self, server_pid: int | None, database_dsn: str | None) -> None:
        self._server_pid = server_pid
        self._dsn = database_dsn
        self._conn: Any = None

    @property
    def counts_commits(self) -> bool:
        return self._dsn is not None and self._dsn != ""

    async def open(self) -> None:
        if self._dsn:
            self._conn = await asyncpg.connect(self._dsn)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def commits(self) -> int | None:
        """Transactions committed in the benchmark's database so far (this probe's
        own included: one per read, negligible against thousands of calls)."""
        if self._conn is None:
            return None
        value = await self._conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(value)

    async def read(self) -> tuple[dict[int, float] | None, dict[int, float] | None, float]:
        database = None
        if self._conn is not None:
            rows = await self._conn.fetch(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            database = cpu.processes_cpu(row["pid"] for row in rows)
        server = cpu.threads_cpu(self._server_pid) if self._server_pid else None
        return server, database, time.process_time()


def _cpu_figures(
    before: tuple[dict[int, float] | None, dict[int, float] | None, float],
    after: tuple[dict[int, float] | None, dict[int, float] | None, float],
    ops: int,
) -> dict[str, float | None]:
    server = None if before[0] is None or after[0] is None else cpu.cpu_delta(before[0], after[0])
    database = None if before[1] is None or after[1] is None else cpu.cpu_delta(before[1], after[1])
    return {
        "server_cpu_ms_per_op": cpu.per_op_ms(server, ops),
        "db_cpu_ms_per_op": cpu.per_op_ms(database, ops),
        "client_cpu_ms_per_op": cpu.per_op_ms(after[2] - before[2], ops),
    }


async def measure(
    client: Client | list[Client], spec: dict[str, Any], probe: CpuProbe | None = None
) -> dict[str, Any]:
    """One measurement; with several clients (connections), worker ``i`` calls
    through client ``i mod n``."""
    clients = client if isinstance(client, list) else [client]
    workload = spec["workload"]
    concurrency = int(spec["concurrency"])
    shared: dict[Any, Any] = {}
    ops = [
        await _make_op(clients[index % len(clients)], workload, spec, index, shared)
        for index in range(concurrency)
    ]
    loop = ClosedLoop(ops)
    await loop.run(float(spec.get("warmup", 0.2)), timed=False)
    probe = probe or CpuProbe(None, None)
    count_commits = workload in COMMITTING_WORKLOADS and probe.counts_commits
    cpu_before = await probe.read()
    began = time.perf_counter()
    timed = loop.run(float(spec["duration"]), timed=True)
    commits_before = await probe.commits() if count_commits else None
    await timed
    elapsed = time.perf_counter() - began
    cpu_after = await probe.read()
    commits_after = await probe.commits() if count_commits else None
    latencies = sorted(loop.latencies)
    per_op = RECORDS_PER_OP.get(workload, 1)
    records = len(latencies) * per_op
    commits = (
        {"commits_per_op": (commits_after - commits_before) / records}
        if commits_before is not None and commits_after is not None and records
        else {}
    )
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
        **_cpu_figures(cpu_before, cpu_after, len(latencies) * per_op),
        **commits,
    }


async def main() -> None:
    plan = json.load(sys.stdin)
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    connections = int(plan.get("channels", 1))
    if connections > 1:  # a connection each (grpc would share one between channels)
        options.append(("grpc.use_local_subchannel_pool", 1))

    def open_channel() -> grpc.aio.Channel:
        if plan.get("tls_ca"):
            credentials = grpc.ssl_channel_credentials(root_certificates=plan["tls_ca"].encode())
            return grpc.aio.secure_channel(plan["target"], credentials, options=options)
        return grpc.aio.insecure_channel(plan["target"], options=options)

    channels = [open_channel() for _ in range(connections)]
    probe = CpuProbe(plan.get("server_pid"), plan.get("database_dsn"))
    await probe.open()
    try:
        clients = [Client(channel, plan.get("tokens")) for channel in channels]
        if clients[0].worker:
            await clients[0].check_protections()
        for spec in plan["measurements"]:
            print(json.dumps(await measure(clients, spec, probe)), flush=True)
    finally:
        for channel in channels:
            await channel.close()
    await probe.close()


if __name__ == "__main__":
    asyncio.run(main())
