"""The ``lone_append`` workload: what coalescing costs an append that comes alone.

The typed Python client's ``append_run_record`` with one call in flight, on
one server, with coalescing on (``AppendCoalescing``, the default) and off
(``RemoteStore(coalescing=None)``): ``PAIRS`` pairs in alternating order, each
arm ``APPENDS`` appends after ``WARMUP`` unmeasured ones, on a run of its own.
Reported: each arm's p99, and the median over the pairs of p99 on ÷ p99 off
(goal ≤ ``GOAL``: a lone append is never delayed, docs/limits.md "Coalesced
appends").
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any, Final

from bench import messages, standalone
from bench.stats import latency_ms
from runstore.client.coalesce import DEFAULT_COALESCING
from runstore.client.model import RunRecord
from runstore.client.remote import RemoteStore
from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb

PAIRS: Final = 10
APPENDS: Final = 1000
WARMUP: Final = 40
GOAL: Final = 1.05
PAYLOAD: Final = b'{"data":"' + b"x" * (1024 - 11) + b'"}'
ARMS: Final = ("on", "off")

_ids = itertools.count()


async def _arm(target: str, coalescing: bool, appends: int) -> dict[str, Any]:
    """One arm: a fresh client and run, ``appends`` timed appends one at a time."""
    store = RemoteStore(target, coalescing=DEFAULT_COALESCING if coalescing else None)
    try:
        run = pb.RunStart(
            run_id=f"bench-lone-{os.getpid()}-{next(_ids)}",
            agent_id="bench",
            started_at=messages.now(),
        )
        started = lifecycle.encode_run_started(lifecycle.RunStartedPayload())
        await store.stub.StartOneShotRun(
            rs.StartOneShotRunRequest(
                run=run, started=messages.record(run, "started", lifecycle.RUN_STARTED, started)
            )
        )
        at = datetime.fromtimestamp(run.started_at.seconds, UTC)
        latencies: list[float] = []
        for index in range(WARMUP + appends):
            record = RunRecord(
                event_key=f"k{index}",
                run_id=run.run_id,
                agent_id=run.agent_id,
                session_id="",
                type="tool_result_received",
                payload=PAYLOAD,
                timestamp=at,
            )
            began = time.perf_counter()
            await store.append_run_record(record)
            if index >= WARMUP:
                latencies.append(time.perf_counter() - began)
        return latency_ms(latencies)
    finally:
        await store.close()


async def measure(backend: str, url: str, *, pairs: int, appends: int) -> dict[str, Any]:
    from bench.harness import server

    ratios: list[float] = []
    arms: dict[str, list[float]] = {arm: [] for arm in ARMS}
    async with server(url, "FULL") as target:
        for pair in range(pairs):
            order = ARMS if pair % 2 == 0 else ARMS[::-1]
            figures = {arm: await _arm(target, arm == "on", appends) for arm in order}
            for arm in ARMS:
                arms[arm].append(figures[arm]["p99_ms"])
            ratios.append(figures["on"]["p99_ms"] / figures["off"]["p99_ms"])
            print(
                f"lone_append {backend} pair {pair + 1}/{pairs}: p99 on "
                f"{figures['on']['p99_ms']:.3f} ms, off {figures['off']['p99_ms']:.3f} ms",
                flush=True,
            )
    ratio = statistics.median(ratios)
    return {
        "backend": backend,
        "pairs": pairs,
        "appends_per_arm": appends,
        "p99_on_ms": round(statistics.median(arms["on"]), 3),
        "p99_off_ms": round(statistics.median(arms["off"]), 3),
        "p99_on_over_off": round(ratio, 3),
        "all_ratios": [round(r, 3) for r in ratios],
        "goal": GOAL,
        "met": ratio <= GOAL,
    }


# --- The harness's optional-module hooks (bench/harness.py OPTIONAL_MODULES) ---------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lone-pairs",
        type=int,
        default=None,
        help=f"lone_append workload: alternating coalescing on/off pairs ({PAIRS}; --quick 2)",
    )


async def measure_report(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    """The ``lone_append`` workload of ``python -m bench``: a section of its own."""
    if "lone_append" not in args.workloads:
        return {}

    async def one(backend: str, url: str) -> dict[str, Any]:
        return await measure(
            backend,
            url,
            pairs=args.lone_pairs or (2 if args.quick else PAIRS),
            appends=100 if args.quick else APPENDS,
        )

    return {"lone_append": await standalone.each_backend(args.backend, args.postgres_url, one)}


def render(report: Any) -> str | None:
    results = report.get("lone_append") if isinstance(report, dict) else report
    if not results:
        return None
    lines = [
        "lone_append: the typed client's append with 1 in flight, p99 with coalescing on "
        "÷ off (median of alternating pairs)",
        f"{'backend':<10} {'p99 on ms':>10} {'p99 off ms':>11} {'on ÷ off':>9} {'goal':>7} "
        f"{'met':>5}",
    ]
    for row in results:
        lines.append(
            f"{row['backend']:<10} {row['p99_on_ms']:>10} {row['p99_off_ms']:>11} "
            f"{row['p99_on_over_off']:>9} {'≤ ' + str(row['goal']):>7} "
            f"{'yes' if row['met'] else 'NO':>5}"
        )
    return "\n".join(lines)
