"""Two server configurations side by side: ``python -m bench.arms``.

Appends at 16 in flight (protections on) against a fresh server started with
the flags of arm A, then of arm B, in alternating order over ``--pairs`` pairs,
on a fresh database per backend; the figure is the median of the paired
ratios B ÷ A (throughput), with their spread. Used to decide settings by
measurement, e.g.::

    python -m bench.arms --backend sqlite,postgres \\
        --arm "--event-loop asyncio" --arm "--event-loop uvloop"
    python -m bench.arms --backend postgres --channels 8 \\
        --arm "--workers 1" --arm "--workers 2"

With ``--channels N`` the driver spreads its calls over N connections (the
kernel spreads connections, not calls, over the workers of ``--workers``).
On a machine with few cores the client, the server and PostgreSQL share
them, so a ratio measured there is a floor of what a larger host gets.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness, protections, standalone
from runstore.server.db import migrate


async def _measure(
    args: argparse.Namespace, backend: str, url: str, flags: list[str], pair: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="runstore-bench-arms-") as directory:
        prepared = protections.prepare(True, Path(directory), tls=False)
        async with harness.start_server(
            url, "FULL", prepared, flags=flags, directory=Path(directory)
        ) as running:
            spec = {
                "workload": "append",
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


async def compare(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    arms = [shlex.split(arm) for arm in args.arm]
    async with harness.database(backend, args.postgres_url) as url:
        await migrate.upgrade(url)
        ratios: list[float] = []
        for pair in range(args.pairs):
            order = (0, 1) if pair % 2 == 0 else (1, 0)
            figures: dict[int, float] = {}
            for arm in order:
                row = await _measure(args, backend, url, arms[arm], pair)
                figures[arm] = row["ops_per_s"]
            ratios.append(figures[1] / figures[0])
            print(
                f"{backend} pair {pair + 1}/{args.pairs}: A {figures[0]:,.0f}/s, "
                f"B {figures[1]:,.0f}/s, B/A {ratios[-1]:.3f}",
                flush=True,
            )
    return {
        "backend": backend,
        "a": args.arm[0],
        "b": args.arm[1],
        "pairs": args.pairs,
        "b_vs_a": round(statistics.median(ratios), 3),
        "range": [round(min(ratios), 3), round(max(ratios), 3)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.arms", description=__doc__)
    parser.add_argument("--backend", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default=harness.parse_args([]).postgres_url)
    parser.add_argument("--arm", action="append", required=True, help="server flags (twice)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--channels", type=int, default=1)
    args = parser.parse_args(argv)
    if len(args.arm) != 2:
        parser.error("--arm is given twice: A, then B")
    for backend in standalone.backends(args.backend):
        result = asyncio.run(compare(args, backend))
        print(
            f"{backend}: B ({result['b']}) ÷ A ({result['a']}) = {result['b_vs_a']:.3f} "
            f"(median of {result['pairs']} pairs, {result['range'][0]:.3f}–"
            f"{result['range'][1]:.3f}; appends at {args.in_flight} in flight, "
            f"{args.channels} connection(s))",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
