"""The Watch workloads of ``make bench`` (docs/contract.md §9.9).

* ``watch_latency``: commit-to-delivery latency with 1 and with 100 watchers.
  One writer appends records to one run one at a time (5 ms apart), then
  ends it; each watcher (``WatchRunRecords``) notes when each record arrives.
  A record's latency is its arrival minus the moment its AppendRunRecord call
  was sent, so it is an upper bound
  of commit-to-delivery (it includes the append's own round trip and commit);
  p50 and p99 are over every (record, watcher) pair. On SQLite the writer and
  the watchers use the backend's server; on PostgreSQL the writer talks to
  replica A (the backend's server) and the watchers to replica B, a second
  ``runstore serve`` on the same database, so every record crosses replicas by
  LISTEN/NOTIFY.
* ``idle_watchers``: appends per second (16 in flight, the ``append``
  workload) with 100 idle Watch streams open on the same server, each on a
  session nobody writes to, against none; the two alternate (ABBA) over the
  repetitions, each on a fresh server of its own after a ceiling of its own.
  ``append (100 idle watchers)`` carries ``vs_no_watchers``, the median of the
  paired ratios (goal ≥ 0.9).

The clients run in processes of their own (``python -m bench.watch``, a plan as
one JSON line on stdin): a latency process (writer and watchers, one clock) and
a holder process that keeps the idle streams, opened and closed on command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

WATCHER_COUNTS = (1, 100)
IDLE_WATCHERS = 100
LATENCY = "watch_latency"
IDLE = "idle_watchers"


def latency_label(watchers: int) -> str:
    return f"watch latency ({watchers} watcher{'s' if watchers != 1 else ''})"


def idle_label(watchers: int) -> str:
    return f"append ({watchers} idle watchers)"


# --- The client processes ---------------------------------------------------------


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


class Client:
    """Calls one server as ``bench.driver`` does: sessions with the host token,
    runs, appends and watches with the worker token (both empty without
    protections), over TLS when the plan has a CA."""

    def __init__(self, target: str, plan: dict[str, Any]) -> None:
        import grpc

        from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
        from runstore.v1 import session_admin_pb2_grpc as sa_grpc

        if plan.get("tls_ca"):
            credentials = grpc.ssl_channel_credentials(root_certificates=plan["tls_ca"].encode())
            self.channel = grpc.aio.secure_channel(target, credentials)
        else:
            self.channel = grpc.aio.insecure_channel(target)
        self.runtime = rs_grpc.RuntimeStoreStub(self.channel)
        self.admin = sa_grpc.SessionAdminStub(self.channel)
        tokens = plan.get("tokens") or {}
        self.metadata = _bearer(tokens.get("worker", ""))
        self.host = _bearer(tokens.get("host", ""))

    async def session_with_run(self, number: int) -> tuple[str, Any]:
        """A new session and a started root run in it."""
        from google.protobuf.timestamp_pb2 import Timestamp

        from bench import messages
        from runstore.v1 import runtime_store_pb2 as rs
        from runstore.v1 import session_admin_pb2 as sa
        from runstore.v1 import types_pb2 as pb

        session_id = f"bench-watch-{time.time_ns()}-{number}"
        now = Timestamp()
        now.FromMilliseconds(time.time_ns() // 1_000_000)  # records carry milliseconds
        await self.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=now),
            metadata=self.host,
        )
        run = pb.RunStart(
            run_id=f"{session_id}-run", agent_id="bench", session_id=session_id, started_at=now
        )

        await self.runtime.StartRootRun(
            rs.StartRootRunRequest(
                run=run,
                started=messages.started(run),
                canceled=messages.stopped_at_session_end(run),
            ),
            metadata=self.metadata,
        )
        return session_id, run

    async def append(self, run: Any, key: str) -> None:
        from runstore.v1 import runtime_store_pb2 as rs
        from runstore.v1 import types_pb2 as pb

        record = pb.RunRecord(
            event_key=key,
            run_id=run.run_id,
            agent_id=run.agent_id,
            session_id=run.session_id,
            type="tool_result_received",
            payload=b'{"ok":true}',
            timestamp=run.started_at,
        )
        await self.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=record), metadata=self.metadata
        )

    async def complete(self, run: Any) -> None:
        """The run's terminal record (``completed``)."""
        from bench import messages
        from runstore.v1 import runtime_store_pb2 as rs
        from runstore.v1 import types_pb2 as pb

        await self.runtime.RecordRunTerminal(
            rs.RecordRunTerminalRequest(
                run_id=run.run_id, status=pb.RUN_STATUS_COMPLETED, record=messages.completed(run)
            ),
            metadata=self.metadata,
        )

    async def watch_run(self, run_id: str) -> Any:
        """An open run stream: its first batch (the started record) has arrived."""
        from runstore.v1 import runtime_store_pb2 as rs

        stream = self.runtime.WatchRunRecords(
            rs.WatchRunRecordsRequest(run_id=run_id), metadata=self.metadata
        )
        await stream.read()
        return stream

    async def watch(self, session_id: str) -> Any:
        """An open stream: its first batch (the run's started record) has arrived."""
        from runstore.v1 import runtime_store_pb2 as rs

        stream = self.runtime.WatchSessionRunRecords(
            rs.WatchSessionRunRecordsRequest(session_id=session_id), metadata=self.metadata
        )
        await stream.read()
        return stream


async def latency(
    writer: Client, watcher: Client, spec: dict[str, Any], number: int
) -> dict[str, Any]:
    """One latency measurement: ``spec['records']`` records, ``spec['watchers']`` watchers."""
    import grpc

    from bench.stats import latency_ms

    watchers, records = int(spec["watchers"]), int(spec["records"])
    # The session starts through the watchers' replica (every replica serves unary
    # calls too); the records are appended through the writer's.
    _, run = await watcher.session_with_run(number)
    sent: dict[str, float] = {}
    delays: list[float] = []
    # Run watches: the run's terminal record ends every stream (OK) on the
    # server's side, so no stream is cancelled while others are being served.
    streams = [await watcher.watch_run(run.run_id) for _ in range(watchers)]

    async def follow(stream: Any) -> None:
        while (batch := await stream.read()) is not grpc.aio.EOF:
            arrived = time.perf_counter()
            for record in batch.events:
                if record.event_key in sent:
                    delays.append(arrived - sent[record.event_key])

    tasks = [asyncio.ensure_future(follow(stream)) for stream in streams]
    for index in range(records):
        key = f"k{index}"
        sent[key] = time.perf_counter()
        await writer.append(run, key)
        await asyncio.sleep(0.005)  # one record at a time, not a burst
    await writer.complete(run)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    if len(delays) != watchers * records:
        raise RuntimeError(f"{len(delays)} deliveries, expected {watchers} × {records}")
    return {**spec, "deliveries": len(delays), **latency_ms(delays)}


async def run_latency(plan: dict[str, Any]) -> None:
    writer = Client(plan["writer"], plan)
    watcher = Client(plan["watcher"], plan)
    for number, spec in enumerate(plan["measurements"]):
        print(json.dumps(await latency(writer, watcher, spec, number)), flush=True)
    await writer.channel.close()
    await watcher.channel.close()


async def run_holder(plan: dict[str, Any]) -> None:
    """Keeps ``watchers`` idle streams, each on a session of its own: ``open`` and
    ``close`` on stdin, one JSON acknowledgement per command on stdout."""
    client = Client(plan["target"], plan)
    sessions = [(await client.session_with_run(n))[0] for n in range(int(plan["watchers"]))]
    print(json.dumps({"ready": len(sessions)}), flush=True)
    streams: list[Any] = []
    loop = asyncio.get_running_loop()
    while command := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        if command == "open":
            streams = list(await asyncio.gather(*(client.watch(s) for s in sessions)))
            print(json.dumps({"open": len(streams)}), flush=True)
        elif command == "close":
            for stream in streams:
                stream.cancel()
            streams = []
            print(json.dumps({"closed": True}), flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")
    await client.channel.close()


def main() -> None:
    plan = json.loads(sys.stdin.readline())
    asyncio.run(run_holder(plan) if plan["mode"] == "hold" else run_latency(plan))


# --- The harness's side ----------------------------------------------------------


def latency_plan(args: argparse.Namespace, repeat: int) -> list[dict[str, Any]]:
    """Repetitions of each watcher count, interleaved."""
    records = max(20, int(100 * args.duration))
    return [
        {
            "workload": LATENCY,
            "watchers": watchers,
            "records": records,
            "repetition": repetition,
        }
        for repetition in range(repeat)
        for watchers in WATCHER_COUNTS
    ]


def idle_plan(
    args: argparse.Namespace, repetition: int, watchers: int, pairs: str = ""
) -> list[dict[str, Any]]:
    """A ceiling, then appends with ``watchers`` idle streams open (16 in flight)."""
    concurrency = 16 if 16 in args.concurrency else max(args.concurrency)
    base = {"concurrency": concurrency, "duration": args.duration, "warmup": args.warmup}
    pair = f"{pairs}idle{repetition}-{watchers}"
    return [
        {**base, "workload": "ceiling", "pair": pair},
        {
            **base,
            "workload": "append",
            "idle_watchers": watchers,
            "pair": pair,
            "repetition": repetition,
        },
    ]


def idle_order(repetition: int) -> tuple[int, int]:
    """ABBA: none first on even repetitions, the idle watchers first on odd ones."""
    return (0, IDLE_WATCHERS) if repetition % 2 == 0 else (IDLE_WATCHERS, 0)


async def _child(plan: dict[str, Any]) -> asyncio.subprocess.Process:
    from bench import harness

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.watch",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=harness.ROOT,
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(plan).encode() + b"\n")
    await process.stdin.drain()
    return process


async def _reply(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 120)
    if not line:
        raise RuntimeError("the watch client process ended early")
    reply: dict[str, Any] = json.loads(line)
    return reply


@contextlib.asynccontextmanager
async def holder(target: str, calls: dict[str, Any], watchers: int) -> AsyncIterator[Any]:
    """The process holding the idle streams; yields ``command(name)``."""
    process = await _child({"mode": "hold", "target": target, **calls, "watchers": watchers})
    assert process.stdin is not None
    try:
        await _reply(process)

        async def command(name: str) -> dict[str, Any]:
            assert process.stdin is not None
            process.stdin.write(name.encode() + b"\n")
            await process.stdin.drain()
            return await _reply(process)

        yield command
    finally:
        process.stdin.close()
        if await process.wait() != 0:
            raise RuntimeError("the idle watcher process failed")


async def measure_server(
    args: argparse.Namespace, backend: str, url: str, server: Any, tag: dict[str, Any]
) -> list[dict[str, Any]]:
    """The Watch workloads against the backend's main ``server`` (replica A; the
    harness's ``SERVER_MODULES`` hook)."""
    from bench import harness

    calls = server.protections.plan()  # tokens and the TLS CA
    rows: list[dict[str, Any]] = []
    if LATENCY in args.workloads:
        async with contextlib.AsyncExitStack() as stack:
            watcher = server.target
            if backend != "sqlite":
                replica_b = await stack.enter_async_context(
                    harness.start_server(url, args.sqlite_synchronous, server.protections)
                )
                watcher = replica_b.target
            plan = latency_plan(args, args.repeat)
            process = await _child(
                {
                    "mode": "latency",
                    "writer": server.target,
                    "watcher": watcher,
                    **calls,
                    "measurements": plan,
                }
            )
            assert process.stdin is not None
            process.stdin.close()
            replicas = 1 if watcher == server.target else 2
            for index in range(len(plan)):
                row = {**await _reply(process), **tag, "replicas": replicas}
                print(_progress(row, index + 1, len(plan)), flush=True)
                rows.append(row)
            if await process.wait() != 0:
                raise RuntimeError("the watch latency process failed")
    if IDLE in args.workloads:
        for repetition in range(args.repeat):
            for watchers in idle_order(repetition):
                rows += await idle_arm(args, url, server, tag, repetition, watchers)
    return rows


async def idle_arm(
    args: argparse.Namespace,
    url: str,
    server: Any,
    tag: dict[str, Any],
    repetition: int,
    watchers: int,
) -> list[dict[str, Any]]:
    """One arm of the idle-watchers comparison on a fresh server of its own (same
    protections as ``server``; on SQLite over a fresh file, as one file has one
    server): a server that once had watchers keeps its
    listener (on PostgreSQL, a LISTEN connection receiving its own NOTIFYs), so
    an arm without watchers after one with them would not be one."""
    from bench import harness
    from runstore.server.db import migrate

    plan = idle_plan(args, repetition, watchers)
    async with contextlib.AsyncExitStack() as stack:
        if url.startswith("sqlite"):
            # One serve per SQLite file, and the main server holds this one:
            # the arm's server gets a migrated file of its own.
            url = await stack.enter_async_context(harness.database("sqlite", ""))
            await migrate.upgrade(url)
        fresh = await stack.enter_async_context(
            harness.start_server(url, args.sqlite_synchronous, server.protections)
        )
        if not watchers:
            measured = await harness.run_driver(fresh, plan, tag=tag, database_url=url)
        else:
            async with holder(fresh.target, server.protections.plan(), watchers) as command:
                await command("open")
                measured = await harness.run_driver(fresh, plan, tag=tag, database_url=url)
                await command("close")
    return [relabel(row) for row in measured]


def relabel(row: dict[str, Any]) -> dict[str, Any]:
    """An append measured for ``idle_watchers`` gets a workload name of its own."""
    if row["workload"] == "append" and "idle_watchers" in row:
        return {**row, "workload": idle_label(row["idle_watchers"])}
    return row


def _progress(row: dict[str, Any], index: int, total: int) -> str:
    return (
        f"[{index}/{total}] {row.get('backend', '')} {latency_label(row['watchers'])}"
        f"{' across 2 replicas' if row.get('replicas') == 2 else ''}: "
        f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms "
        f"over {row['deliveries']:,} deliveries"
    )


def summarise(
    backend: str, raw: list[dict[str, Any]], summary: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The harness's summary with ``vs_no_watchers`` on the idle-watcher row, then
    the latency rows (they have no ceiling, so the harness leaves them to us)."""
    annotate_idle_cost(summary, raw)
    return summary + latency_rows(backend, raw)


def latency_rows(backend: str, raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latency rows: medians of each repetition's p50 and p99 per watcher count."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in raw:
        if row["workload"] == LATENCY:
            groups.setdefault(row["watchers"], []).append(row)
    return [
        {
            "backend": backend,
            "workload": latency_label(watchers),
            "in_flight": 1,
            "watchers": watchers,
            "replicas": rows[0]["replicas"],
            "ops_per_s": None,
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rows), 3),
            "p99_ms": round(statistics.median(r["p99_ms"] for r in rows), 3),
            "ratio_to_ceiling": None,
            "repetitions": len(rows),
            "records": rows[0]["records"],
        }
        for watchers, rows in sorted(groups.items())
    ]


def annotate_idle_cost(summary: list[dict[str, Any]], raw: list[dict[str, Any]]) -> None:
    """Adds ``vs_no_watchers`` to each ``append (100 idle watchers)`` row: the median
    over repetitions of its appends per second ÷ those without watchers in the same
    repetition, with the smallest and largest of those ratios."""
    by_repetition: dict[tuple[Any, int], dict[int, float]] = {}
    for row in raw:
        if row["workload"] in (idle_label(0), idle_label(IDLE_WATCHERS)):
            key = (row.get("backend"), row["repetition"])
            by_repetition.setdefault(key, {})[row["idle_watchers"]] = row["ops_per_s"]
    ratios: dict[Any, list[float]] = {}
    for (backend, _), figures in by_repetition.items():
        if figures.get(0) and IDLE_WATCHERS in figures:
            ratios.setdefault(backend, []).append(figures[IDLE_WATCHERS] / figures[0])
    for row in summary:
        paired = ratios.get(row["backend"])
        if row["workload"] == idle_label(IDLE_WATCHERS) and paired:
            row["vs_no_watchers"] = round(statistics.median(paired), 3)
            row["vs_no_watchers_range"] = [round(min(paired), 3), round(max(paired), 3)]


if __name__ == "__main__":
    main()
