"""Watch benchmark (docs/contract.md §9.9): commit-to-delivery latency and the
cost of idle watchers on append throughput.

    python -m bench.watch [--postgres URL] [--records 200] [--seconds 5]

Every server is a real ``runstore serve`` process. On SQLite one server takes
the appends and serves the watchers; on PostgreSQL the writer is replica A and
the watchers are on replica B, so each record crosses replicas by NOTIFY.

* Latency: one writer appends ``--records`` records to one session, one at a
  time; each watcher notes when each record arrives. A record's latency is its
  arrival minus the moment its AppendRunRecord call was sent (so it includes
  the append's own round trip and commit), reported as p50 and p99 over every
  (record, watcher) pair, with 1 and with 100 watchers.
* Idle cost: appends per second by 16 concurrent appenders for ``--seconds``,
  with no watcher, then with 100 watchers each on a session of its own that
  nobody writes to (on PostgreSQL every append still sends its NOTIFY).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from bench.harness import server
from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from runstore.v1 import types_pb2 as pb

_ids = itertools.count()


class Client:
    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.runtime = rs_grpc.RuntimeStoreStub(self.channel)
        self.admin = sa_grpc.SessionAdminStub(self.channel)

    async def session_with_run(self) -> tuple[str, pb.RunStart]:
        """A new session and a started root run in it."""
        number = next(_ids)
        session_id = f"bench-watch-{time.time_ns()}-{number}"
        now = Timestamp()
        now.FromMilliseconds(time.time_ns() // 1_000_000)  # records carry milliseconds
        await self.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=now)
        )
        run = pb.RunStart(
            run_id=f"{session_id}-run", agent_id="bench", session_id=session_id, started_at=now
        )
        started = pb.RunRecord(
            event_key="started",
            run_id=run.run_id,
            agent_id="bench",
            session_id=session_id,
            type=lifecycle.RUN_STARTED,
            payload=lifecycle.encode_run_started(lifecycle.RunStartedPayload()),
            timestamp=now,
        )
        canceled = pb.RunRecord(
            event_key="stopped",
            run_id=run.run_id,
            agent_id="bench",
            session_id=session_id,
            type=lifecycle.RUN_COMPLETED,
            payload=lifecycle.encode_run_completed(
                lifecycle.RunCompletedPayload(
                    status="canceled",
                    phase="canceled",
                    cancellation_reason=lifecycle.REASON_SESSION_ENDED,
                )
            ),
            timestamp=now,
        )
        await self.runtime.StartRootRun(
            rs.StartRootRunRequest(run=run, started=started, canceled=canceled)
        )
        return session_id, run

    async def append(self, run: pb.RunStart, key: str) -> None:
        record = pb.RunRecord(
            event_key=key,
            run_id=run.run_id,
            agent_id=run.agent_id,
            session_id=run.session_id,
            type="tool_result_received",
            payload=b'{"ok":true}',
            timestamp=run.started_at,
        )
        await self.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def latency(writer: Client, watcher: Client, watchers: int, records: int) -> dict[str, Any]:
    session_id, run = await writer.session_with_run()
    sent: dict[str, float] = {}
    delays: list[float] = []
    ready = asyncio.Barrier(watchers + 1)

    async def watch() -> None:
        stream = watcher.runtime.WatchSessionRunRecords(
            rs.WatchSessionRunRecordsRequest(session_id=session_id)
        )
        await stream.read()  # the run_started record: the stream is open
        await ready.wait()
        got = 0
        while got < records:
            batch = await stream.read()
            arrived = time.perf_counter()
            for record in batch.events:
                delays.append(arrived - sent[record.event_key])
                got += 1
        stream.cancel()

    tasks = [asyncio.ensure_future(watch()) for _ in range(watchers)]
    await ready.wait()
    for index in range(records):
        key = f"k{index}"
        sent[key] = time.perf_counter()
        await writer.append(run, key)
        await asyncio.sleep(0.005)  # one record at a time, not a burst
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return {
        "watchers": watchers,
        "records": records,
        "p50_ms": round(statistics.median(delays) * 1000, 2),
        "p99_ms": round(_percentile(delays, 0.99) * 1000, 2),
    }


async def throughput(writer: Client, watcher: Client, idle: int, seconds: float) -> float:
    streams = []
    for _ in range(idle):
        session_id, _ = await writer.session_with_run()
        stream = watcher.runtime.WatchSessionRunRecords(
            rs.WatchSessionRunRecordsRequest(session_id=session_id)
        )
        await stream.read()
        streams.append(stream)
    runs = [(await writer.session_with_run())[1] for _ in range(16)]
    done = 0
    deadline = time.perf_counter() + seconds

    async def appender(run: pb.RunStart) -> None:
        nonlocal done
        for index in itertools.count():
            if time.perf_counter() >= deadline:
                return
            await writer.append(run, f"t{index}")
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(appender(run) for run in runs))
    rate = done / (time.perf_counter() - started)
    for stream in streams:
        stream.cancel()
    return round(rate, 1)


async def measure(backend: str, urls: tuple[str, str], args: argparse.Namespace) -> dict[str, Any]:
    writer_url, watcher_url = urls
    common = ("--migrate", "--max-watchers", "1000")
    async with contextlib.AsyncExitStack() as stack:
        writer_target = await stack.enter_async_context(server(writer_url, "FULL", common))
        watcher_target = (
            writer_target
            if backend == "sqlite"
            else await stack.enter_async_context(server(watcher_url, "FULL", common))
        )
        writer, watcher = Client(writer_target), Client(watcher_target)
        result: dict[str, Any] = {"backend": backend}
        result["latency"] = [
            await latency(writer, watcher, count, args.records) for count in (1, 100)
        ]
        result["appends_per_second"] = {
            "no watchers": await throughput(writer, watcher, 0, args.seconds),
            "100 idle watchers": await throughput(writer, watcher, 100, args.seconds),
        }
        await writer.channel.close()
        await watcher.channel.close()
        return result


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'watch.db'}"
        results.append(await measure("sqlite", (url, url), args))
    if args.postgres:
        results.append(await measure("postgres, 2 replicas", (args.postgres, args.postgres), args))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watch", description=__doc__)
    parser.add_argument("--postgres", default="", help="an empty, migrated PostgreSQL URL")
    parser.add_argument("--records", type=int, default=200, help="records per latency run")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput run")
    args = parser.parse_args(argv)
    for result in asyncio.run(main_async(args)):
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
