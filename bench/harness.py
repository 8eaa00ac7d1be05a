"""Runs the benchmark plan against real server processes and reports ratios.

For each backend: a fresh database (a temporary SQLite file, or a fresh
PostgreSQL database next to ``--postgres-url``), histories seeded directly in
SQL (reads of the last page at two history sizes), one ``runstore serve``
process, and one separate ``bench.driver`` process that runs every
measurement. Each figure is the median of ``--repeat`` repetitions; each store
figure is also given as a ratio of the ceiling measured against the same
server process in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import hashlib
import importlib.util
import json
import os
import platform
import re
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from bench import listings
from runstore.server.db import migrate
from runstore.server.db.postgres import asyncpg_dsn

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
HISTORY_PAYLOAD = b'{"history":"' + b"h" * 180 + b'"}'
_PORT_LINE = re.compile(rb"serving on \S+ \(port (\d+)\)")

WRITE_WORKLOADS = ("append", "append_batch", "start_terminal", "turn")
"""``append_batch``: AppendRunRecords of 4 × ~1 KiB records; its ops/s are records/s."""


# --- Databases and seeded histories -------------------------------------------


@contextlib.asynccontextmanager
async def database(backend: str, postgres_url: str) -> AsyncIterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="runstore-bench-") as directory:
            yield f"sqlite:///{Path(directory) / 'bench.db'}"
        return
    name = f"runstore_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(asyncpg_dsn(postgres_url))
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        admin = await asyncpg.connect(asyncpg_dsn(postgres_url))
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _history_ids(size: int) -> tuple[str, str]:
    return f"history-{size}", f"history-run-{size}"


_SEED_SESSION = (
    "INSERT INTO sessions (session_id, status, created_at_s, created_at_ns, "
    "ended_at_s, ended_at_ns) VALUES ({p1}, 'active', 0, 0, NULL, NULL)"
)
_SEED_RUN = (
    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, labels, "
    "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
    "cancellation_key, suspension_key, terminal_key, checkpoint_id, checkpoint_data) "
    "VALUES ({p1}, 'bench-agent', {p2}, '', 0, '{{}}', 'proceed', 'running', '', "
    "0, 'k1', '', '', '', '', NULL, NULL)"
)
_SEED_RECORDS_TAIL = (
    "INSERT INTO records (run_id, record_id, event_key, agent_id, session_id, turn_id, type, "
    "payload, payload_size, timestamp_ms, session_position) "
    "SELECT {p1}, g, 'k' || g, 'bench-agent', {p2}, '', 'history', {p3}, {p4}, 0, g FROM {source}"
)


def seed_sqlite(url: str, size: int) -> None:
    session_id, run_id = _history_ids(size)
    conn = sqlite3.connect(make_url(url).database or "")
    with conn:
        conn.execute(_SEED_SESSION.format(p1="?"), (session_id,))
        conn.execute(_SEED_RUN.format(p1="?", p2="?"), (run_id, session_id))
        source = (
            "(WITH RECURSIVE seq(g) AS "
            "(SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < ?) SELECT g FROM seq)"
        )
        conn.execute(
            _SEED_RECORDS_TAIL.format(p1="?", p2="?", p3="?", p4="?", source=source),
            (run_id, session_id, HISTORY_PAYLOAD, len(HISTORY_PAYLOAD), size),
        )
    conn.close()


async def seed_postgres(url: str, size: int) -> None:
    session_id, run_id = _history_ids(size)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        async with conn.transaction():
            await conn.execute(_SEED_SESSION.format(p1="$1"), session_id)
            await conn.execute(_SEED_RUN.format(p1="$1", p2="$2"), run_id, session_id)
            await conn.execute(
                _SEED_RECORDS_TAIL.format(
                    p1="$1", p2="$2", p3="$3", p4="$4", source="generate_series(1, $5) AS g"
                ),
                run_id,
                session_id,
                HISTORY_PAYLOAD,
                len(HISTORY_PAYLOAD),
                size,
            )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


# --- Processes ----------------------------------------------------------------


CHAINS = ("off", "on")
"""The interceptor chain's optional concerns: ``off`` is a server as it starts by
default (no metrics, text logs, no access log, no authentication); ``on`` adds
everything an operator turns on: metrics (scraped by nobody), JSON logs with the
access line per call, and authentication with a bearer token on every call."""


def chain_flags(chain: str, directory: Path) -> tuple[list[str], str]:
    """The ``runstore serve`` flags of ``chain`` and the bearer token calls carry."""
    if chain == "off":
        return [], ""
    flags = ["--metrics-listen", "127.0.0.1:0", "--log-format", "json", "--access-log"]
    token = ""
    if importlib.util.find_spec("runstore.server.auth") is not None:
        # Authentication (an admin principal: the driver creates sessions and appends).
        token = secrets.token_urlsafe(32)
        auth_file = directory / "auth.toml"
        auth_file.write_text(
            "[[principal]]\n"
            'name = "bench"\n'
            'role = "admin"\n'
            f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
        )
        auth_file.chmod(0o600)
        flags += ["--auth-file", str(auth_file)]
    return flags, token


@contextlib.asynccontextmanager
async def server(url: str, synchronous: str, flags: Sequence[str] = ()) -> AsyncIterator[str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.server.cli",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        url,
        "--sqlite-synchronous",
        synchronous,
        *flags,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "RUNSTORE_LOG_LEVEL": "INFO"},
    )
    assert process.stderr is not None
    log = b""
    try:
        while (match := _PORT_LINE.search(log)) is None:
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
            if not line:
                raise RuntimeError(f"server did not start:\n{log.decode()}")
            log += line
        drain = asyncio.ensure_future(process.stderr.read())
        yield f"127.0.0.1:{int(match.group(1))}"
    finally:
        process.terminate()
        await process.wait()
        with contextlib.suppress(Exception):
            await drain


async def run_driver(
    target: str,
    measurements: list[dict[str, Any]],
    *,
    token: str = "",
    tag: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Runs ``measurements`` in a driver process, printing each figure as it comes."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.driver",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdin is not None and process.stdout is not None
    plan = {"target": target, "measurements": measurements, "token": token}
    process.stdin.write(json.dumps(plan).encode())
    process.stdin.close()
    rows = []
    while line := await process.stdout.readline():
        if line.strip():
            row = {**json.loads(line), **(tag or {})}
            print(progress_line(row, len(rows) + 1, len(measurements)), flush=True)
            rows.append(row)
    if await process.wait() != 0:
        raise RuntimeError("benchmark driver failed")
    return rows


def progress_line(row: dict[str, Any], index: int, total: int) -> str:
    """One figure as soon as it is measured (the table comes at the end)."""
    chain = f", chain {row['chain']}" if "chain" in row else ""
    return (
        f"[{index}/{total}] {row.get('backend', '')} {_label(row)}, "
        f"{row['concurrency']} in flight{chain}: {row['ops_per_s']:,.0f} ops/s, "
        f"p50 {row['p50_ms'] or 0:.2f} ms, p99 {row['p99_ms'] or 0:.2f} ms"
    )


# --- Plan and report ------------------------------------------------------------


def plan_for(
    args: argparse.Namespace, repeat: int | None = None, pairs: str = ""
) -> list[dict[str, Any]]:
    small, large = args.history
    cases: list[dict[str, Any]] = [{"workload": name} for name in WRITE_WORKLOADS]
    for size in (small, large):
        session_id, run_id = _history_ids(size)
        page = {"history": size, "cursor": str(size - 100)}
        cases.append({"workload": "list_run", "run_id": run_id, **page})
        cases.append({"workload": "list_session", "session_id": session_id, **page})
    cases = [c for c in cases if c["workload"] in args.workloads]
    return _paired(args, cases, repeat=repeat, pairs=pairs)


def listing_plan(args: argparse.Namespace, size: int) -> list[dict[str, Any]]:
    """One page of each listing shape over a table of ``size`` rows, at 1 in
    flight: the figure is a page's cost, compared across table sizes."""
    cases = [{"workload": "listing", "table": size, **case} for case in listings.cases(size)]
    return _paired(args, cases, concurrencies=[1], repeat=1 if args.quick else args.repeat)


def _paired(
    args: argparse.Namespace,
    cases: list[dict[str, Any]],
    concurrencies: list[int] | None = None,
    repeat: int | None = None,
    pairs: str = "",
) -> list[dict[str, Any]]:
    measurements = []
    for concurrency in concurrencies or args.concurrency:
        base = {"concurrency": concurrency, "duration": args.duration, "warmup": args.warmup}
        # Each store measurement comes right after a ceiling measurement of its
        # own, so a ratio compares two figures taken seconds apart on a noisy
        # machine; repetitions interleave instead of running back to back.
        for repetition in range(args.repeat if repeat is None else repeat):
            for index, case in enumerate(c for c in cases if c["workload"] != "ceiling"):
                pair = f"{pairs}{repetition}-{index}"
                measurements.append({**base, "workload": "ceiling", "pair": pair})
                measurements.append({**base, **case, "repetition": repetition, "pair": pair})
    return measurements


def _label(row: dict[str, Any]) -> str:
    if "table" in row:
        return f"{row['case']} (table of {row['table']:,})"
    if "history" in row:
        return f"{row['workload']} (last page of {row['history']:,})"
    return row["workload"]


def summarise(backend: str, raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (workload, in flight); a store figure's ratio is the median
    of its ratios to the ceiling measured just before it."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    ceiling_of: dict[tuple[str, int], float] = {}
    for row in raw:
        groups.setdefault((_label(row), row["concurrency"], row.get("chain")), []).append(row)
        if row["workload"] == "ceiling":
            ceiling_of[(row["pair"], row["concurrency"])] = row["ops_per_s"]
    summary = []
    for (label, concurrency, chain), rows in groups.items():
        throughput = statistics.median(r["ops_per_s"] for r in rows)
        ratio = statistics.median(
            r["ops_per_s"] / ceiling_of[(r["pair"], concurrency)] for r in rows
        )
        summary.append(
            {
                "backend": backend,
                "workload": label,
                "in_flight": concurrency,
                "ops_per_s": round(throughput, 1),
                "p50_ms": round(statistics.median(r["p50_ms"] for r in rows), 3),
                "p99_ms": round(statistics.median(r["p99_ms"] for r in rows), 3),
                "ratio_to_ceiling": round(ratio, 3),
                "repetitions": len(rows),
                **({"chain": chain} if chain is not None else {}),
            }
        )
    return summary


def chain_cost(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each store figure with the chain off and on, side by side."""
    by_key = {(r["backend"], r["workload"], r["in_flight"], r.get("chain")): r for r in summary}
    rows = []
    for (backend, workload, in_flight, chain), off in by_key.items():
        on = by_key.get((backend, workload, in_flight, "on"))
        if chain != "off" or workload == "ceiling" or on is None:
            continue
        rows.append(
            {
                "backend": backend,
                "workload": workload,
                "in_flight": in_flight,
                "off_ops_per_s": off["ops_per_s"],
                "on_ops_per_s": on["ops_per_s"],
                "on_vs_off": round(on["ops_per_s"] / off["ops_per_s"], 3),
                "off_p50_ms": off["p50_ms"],
                "on_p50_ms": on["p50_ms"],
                "off_p99_ms": off["p99_ms"],
                "on_p99_ms": on["p99_ms"],
            }
        )
    return rows


def chain_on_description() -> str:
    concerns = ["metrics", "JSON logs with an access line per call"]
    if importlib.util.find_spec("runstore.server.auth") is not None:
        concerns.append("authentication (bearer token)")
    return " + ".join(concerns)


def render_chain_cost(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Interceptor chain off (the defaults) vs on ({chain_on_description()}):",
        "",
        "| backend | workload | in flight | ops/s off | ops/s on | on/off "
        "| p50 ms off | p50 ms on | p99 ms off | p99 ms on |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {row['workload']} | {row['in_flight']} "
            f"| {row['off_ops_per_s']:,.0f} | {row['on_ops_per_s']:,.0f} | {row['on_vs_off']:.2f} "
            f"| {row['off_p50_ms']:.2f} | {row['on_p50_ms']:.2f} "
            f"| {row['off_p99_ms']:.2f} | {row['on_p99_ms']:.2f} |"
        )
    return "\n".join(lines)


def render(summary: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| backend | workload | in flight | ops/s | p50 ms | p99 ms | × ceiling |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in summary:
        chain = f" (chain {row['chain']})" if "chain" in row else ""
        lines.append(
            f"| {row['backend']} | {row['workload']}{chain} | {row['in_flight']} "
            f"| {row['ops_per_s']:,.0f} "
            f"| {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['ratio_to_ceiling']:.2f} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    summary: list[dict[str, Any]] = []
    for backend in args.backend:
        raw: list[dict[str, Any]] = []
        if args.workloads - {"listings", "retention"}:
            async with database(backend, args.postgres_url) as url:
                await migrate.upgrade(url)
                for size in args.history if args.workloads & {"list_run", "list_session"} else ():
                    if backend == "sqlite":
                        await asyncio.to_thread(seed_sqlite, url, size)
                    else:
                        await seed_postgres(url, size)
                with tempfile.TemporaryDirectory(prefix="runstore-bench-chain-") as directory:
                    if args.chain == "both":
                        # Repetitions alternate between a server with the chain off
                        # and one with it on, so drift on a noisy machine hits both.
                        for repetition in range(args.repeat):
                            for chain in CHAINS:
                                raw += await _measure(
                                    args,
                                    backend,
                                    url,
                                    chain,
                                    Path(directory),
                                    1,
                                    f"{chain}{repetition}-",
                                )
                    else:
                        raw += await _measure(args, backend, url, args.chain, Path(directory))
        for size in args.tables if "listings" in args.workloads else ():
            async with database(backend, args.postgres_url) as url:
                await migrate.upgrade(url)
                if backend == "sqlite":
                    await asyncio.to_thread(listings.seed_sqlite, url, size)
                else:
                    await listings.seed_postgres(url, size)
                async with server(url, args.sqlite_synchronous) as target:
                    raw += await run_driver(
                        target, listing_plan(args, size), tag={"backend": backend}
                    )
        summary.extend(summarise(backend, raw))
    retained = await _retention(args)
    return {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "bench", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "commit": _git_commit(),
        "settings": {
            "workloads": sorted(args.workloads),
            "duration_s": args.duration,
            "repeat": args.repeat,
            "concurrency": args.concurrency,
            "history": args.history,
            "tables": args.tables,
            "sqlite_synchronous": args.sqlite_synchronous,
            "chain": args.chain,
            "append_payload_bytes": 1024,
        },
        "results": summary,
        **({"retention": retained} if retained else {}),
        **(
            {"chain_on": chain_on_description(), "chain_cost": chain_cost(summary)}
            if args.chain == "both"
            else {}
        ),
    }


async def _measure(
    args: argparse.Namespace,
    backend: str,
    url: str,
    chain: str,
    directory: Path,
    repeat: int | None = None,
    pairs: str = "",
) -> list[dict[str, Any]]:
    """The plan against one server process with ``chain`` off or on."""
    flags, token = chain_flags(chain, directory)
    tag: dict[str, Any] = {"backend": backend}
    if args.chain != "off":
        tag["chain"] = chain
    async with server(url, args.sqlite_synchronous, flags) as target:
        return await run_driver(target, plan_for(args, repeat, pairs), token=token, tag=tag)


async def _retention(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ``retention`` workload: its own module (bench/retention.py)."""
    if "retention" not in args.workloads:
        return []
    from bench import retention

    items = args.retention_items or (300 if args.quick else 2000)
    return await retention.measure_backends(
        args.backend, args.postgres_url, items, 4, 1 if args.quick else args.repeat
    )


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    parser.add_argument(
        "--backend",
        default="sqlite,postgres",
        help="comma-separated backends (sqlite, postgres)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "RUNSTORE_BENCH_POSTGRES_URL",
            os.environ.get(
                "RUNSTORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
            ),
        ),
        help="a PostgreSQL server where a throwaway database may be created",
    )
    parser.add_argument("--duration", type=float, help="seconds per measurement")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before measuring")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (median is reported)")
    parser.add_argument("--concurrency", default="1,16", help="calls in flight, comma-separated")
    parser.add_argument(
        "--history", default=None, help="two history sizes for the page reads (e.g. 10000,1000000)"
    )
    parser.add_argument(
        "--tables",
        default=None,
        help="two table sizes (sessions and runs) for the listings (e.g. 10000,1000000)",
    )
    parser.add_argument("--sqlite-synchronous", default="FULL", help="FULL or NORMAL")
    parser.add_argument(
        "--workloads",
        default="append,start_terminal,turn,list_run,list_session,listings,retention",
        help="comma-separated workloads (the ceiling is always measured)",
    )
    parser.add_argument(
        "--chain",
        choices=("off", "on", "both"),
        default="off",
        help="the interceptor chain's optional concerns (metrics, JSON access log, auth): "
        "off (the defaults), on, or both side by side",
    )
    parser.add_argument(
        "--retention-items",
        type=int,
        default=None,
        help="retention: sessions and runs seeded and purged per repetition (2000; quick 300)",
    )
    parser.add_argument("--output", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    args.backend = [b.strip() for b in args.backend.split(",") if b.strip()]
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.workloads = {w.strip() for w in args.workloads.split(",") if w.strip()}
    if not args.workloads:
        parser.error("--workloads names at least one workload")
    if args.duration is None:
        args.duration = 0.2 if args.quick else 3.0
    if args.warmup is None:
        args.warmup = 0.05 if args.quick else 0.5
    history = args.history or ("10000,100000" if args.quick else "10000,1000000")
    args.history = [int(h) for h in history.split(",")]
    if len(args.history) != 2:
        parser.error("--history takes two sizes")
    tables = args.tables or ("10000,100000" if args.quick else "10000,1000000")
    args.tables = [int(t) for t in tables.split(",")]
    if len(args.tables) != 2 or min(args.tables) < 5000:
        parser.error("--tables takes two sizes of at least 5000 (every timed page must be full)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    header = (
        f"runstore bench {report['started']} commit {report['commit']} "
        f"({report['machine']['cpus']} CPUs; SQLite synchronous={args.sqlite_synchronous}; "
        f"median of {args.repeat} × {args.duration:g} s)"
    )
    print()
    print(render(report["results"], header))
    if "chain_cost" in report:
        print()
        print(render_chain_cost(report["chain_cost"]))
    if "retention" in report:
        from bench import retention

        print()
        print(retention.render(report["retention"]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    output = args.output or RESULTS / "latest.json"
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {output}")
    return 0
