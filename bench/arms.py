"""Two server configurations side by side: ``python -m bench.arms``.

Appends (``--workload``, default ``append``) at 16 in flight (protections
on) against a fresh server started with the flags of arm A, then of arm B, in
alternating order over ``--pairs`` pairs,
on a fresh database per backend; the figure is the median of the paired
ratios B ÷ A (throughput), with their spread. Used to decide settings by
measurement, e.g.::

    python -m bench.arms --backend sqlite,postgres \\
        --arm "--event-loop asyncio" --arm "--event-loop uvloop"
    python -m bench.arms --backend postgres --channels 8 \\
        --arm "--workers 1" --arm "--workers 2"

With ``--source DIR`` twice, arm A's server runs the code of checkout A and
arm B's that of checkout B (the same flags, or each arm's ``--arm``), each
measurement on a fresh database migrated by its arm's own code: a change
measured against the commit before it, in one run::

    git worktree add /tmp/before HEAD~1
    python -m bench.arms --backend sqlite,postgres --pairs 10 \
        --source /tmp/before --source .

With ``--channels N`` the driver spreads its calls over N connections (the
kernel spreads connections, not calls, over the workers of ``--workers``).
On a machine with few cores the client, the server and PostgreSQL share
them, so a ratio measured there is a floor of what a larger host gets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import checkouts, harness, postgres, protections, standalone
from runstore.server.db import migrate

CPU_FIGURES = ("server_cpu_ms_per_op", "db_cpu_ms_per_op")
"""CPU per append (of the server process, of PostgreSQL's backends) compared as well."""


async def _measure(
    args: argparse.Namespace,
    backend: str,
    url: str,
    flags: list[str],
    pair: int,
    source: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="runstore-bench-arms-") as directory:
        prepared = protections.prepare(True, Path(directory), tls=False)
        async with harness.start_server(
            url, "FULL", prepared, flags=flags, directory=Path(directory), source=source
        ) as running:
            spec = {
                "workload": args.workload,
                "concurrency": args.in_flight,
                "duration": args.duration,
                "warmup": args.warmup,
                "pair": f"arms-{pair}",
            }
            # The parent of --workers serves nothing: CPU per call is not read.
            server = (
                running
                if "--workers" not in flags
                else harness.Server(
                    target=running.target, pid=0, log=running.log, protections=running.protections
                )
            )
            (row,) = await harness.run_driver(
                server, [spec], database_url=url, channels=args.channels
            )
            return row


async def _measure_source(
    args: argparse.Namespace, backend: str, flags: list[str], pair: int, source: Path
) -> dict[str, Any]:
    """One measurement of checkout ``source`` on a database of its own schema."""
    async with harness.database(backend, args.postgres_url) as url:
        await checkouts.migrate_from(source, url)
        return await _measure(args, backend, url, flags, pair, source)


async def compare(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    arms = [shlex.split(arm) for arm in args.arm]
    sources = [Path(source) for source in args.source]
    async with contextlib.AsyncExitStack() as stack:
        url = ""
        if not sources:
            url = await stack.enter_async_context(harness.database(backend, args.postgres_url))
            await migrate.upgrade(url)
        ratios: list[float] = []
        cpu_ratios: dict[str, list[float]] = {key: [] for key in CPU_FIGURES}
        for pair in range(args.pairs):
            order = (0, 1) if pair % 2 == 0 else (1, 0)
            rows: dict[int, dict[str, Any]] = {}
            for arm in order:
                if sources:
                    rows[arm] = await _measure_source(args, backend, arms[arm], pair, sources[arm])
                else:
                    rows[arm] = await _measure(args, backend, url, arms[arm], pair)
            ratios.append(rows[1]["ops_per_s"] / rows[0]["ops_per_s"])
            for key, values in cpu_ratios.items():
                if rows[0].get(key) and rows[1].get(key):
                    values.append(rows[1][key] / rows[0][key])
            print(
                f"{backend} pair {pair + 1}/{args.pairs}: A {rows[0]['ops_per_s']:,.0f}/s, "
                f"B {rows[1]['ops_per_s']:,.0f}/s, B/A {ratios[-1]:.3f}",
                flush=True,
            )
    return {
        "backend": backend,
        "a": " ".join(filter(None, [str(sources[0]) if sources else "", args.arm[0]])),
        "b": " ".join(filter(None, [str(sources[1]) if sources else "", args.arm[1]])),
        "pairs": args.pairs,
        "b_vs_a": round(statistics.median(ratios), 3),
        "range": [round(min(ratios), 3), round(max(ratios), 3)],
        **{
            f"{key}_b_vs_a": round(statistics.median(values), 3)
            for key, values in cpu_ratios.items()
            if values
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.arms", description=__doc__)
    standalone.add_backend_arguments(parser)
    parser.add_argument("--arm", action="append", default=[], help="server flags (twice)")
    parser.add_argument(
        "--source", action="append", default=[], help="a checkout whose server to run (twice)"
    )
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument(
        "--workload", default="append", help="the driver's workload (append, append_batch, ...)"
    )
    parser.add_argument("--channels", type=int, default=1)
    args = parser.parse_args(argv)
    if args.source and len(args.source) != 2:
        parser.error("--source is given twice: A, then B")
    args.source = [str(Path(source).resolve()) for source in args.source]
    if not args.arm and args.source:
        args.arm = ["", ""]
    if len(args.arm) != 2:
        parser.error("--arm is given twice: A, then B (or --source twice)")
    with postgres.provide(args):
        for backend in standalone.backends(args.backend):
            result = asyncio.run(compare(args, backend))
            print(
                f"{backend}: B ({result['b']}) ÷ A ({result['a']}) = {result['b_vs_a']:.3f} "
                f"(median of {result['pairs']} pairs, {result['range'][0]:.3f}–"
                f"{result['range'][1]:.3f}; {args.workload} at {args.in_flight} in flight, "
                f"{args.channels} connection(s))",
                flush=True,
            )
            for key in CPU_FIGURES:
                if f"{key}_b_vs_a" in result:
                    print(f"{backend}: {key} B ÷ A = {result[f'{key}_b_vs_a']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
