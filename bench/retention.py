"""Retention benchmark (docs/contract.md §9.10): how fast the on-demand RPCs purge.

    python -m bench.retention [--backend sqlite,postgres] [--items 2000] [--repeat 3]
    make bench                                   # the ``retention`` workload: the same,
                                                 # an optional module of bench/harness.py

Against a real ``runstore serve`` process per backend (a throwaway database,
SQLite FULL), each repetition seeds through the API ``--items`` ended sessions
(one finished root run each) and ``--items`` finished sessionless runs, each
run with ``--records`` records (run_started, appends, run_completed), all
ended a day ago, then drains them the way a scheduler would:
``PurgeEndedSessions`` and then ``PurgeSessionlessRuns``, 100 per call, one
caller, until ``more`` is false. The figures are sessions and runs purged per
second of draining (seeding is not timed), the median over repetitions, which
alternate which kind is drained first so drift on a shared machine hits both.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import time
from typing import Any

import grpc

from bench import messages, postgres, standalone
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from runstore.v1 import types_pb2 as pb

SEEDERS = 16
"""Calls in flight while seeding (not timed)."""
BATCH = 100
DAY_MS = 86_400_000
_ids = itertools.count()


class Client:
    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.runtime = rs_grpc.RuntimeStoreStub(self.channel)
        self.admin = sa_grpc.SessionAdminStub(self.channel)

    async def finished_run(self, session_id: str, at_ms: int, records: int) -> None:
        """A run started, given ``records - 2`` appends and completed at ``at_ms``."""
        run = pb.RunStart(
            run_id=f"bench-retain-{os.getpid()}-{next(_ids)}",
            agent_id="bench",
            session_id=session_id,
            started_at=messages.stamp(at_ms),
        )
        started = messages.started(run)
        if session_id:
            canceled = messages.stopped_at_session_end(run)
            await self.runtime.StartRootRun(
                rs.StartRootRunRequest(run=run, started=started, canceled=canceled)
            )
        else:
            await self.runtime.StartOneShotRun(rs.StartOneShotRunRequest(run=run, started=started))
        for index in range(records - 2):
            record = messages.record(run, f"r{index}", "tool_result_received", b'{"ok":true}')
            await self.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))
        completed = messages.completed(run)
        await self.runtime.RecordRunTerminal(
            rs.RecordRunTerminalRequest(
                run_id=run.run_id, status=pb.RUN_STATUS_COMPLETED, record=completed
            )
        )

    async def ended_session(self, at_ms: int, records: int) -> None:
        session_id = f"bench-retain-{os.getpid()}-{next(_ids)}"
        await self.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=messages.stamp(at_ms))
        )
        await self.finished_run(session_id, at_ms, records)
        await self.admin.EndSession(
            sa.EndSessionRequest(session_id=session_id, ended_at=messages.stamp(at_ms))
        )


async def _seed(client: Client, items: int, records: int, at_ms: int) -> None:
    pending = itertools.count()

    async def seeder() -> None:
        while next(pending) < items:
            await client.ended_session(at_ms, records)
            await client.finished_run("", at_ms, records)

    await asyncio.gather(*(seeder() for _ in range(SEEDERS)))


async def _drain(call: Any, request: Any, field: str) -> tuple[int, float]:
    """Calls until ``more`` is false; (items purged, seconds)."""
    purged = 0
    started = time.perf_counter()
    while True:
        response = await call(request)
        purged += len(getattr(response, field))
        if not response.more:
            return purged, time.perf_counter() - started


async def measure(backend: str, url: str, items: int, records: int, repeat: int) -> dict[str, Any]:
    """Sessions and sessionless runs purged per second against one server on ``url``."""
    from bench.harness import server

    sessions: list[float] = []
    runs: list[float] = []
    async with server(url, "FULL") as target:
        client = Client(target)
        for repetition in range(repeat):
            now_ms = time.time_ns() // 1_000_000
            await _seed(client, items, records, now_ms - DAY_MS)
            cut = messages.stamp(now_ms)
            drains = [
                (
                    sessions,
                    client.admin.PurgeEndedSessions,
                    sa.PurgeEndedSessionsRequest(ended_before=cut, limit=BATCH),
                    "purged_session_ids",
                ),
                (
                    runs,
                    client.admin.PurgeSessionlessRuns,
                    sa.PurgeSessionlessRunsRequest(finished_before=cut, limit=BATCH),
                    "purged_run_ids",
                ),
            ]
            for rates, call, request, field in drains[:: 1 if repetition % 2 == 0 else -1]:
                purged, seconds = await _drain(call, request, field)
                if purged != items:
                    raise RuntimeError(f"{field}: purged {purged}, seeded {items}")
                rates.append(purged / seconds)
        await client.channel.close()
    session_rate, run_rate = statistics.median(sessions), statistics.median(runs)
    return {
        "backend": backend,
        "items": items,
        "records_per_run": records,
        "batch": BATCH,
        "repeat": repeat,
        "sessions_per_second": round(session_rate, 1),
        "sessionless_runs_per_second": round(run_rate, 1),
        "runs_over_sessions": round(run_rate / session_rate, 2),
        "all_sessions_per_second": [round(rate, 1) for rate in sessions],
        "all_runs_per_second": [round(rate, 1) for rate in runs],
    }


async def measure_backends(
    backends: list[str], postgres_url: str, items: int, records: int, repeat: int
) -> list[dict[str, Any]]:
    async def one(backend: str, url: str) -> dict[str, Any]:
        return await measure(backend, url, items, records, repeat)

    return await standalone.each_backend(backends, postgres_url, one)


# --- The harness's optional-module hooks (bench/harness.py OPTIONAL_MODULES) ---------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--retention-items",
        type=int,
        default=None,
        help="retention workload: sessions and runs seeded and purged per repetition "
        "(2000; --quick 300)",
    )


async def measure_report(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    """The ``retention`` workload of ``python -m bench``: a ``retention`` section."""
    if "retention" not in args.workloads:
        return {}
    items = args.retention_items or (300 if args.quick else 2000)
    repeat = 1 if args.quick else args.repeat
    rows = await measure_backends(args.backend, args.postgres_url, items, 4, repeat)
    return {"retention": rows}


def render(report: Any) -> str | None:
    """The retention table: of a harness report (its ``retention`` section) or of rows."""
    results = report.get("retention") if isinstance(report, dict) else report
    if not results:
        return None
    lines = [
        "retention: purged per second through the RPCs, 1 caller, batches of 100 "
        "(median of repetitions)",
        f"{'backend':<10} {'items':>6} {'records/run':>12} {'sessions/s':>11} "
        f"{'sessionless runs/s':>19} {'runs/sessions':>14}",
    ]
    for row in results:
        lines.append(
            f"{row['backend']:<10} {row['items']:>6} {row['records_per_run']:>12} "
            f"{row['sessions_per_second']:>11} {row['sessionless_runs_per_second']:>19} "
            f"{row['runs_over_sessions']:>14}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    standalone.add_backend_arguments(parser)
    parser.add_argument("--items", type=int, default=2000, help="sessions and runs per repetition")
    parser.add_argument("--records", type=int, default=4, help="records per run (at least 2)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (median reported)")
    args = parser.parse_args(argv)
    if args.records < 2:
        parser.error("--records is at least 2 (run_started and run_completed)")
    with postgres.provide(args):
        results = asyncio.run(
            measure_backends(
                standalone.backends(args.backend),
                args.postgres_url,
                args.items,
                args.records,
                args.repeat,
            )
        )
    standalone.print_report(render(results), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
