"""Triage pages at scale (docs/contract.md §9.8): how long an operator waits
for the pages that find a failed run.

    python -m bench.triage [--backend sqlite,postgres] [--runs 1000000] [--repeat 5]
    make bench                 # the ``triage`` workload: the same, an optional
                               # module of bench/harness.py

A fresh database per backend is seeded in SQL (``seed_sqlite`` /
``seed_postgres``, seconds, not the API) with ``--runs`` runs in one
namespace, ``SESSION_RUNS`` of them in one session, then a real ``runstore
serve`` answers each case's first page (100 rows, with the status counts the
console asks for) and its second, through gRPC, one call at a time. The figure
is the median latency of opening a page; the goal is ``GOAL_SECONDS``.

Seeded rows, for g in 1..runs: run ``r{g}`` started at ``g`` ms, agent
``agent-{g % 10}``, in session ``big`` for g ≤ ``SESSION_RUNS``, else
sessionless when g is a multiple of 10, else in session ``s{g}``; status by
``g % 5`` (running, completed, failed, canceled, suspended), a failed one with
its failure stored; every fourth run a child of the run before it; labels
``{"team": "t{g % 3}"}``. Sessions: ``big`` and ``s{g}`` for g a multiple of
100 (created at ``g`` s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any, Final

import asyncpg
import grpc
from sqlalchemy.engine import make_url

from bench import postgres, standalone
from runstore.server.db.postgres import asyncpg_dsn
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from runstore.v1 import types_pb2 as pb

GOAL_SECONDS: Final = 1.0
"""Opening any triage page takes at most this long (issue 35)."""

SESSION_RUNS: Final = 10_000
"""Runs of the one big session."""

RUNS: Final = 1_000_000
"""Runs of the namespace by default."""

PAGE: Final = 100

_STATUS_OF = (
    "CASE g % 5 WHEN 0 THEN 'running' WHEN 1 THEN 'completed' WHEN 2 THEN 'failed' "
    "WHEN 3 THEN 'canceled' ELSE 'suspended' END"
)
_SESSION_OF = f"CASE WHEN g <= {SESSION_RUNS} THEN 'big' WHEN g % 10 = 0 THEN '' ELSE 's' || g END"
_FAILURE = (
    'CASE WHEN g % 5 = 2 THEN \'{{"message": "tool timed out", "kind": "timeout", '
    '"code": "E\' || (g % 7) || \'", "retryable": true}}\' ELSE NULL END'
)
_SEED_RUNS = (
    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, labels, "
    "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
    "cancellation_key, suspension_key, terminal_key, finished_at_ms, failure) "
    "SELECT 'r' || g, 'agent-' || (g % 10), " + _SESSION_OF + ", "
    "CASE WHEN g % 4 = 0 THEN 'r' || (g - 1) ELSE '' END, g, "
    "'{{\"team\": \"t' || (g % 3) || '\"}}', 'proceed', " + _STATUS_OF + ", '', g * 1000000, "
    "'k1', '', '', '', '', CASE WHEN g % 5 IN (1, 2, 3) THEN g + 250 ELSE NULL END, "
    + _FAILURE
    + " FROM {source}"
)
_SEED_SESSIONS = (
    "INSERT INTO sessions (session_id, status, created_at_s, created_at_ns) "
    "SELECT CASE WHEN g = 0 THEN 'big' ELSE 's' || g END, 'active', g, 0 "
    "FROM {source} WHERE g % 100 = 0"
)


def seed_sqlite(url: str, runs: int) -> None:
    """The rows above in a SQLite database (a recursive CTE: seconds per million)."""
    import sqlite3

    conn = sqlite3.connect(make_url(url).database or "")
    numbers = (
        "(WITH RECURSIVE seq(g) AS (SELECT {low} UNION ALL SELECT g + 1 FROM seq "
        "WHERE g < {high}) SELECT g FROM seq)"
    )
    with conn:
        conn.execute(_SEED_RUNS.format(source=numbers.format(low=1, high=runs)))
        conn.execute(_SEED_SESSIONS.format(source=numbers.format(low=0, high=runs)))
    conn.execute("ANALYZE")
    conn.close()


async def seed_postgres(url: str, runs: int) -> None:
    """The rows above in a PostgreSQL database (generate_series)."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        async with conn.transaction():
            await conn.execute(_SEED_RUNS.format(source=f"generate_series(1::bigint, {runs}) AS g"))
            await conn.execute(
                _SEED_SESSIONS.format(source=f"generate_series(0::bigint, {runs}) AS g")
            )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


NEWEST = sa.LIST_ORDER_NEWEST_FIRST


def cases() -> list[tuple[str, str, Any]]:
    """(label, rpc, request) of each page an operator opens to triage."""
    failed = [pb.RUN_STATUS_FAILED]
    return [
        ("runs, newest first", "ListRuns", sa.ListRunsRequest(order=NEWEST)),
        ("runs, oldest first", "ListRuns", sa.ListRunsRequest()),
        (
            "runs, failed, newest first",
            "ListRuns",
            sa.ListRunsRequest(statuses=failed, order=NEWEST),
        ),
        (
            "runs, failed or canceled, newest first",
            "ListRuns",
            sa.ListRunsRequest(statuses=[*failed, pb.RUN_STATUS_CANCELED], order=NEWEST),
        ),
        ("runs, run ID prefix", "ListRuns", sa.ListRunsRequest(run_id_prefix="r99999")),
        ("runs, one run ID", "ListRuns", sa.ListRunsRequest(run_id="r123457")),
        ("a run's children", "ListRuns", sa.ListRunsRequest(parent_run_id="r123455")),
        (
            "runs, agent prefix, newest first",
            "ListRuns",
            sa.ListRunsRequest(agent_id_prefix="agent-3", order=NEWEST),
        ),
        (
            "runs, label, roots, newest first",
            "ListRuns",
            sa.ListRunsRequest(labels={"team": "t1"}, root_only=True, order=NEWEST),
        ),
        (
            f"session of {SESSION_RUNS:,} runs, newest first",
            "ListRuns",
            sa.ListRunsRequest(session_id="big", order=NEWEST),
        ),
        (
            f"session of {SESSION_RUNS:,} runs, failed",
            "ListRuns",
            sa.ListRunsRequest(session_id="big", statuses=failed),
        ),
        ("sessions, newest first", "ListSessions", sa.ListSessionsRequest(order=NEWEST)),
        ("sessions, ID prefix", "ListSessions", sa.ListSessionsRequest(session_id_prefix="s9999")),
    ]


async def _open(stub: Any, rpc: str, request: Any) -> tuple[float, float, int]:
    """Seconds for the first page (with counts) and the second page; rows shown."""
    request.page_size = PAGE
    request.count_statuses = True
    started = time.perf_counter()
    first = await getattr(stub, rpc)(request)
    first_s = time.perf_counter() - started
    request.page_token = first.next_page_token
    request.count_statuses = False
    second_s = 0.0
    if request.page_token:
        started = time.perf_counter()
        await getattr(stub, rpc)(request)
        second_s = time.perf_counter() - started
    rows = len(first.runs if rpc == "ListRuns" else first.sessions)
    return first_s, second_s, rows


async def measure(backend: str, url: str, runs: int, repeat: int) -> list[dict[str, Any]]:
    """Each case's median page latency against one server on a seeded ``url``."""
    from bench.harness import server

    seeding = time.perf_counter()
    if backend == "sqlite":
        await asyncio.to_thread(seed_sqlite, url, runs)
    else:
        await seed_postgres(url, runs)
    seeded_s = time.perf_counter() - seeding
    rows: list[dict[str, Any]] = []
    async with server(url, "FULL") as target, grpc.aio.insecure_channel(target) as channel:
        stub = sa_grpc.SessionAdminStub(channel)
        for label, rpc, request in cases():
            timings = [await _open(stub, rpc, sa_copy(request)) for _ in range(repeat)]
            first = statistics.median(t[0] for t in timings)
            second = statistics.median(t[1] for t in timings)
            rows.append(
                {
                    "backend": backend,
                    "case": label,
                    "runs": runs,
                    "rows": timings[0][2],
                    "first_page_s": round(first, 4),
                    "next_page_s": round(second, 4),
                    "seeded_s": round(seeded_s, 1),
                    "goal_s": GOAL_SECONDS,
                    "met": max(first, second) <= GOAL_SECONDS,
                }
            )
    return rows


def sa_copy(request: Any) -> Any:
    copy = type(request)()
    copy.CopyFrom(request)
    return copy


async def measure_backends(
    backends: list[str], postgres_url: str, runs: int, repeat: int
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    async def one(backend: str, url: str) -> dict[str, Any]:
        results.extend(await measure(backend, url, runs, repeat))
        return {}

    await standalone.each_backend(backends, postgres_url, one)
    return results


# --- The harness's optional-module hooks (bench/harness.py OPTIONAL_MODULES) ---------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--triage-runs",
        type=int,
        default=None,
        help=f"triage workload: runs seeded in the namespace ({RUNS:,}; --quick 100,000)",
    )


async def measure_report(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    """The ``triage`` workload of ``python -m bench``: a ``triage`` section."""
    if "triage" not in args.workloads:
        return {}
    runs = args.triage_runs or (100_000 if args.quick else RUNS)
    repeat = 3 if args.quick else 5
    return {"triage": await measure_backends(args.backend, args.postgres_url, runs, repeat)}


def goal_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """``bench/goals.py``: the slowest page per backend against the goal."""
    from bench.goals import goal

    rows = []
    for backend in sorted({row["backend"] for row in report.get("triage", [])}):
        mine = [row for row in report["triage"] if row["backend"] == backend]
        slowest = max(max(row["first_page_s"], row["next_page_s"]) for row in mine)
        runs = mine[0]["runs"]
        note = "" if runs >= RUNS else f"{runs:,} runs (the goal's are {RUNS:,})"
        rows.append(
            goal(
                "triage",
                f"slowest triage page of {RUNS:,} runs ≤ {GOAL_SECONDS:g} s",
                slowest,
                GOAL_SECONDS,
                at_most=True,
                backend=backend,
                note=note,
            )
        )
    return rows


def render(report: Any) -> str | None:
    """The triage table: of a harness report (its ``triage`` section) or of rows."""
    results = report.get("triage") if isinstance(report, dict) else report
    if not results:
        return None
    lines = [
        f"triage: opening a page of {PAGE} (first page with status counts, then the next), "
        f"median seconds; goal ≤ {GOAL_SECONDS:g} s",
        f"{'backend':<9} {'runs':>10} {'case':<44} {'rows':>5} {'first':>8} {'next':>8} {'met':>4}",
    ]
    for row in results:
        lines.append(
            f"{row['backend']:<9} {row['runs']:>10,} {row['case']:<44} {row['rows']:>5} "
            f"{row['first_page_s']:>8.4f} {row['next_page_s']:>8.4f} "
            f"{'yes' if row['met'] else 'no':>4}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.triage", description=__doc__)
    standalone.add_backend_arguments(parser)
    parser.add_argument("--runs", type=int, default=RUNS, help="runs seeded in the namespace")
    parser.add_argument("--repeat", type=int, default=5, help="openings per case (median)")
    args = parser.parse_args(argv)
    with postgres.provide(args):
        results = asyncio.run(
            measure_backends(
                standalone.backends(args.backend), args.postgres_url, args.runs, args.repeat
            )
        )
    standalone.print_report(render(results), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
