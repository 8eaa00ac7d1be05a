"""Runs the benchmark plan against real server processes and reports ratios.

For each backend: a fresh database (a temporary SQLite file, or a fresh
PostgreSQL database on ``--postgres-url``'s server or a private durable one,
``bench/postgres.py``), histories seeded directly in
SQL (reads of the last page at two history sizes), one ``runstore serve``
process with the protections users run (``bench/protections.py``; ``--protections
off`` for the bare server), and one separate ``bench.driver`` process that runs
every measurement and reads the CPU the server and the database spent
(``bench/cpu.py``). Each figure is the median of ``--repeat`` repetitions; each
store figure is also given as a ratio of the ceiling measured against the same
server process in the same run. Then the optional modules (``OPTIONAL_MODULES``),
the scaling projection and the goals (``bench/goals.py``). Other modules plug
in through ``SERVER_MODULES`` (measured against each backend's main server)
and ``OPTIONAL_MODULES`` (measured once, after every backend).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib
import importlib.util
import json
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from bench import checkouts, cpu, goals, listings, postgres, protections, readme, standalone
from bench.protections import Protections
from runstore.server.db import migrate
from runstore.server.db.postgres import asyncpg_dsn

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
HISTORY_PAYLOAD = b'{"history":"' + b"h" * 180 + b'"}'
_PORT_LINE = re.compile(rb"serving on \S+ \(port (\d+)\)")
_METRICS_LINE = re.compile(rb"metrics at \S+ \(port (\d+)\)")

WRITE_WORKLOADS = (
    "append",
    "append_client",
    "append_batch",
    "append_shared_session",
    "append_varied",
    "start_terminal",
    "turn",
)
"""``append_client``: the typed Python client's ``append_run_record``, one
record per call from every task of one process (what a worker makes);
``append_batch``: AppendRunRecords of 4 × ~1 KiB records (its ops/s are records/s);
``append_shared_session``: 4 runs of each session appending at once;
``append_varied``: records of 200 B to 64 KiB (``bench/driver.py``)."""


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


@dataclass(frozen=True)
class Server:
    """A running ``runstore serve`` process and how to call it."""

    target: str
    pid: int
    log: Path
    """The server's stderr (its logs; with protections, JSON with an access line per call)."""
    protections: Protections
    metrics_port: int | None = None


@contextlib.asynccontextmanager
async def start_server(
    url: str,
    synchronous: str,
    protections: Protections | None = None,
    flags: Sequence[str] = (),
    directory: Path | None = None,
    source: Path | None = None,
) -> AsyncIterator[Server]:
    """One server process on an ephemeral port, its stderr in a file of
    ``directory`` (a temporary one by default); the server's code is that of
    the checkout ``source`` if given (``checkouts.source_env``), else this one's. With
    protections on, the metrics endpoint must answer and the log must hold
    access lines when the server stops, or the figures measured against it
    are not what they say."""
    protections = protections or Protections(on=False)
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsb-")))
        log_path = directory / f"server-{uuid.uuid4().hex[:8]}.log"
        log_file = stack.enter_context(log_path.open("wb"))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runstore.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            url,
            "--sqlite-synchronous",
            synchronous,
            *protections.flags,
            *flags,
            stderr=log_file,
            env={
                **checkouts.source_env(source),
                "PYTHONUNBUFFERED": "1",
                "RUNSTORE_LOG_LEVEL": "INFO",
            },
        )
        try:
            port, metrics_port = await _wait_for_port(process, log_path)
            if protections.on:
                await asyncio.to_thread(_check_metrics, metrics_port)
            yield Server(
                target=f"127.0.0.1:{port}",
                pid=process.pid,
                log=log_path,
                protections=protections,
                metrics_port=metrics_port,
            )
        finally:
            if process.returncode is None:
                process.terminate()
            await process.wait()
        if protections.on:
            _check_access_log(log_path)


async def _wait_for_port(process: Process, log_path: Path) -> tuple[int, int | None]:
    """The gRPC port (and the metrics port) once the server logs them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        log = await asyncio.to_thread(log_path.read_bytes)
        if (match := _PORT_LINE.search(log)) is not None:
            metrics = _METRICS_LINE.search(log)
            return int(match.group(1)), int(metrics.group(1)) if metrics else None
        if process.returncode is not None:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 0.05)
    log = await asyncio.to_thread(log_path.read_bytes)
    raise RuntimeError(f"server did not start:\n{log.decode(errors='replace')}")


def _check_metrics(port: int | None) -> None:
    if port is None:
        raise RuntimeError("the server with protections on did not log its metrics port")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        if response.status != 200:
            raise RuntimeError(f"metrics endpoint answered {response.status}")


def _check_access_log(log_path: Path) -> None:
    for line in log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and "method" in entry and "code" in entry:
                return
    raise RuntimeError(f"no JSON access line in the server's log {log_path}")


@contextlib.asynccontextmanager
async def server(url: str, synchronous: str, flags: Sequence[str] = ()) -> AsyncIterator[str]:
    """A bare server (no protections) with extra ``flags``: its address."""
    async with start_server(url, synchronous, flags=flags) as running:
        yield running.target


async def run_driver(
    target: Server | str,
    measurements: list[dict[str, Any]],
    *,
    tag: dict[str, Any] | None = None,
    database_url: str = "",
    channels: int = 1,
) -> list[dict[str, Any]]:
    """Runs ``measurements`` in a driver process, printing each figure as it
    comes. With a PostgreSQL ``database_url``, the driver also reads the CPU
    of that database's backends; ``channels``: connections the calls spread over."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.driver",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdin is not None and process.stdout is not None
    plan: dict[str, Any] = {"measurements": measurements, "channels": channels}
    if isinstance(target, Server):
        plan |= {"target": target.target, "server_pid": target.pid, **target.protections.plan()}
    else:
        plan["target"] = target
    if database_url.startswith("postgresql"):
        plan["database_dsn"] = asyncpg_dsn(database_url)
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
    protections = f", protections {row['protections']}" if "protections" in row else ""
    server_cpu = row.get("server_cpu_ms_per_op")
    cpu_text = f", server CPU {server_cpu:.3f} ms/op" if server_cpu is not None else ""
    return (
        f"[{index}/{total}] {row.get('backend', '')} {_label(row)}, "
        f"{row['concurrency']} in flight{protections}: {row['ops_per_s']:,.0f} ops/s, "
        f"p50 {row['p50_ms'] or 0:.2f} ms, p99 {row['p99_ms'] or 0:.2f} ms{cpu_text}"
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


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summarise(backend: str, raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (workload, in flight); a store figure's ratio is the median
    of its ratios to the ceiling measured just before it. CPU per operation is
    the median over the repetitions (None where it was not read)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    ceiling_of: dict[tuple[str, int], float] = {}
    for row in raw:
        groups.setdefault((_label(row), row["concurrency"]), []).append(row)
        if row["workload"] == "ceiling":
            ceiling_of[(row["pair"], row["concurrency"])] = row["ops_per_s"]
    summary = []
    for (label, concurrency), rows in groups.items():
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
                **{name: _round(_median([r.get(name) for r in rows]), 4) for name in CPU_FIELDS},
                **({"history": rows[0]["history"]} if "history" in rows[0] else {}),
                **({"table": rows[0]["table"]} if "table" in rows[0] else {}),
            }
        )
    return summary


CPU_FIELDS = (
    "server_cpu_ms_per_op",
    "db_cpu_ms_per_op",
    "client_cpu_ms_per_op",
    "commits_per_op",
)
"""CPU-ms per operation of the workload (one RPC, except start_terminal: 2 and
turn: 12; for append_batch, whose ops are records, per record), read by the
driver during each timed window (``bench/cpu.py``); and on PostgreSQL the
database's commits per operation (``pg_stat_database.xact_commit``)."""


def _figure(value: float | None, spec: str) -> str:
    """A table cell; latency rows have no throughput or ratio."""
    return "–" if value is None else format(value, spec)


def _cpu_cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def render(summary: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| backend | workload | in flight | ops/s | p50 ms | p99 ms | × ceiling "
        "| server CPU ms/op | db CPU ms/op | client CPU ms/op | commits/op |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in summary:
        database = row.get("db_cpu_ms_per_op")
        if database is None and row["backend"] == "sqlite" and row.get("server_cpu_ms_per_op"):
            database_cell = "in server"
        else:
            database_cell = _cpu_cell(database)
        lines.append(
            f"| {row['backend']} | {row['workload']} | {row['in_flight']} "
            f"| {_figure(row['ops_per_s'], ',.0f')} "
            f"| {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {_figure(row['ratio_to_ceiling'], '.2f')} "
            f"| {_cpu_cell(row.get('server_cpu_ms_per_op'))} | {database_cell} "
            f"| {_cpu_cell(row.get('client_cpu_ms_per_op'))} "
            f"| {_cpu_cell(row.get('commits_per_op'))} |"
        )
    return "\n".join(lines)


# --- Measurements ----------------------------------------------------------------


async def _measure(
    args: argparse.Namespace,
    backend: str,
    url: str,
    on: bool,
    plan: list[dict[str, Any]],
    tag: dict[str, Any] | None = None,
    *,
    with_modules: bool = False,
) -> list[dict[str, Any]]:
    """``plan`` against one fresh server process with protections ``on`` or
    off; ``with_modules``: then the ``SERVER_MODULES``' measurements against it."""
    tag = {"backend": backend, **(tag or {})}
    with tempfile.TemporaryDirectory(prefix="runstore-bench-server-") as directory:
        prepared = protections.prepare(on, Path(directory), tls=args.tls)
        async with start_server(
            url, args.sqlite_synchronous, prepared, directory=Path(directory)
        ) as running:
            rows = await run_driver(running, plan, tag=tag, database_url=url)
            for module in server_modules() if with_modules else ():
                rows += await module.measure_server(args, backend, url, running, tag)
            return rows


async def measure_protections_cost(
    args: argparse.Namespace, backend: str, url: str, workload: str = protections.PAIRED_WORKLOAD
) -> dict[str, Any]:
    """``workload`` at 16 in flight against ``--pairs`` pairs of servers, one
    with protections on and one off, back to back in alternating order."""
    # Every figure is a fresh server's: at least a second, after half a second
    # of warm-up (pooled connections opened, caches filled), even with --quick.
    spec = {
        "workload": workload,
        "concurrency": protections.PAIRED_IN_FLIGHT,
        "duration": max(args.duration, protections.PAIRED_MIN_SECONDS),
        "warmup": max(args.warmup, protections.PAIRED_MIN_WARMUP),
    }
    pairs = []
    for index, order in enumerate(protections.pair_orders(args.pairs)):
        print(
            f"protections pair {index + 1}/{args.pairs} ({backend}, {workload}): "
            + " then ".join(order)
        )
        figures: dict[str, float] = {}
        for side in order:
            (row,) = await _measure(
                args,
                backend,
                url,
                side == "on",
                [{**spec, "pair": f"protections-{workload}-{index}"}],
                tag={"protections": side},
            )
            figures[side] = row["ops_per_s"]
        pairs.append((figures["on"], figures["off"]))
    return protections.paired_cost(backend, pairs, workload)


async def measure_backend(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """The main plan on one backend (store workloads, then listings), and with
    ``--protections both`` the protections' cost: its results and sections."""
    on = args.protections != "off"
    raw: list[dict[str, Any]] = []
    sections: dict[str, Any] = {}
    if args.workloads - {"listings"}:
        async with database(backend, args.postgres_url) as url:
            await migrate.upgrade(url)
            for size in args.history if args.workloads & {"list_run", "list_session"} else ():
                if backend == "sqlite":
                    await asyncio.to_thread(seed_sqlite, url, size)
                else:
                    await seed_postgres(url, size)
            raw += await _measure(args, backend, url, on, plan_for(args), with_modules=True)
            if args.protections == "both":
                paired = [protections.PAIRED_WORKLOAD]
                paired += [w for w in protections.ALSO_PAIRED if w in args.workloads]
                sections["protections_cost"] = [
                    await measure_protections_cost(args, backend, url, workload)
                    for workload in paired
                ]
    for size in args.tables if "listings" in args.workloads else ():
        async with database(backend, args.postgres_url) as url:
            await migrate.upgrade(url)
            if backend == "sqlite":
                await asyncio.to_thread(listings.seed_sqlite, url, size)
            else:
                await listings.seed_postgres(url, size)
            raw += await _measure(args, backend, url, on, listing_plan(args, size))
    return {"results": summarise_with_modules(backend, raw), **sections}


def summarise_with_modules(backend: str, raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``summarise`` of the paired rows (those with a ``pair``), then each server
    module's ``summarise(backend, raw, summary)``, which may annotate rows or add
    rows of its own (e.g. ``bench.watch``'s latencies, which have no ceiling)."""
    summary = summarise(backend, [row for row in raw if "pair" in row])
    for module in server_modules():
        if hasattr(module, "summarise"):
            summary = module.summarise(backend, raw, summary)
    return summary


OPTIONAL_MODULES = ("bench.retention", "bench.noisy", "bench.triage", "bench.lone")
"""Measurements taken once, after every backend's main plan, each module used
when it is importable. It defines ``async def measure_report(args, report) ->
dict | None`` (``report`` holds ``results`` so far) and optionally
``add_arguments(parser)`` (its flags) and ``render(report) -> str | None`` (its
printed table). The dict it returns is merged into the report: its
``results`` rows are appended to ``results[]`` (same keys: ``backend``,
``workload``, ``in_flight``, ``ops_per_s``, ``ratio_to_ceiling`` where it has
one), any other key is a section of its own. ``bench/goals.py`` reads the rows
and sections it knows."""


SERVER_MODULES = ("bench.watch", "bench.peers", "bench.goclient")
"""Measurements taken against each backend's main server, right after the main
plan, so they pair with that server's ceiling: a module used here defines
``async def measure_server(args, backend, url, server: Server, tag) -> list``
returning raw driver rows (``workload``, ``concurrency``, ``ops_per_s``,
``pair`` naming the ceiling row it pairs with, ...), summarised with the main
plan's rows; rows without a ``pair`` are left to the module's optional
``summarise(backend, raw, summary) -> summary``. ``server.protections.plan()``
says how to call it."""


def _modules(names: Sequence[str], attribute: str) -> list[Any]:
    """The modules of ``names`` that exist and define ``attribute``."""
    found = []
    for name in names:
        if importlib.util.find_spec(name) is not None:
            module = importlib.import_module(name)
            if hasattr(module, attribute):
                found.append(module)
    return found


def optional_modules() -> list[Any]:
    return _modules(OPTIONAL_MODULES, "measure_report")


def server_modules() -> list[Any]:
    return _modules(SERVER_MODULES, "measure_server")


async def run(
    args: argparse.Namespace, postgres_server: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The whole plan; ``postgres_server``: ``bench.postgres.provide``'s section."""
    report: dict[str, Any] = {
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
            "protections": args.protections,
            "pairs": args.pairs if args.protections == "both" else 0,
            "tls": args.tls,
            "append_payload_bytes": 1024,
        },
        "protections": protections.DESCRIPTION if args.protections != "off" else "off",
        **({"postgres": postgres_server} if postgres_server else {}),
        "results": [],
    }
    for backend in args.backend:
        _merge(report, await measure_backend(args, backend))
    for module in optional_modules():
        section = await module.measure_report(args, report)
        if section:
            _merge(report, section)
    report["projection"] = cpu.projection_table(report["results"])
    report["goals"] = goals.evaluate(report)
    return report


def _merge(report: dict[str, Any], section: dict[str, Any]) -> None:
    """Adds a section's results rows and lists to the report's; other keys replace."""
    for key, value in section.items():
        if isinstance(value, list) and isinstance(report.get(key), list):
            report[key].extend(value)
        else:
            report[key] = value


def report_tables(report: dict[str, Any]) -> list[str]:
    """The report's tables in print order: results, the protections' cost, the
    optional modules' sections, the projection, the goals."""
    settings = report["settings"]
    tls = ", TLS" if settings.get("tls") else ""
    header = (
        f"runstore bench {report['started']} commit {report['commit']} "
        f"({report['machine']['cpus']} CPUs; SQLite synchronous={settings['sqlite_synchronous']}; "
        f"protections {settings.get('protections', 'off')}{tls}; "
        f"median of {settings['repeat']} × {settings['duration_s']:g} s)"
    )
    tables = [render(report["results"], header)]
    if server := postgres.render(report):
        tables.append(server)
    if report.get("protections_cost"):
        tables.append(protections.render_cost(report["protections_cost"]))
    for module in optional_modules():
        text = module.render(report) if hasattr(module, "render") else None
        if text:
            tables.append(text)
    if report.get("projection"):
        tables.append(cpu.render_projection(report["projection"]))
    tables.append(goals.render(report.get("goals") or goals.evaluate(report)))
    return tables


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
    standalone.add_backend_arguments(parser)
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
        default="append,append_client,append_client_go,append_batch,append_shared_session,append_varied,"
        "start_terminal,turn,"
        "list_run,list_session,listings,"
        "watch_latency,idle_watchers,retention,noisy_neighbour,triage,lone_append",
        help="comma-separated workloads (the ceiling is always measured)",
    )
    parser.add_argument(
        "--protections",
        choices=protections.MODES,
        default="on",
        help="on: the server as users run it (authentication with worker and host tokens, "
        "metrics, JSON access log to a file); off: the bare server; both: on, plus the "
        "protections' cost on appends (--pairs alternating on/off servers)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=protections.GOAL_PAIRS,
        help="on/off server pairs for the protections' cost (--protections both)",
    )
    parser.add_argument(
        "--tls", action="store_true", help="serve TLS (a throwaway CA) on every server"
    )
    parser.add_argument(
        "--readme",
        nargs="?",
        type=Path,
        const=RESULTS / "latest.json",
        default=None,
        metavar="RESULTS_JSON",
        help="measure nothing: regenerate the figures of docs/benchmarks.md from a results "
        "file (default bench/results/latest.json)",
    )
    parser.add_argument(
        "--readme-file",
        type=Path,
        default=readme.PAGE,
        help="the page --readme edits (default docs/benchmarks.md)",
    )
    for module in dict.fromkeys([*optional_modules(), *server_modules()]):
        if hasattr(module, "add_arguments"):
            module.add_arguments(parser)  # e.g. bench.peers's --peers
    parser.add_argument("--output", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    args.backend = standalone.backends(args.backend)
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
    if args.readme is not None:
        results = json.loads(args.readme.read_text())
        readme.regenerate(args.readme_file, results, report_tables(results))
        print(f"{args.readme_file}: benchmark section regenerated from {args.readme}")
        return 0
    with postgres.provide(args) as postgres_server:
        report = asyncio.run(run(args, postgres_server))
    for table in report_tables(report):
        print()
        print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    output = args.output or RESULTS / "latest.json"
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {output}")
    return 0
