"""The noisy neighbour (issue 23): does one namespace at its write quota slow
another namespace's appends?

    python -m bench.noisy [--backend sqlite,postgres] [--pairs 3] [--duration 3]
    make bench ARGS="--workloads noisy_neighbour"   # the same, an optional module
                                                    # of bench/harness.py

Against one bare ``runstore serve`` process per backend (a throwaway
database, SQLite FULL), namespace ``noisy`` gets ``writes_per_second``
``--noisy-quota`` (20) and namespace ``quiet`` none. ``quiet`` appends 1 KiB
records at 16 in flight (16 sessionless runs, raw stubs), measured for
``--duration`` seconds after a warm-up, in three arms:

* ``alone``: nothing else runs;
* ``typed``: a separate process hammers ``noisy`` with appends at 32 in
  flight through the typed client (``RemoteStore``), which backs off on
  QUOTA_EXCEEDED as its RetryInfo asks, the way runstore's clients behave;
* ``raw``: the same through raw stubs that retry at once, never backing off
  (a client that ignores the refusal: the worst case for the server's CPU).

The arms run back to back against the same server in an order that rotates
each pair, so drift on a shared machine hits every arm. The figure is
``quiet``'s append ops/s with the noise over its ops/s alone, the median over
``--pairs``; the issue's check is ``typed`` ≥ 0.9.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from typing import Any

import grpc

from bench import messages, postgres, standalone
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import namespace_admin_pb2_grpc as na_grpc
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import types_pb2 as pb

QUIET_IN_FLIGHT = 16
NOISY_IN_FLIGHT = 32
PAYLOAD = b'{"data":"' + b"q" * 1010 + b'"}'
GOAL = 0.9
ARMS = ("alone", "typed", "raw")
_ids = itertools.count()


def _run() -> pb.RunStart:
    return pb.RunStart(
        run_id=f"bench-noisy-{os.getpid()}-{next(_ids)}",
        agent_id="bench",
        started_at=messages.now(),
    )


def _start(run: pb.RunStart) -> rs.StartOneShotRunRequest:
    return rs.StartOneShotRunRequest(run=run, started=messages.started(run))


async def quiet_appends(target: str, warmup: float, duration: float) -> float:
    """``quiet``'s append ops/s at 16 in flight, counted after ``warmup``."""
    metadata = ((NAMESPACE_KEY, "quiet"),)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = rs_grpc.RuntimeStoreStub(channel)
        runs = [_run() for _ in range(QUIET_IN_FLIGHT)]
        for run in runs:
            await stub.StartOneShotRun(_start(run), metadata=metadata)
        counted = 0
        begin = time.perf_counter() + warmup
        end = begin + duration

        async def worker(run: pb.RunStart) -> None:
            nonlocal counted
            for index in itertools.count():
                request = rs.AppendRunRecordRequest(
                    record=messages.record(run, f"r{index}", "tool_result_received", PAYLOAD)
                )
                await stub.AppendRunRecord(request, metadata=metadata)
                now = time.perf_counter()
                if now >= end:
                    return
                if now >= begin:
                    counted += 1

        await asyncio.gather(*(worker(run) for run in runs))
        return counted / duration


# --- The noise: a process of its own, so its client work is not the quiet one's ------


async def noise(target: str, mode: str, seconds: float) -> dict[str, int]:
    """Appends into ``noisy`` at 32 in flight for ``seconds``: through the typed
    client (backing off on QUOTA_EXCEEDED) or raw stubs (retrying at once)."""
    from runstore.client import RemoteStore, RetryPolicy, convert

    accepted = refused = retried = 0
    stop = time.perf_counter() + seconds

    def on_retry(*_: Any) -> None:
        nonlocal retried
        retried += 1

    metadata = ((NAMESPACE_KEY, "noisy"),)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = rs_grpc.RuntimeStoreStub(channel)
        # The typed client retries for as long as the noise lasts, backing off.
        store = RemoteStore(
            channel=channel,
            namespace="noisy",
            retry=RetryPolicy(deadline=seconds + 5),
            on_retry=on_retry,
        )

        async def worker() -> None:
            nonlocal accepted, refused
            run = _run()
            while True:
                try:
                    await stub.StartOneShotRun(_start(run), metadata=metadata)
                    break
                except grpc.aio.AioRpcError:
                    if time.perf_counter() >= stop:
                        return
                    await asyncio.sleep(0.05)
            for index in itertools.count():
                if time.perf_counter() >= stop:
                    return
                record = messages.record(run, f"r{index}", "tool_result_received", PAYLOAD)
                if mode == "typed":
                    try:
                        await store.append_run_record(convert.from_record(record))
                        accepted += 1
                    except Exception:
                        refused += 1
                    continue
                try:
                    await stub.AppendRunRecord(
                        rs.AppendRunRecordRequest(record=record), metadata=metadata
                    )
                    accepted += 1
                except grpc.aio.AioRpcError as error:
                    if error.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    refused += 1

        tasks = [asyncio.ensure_future(worker()) for _ in range(NOISY_IN_FLIGHT)]
        print("ready", flush=True)  # imported and connected: the measurement may begin
        await asyncio.gather(*tasks)
    # The typed client's refusals are its retries (each one a refused call).
    return {"accepted": accepted, "refused": refused + retried}


async def _noise_process(target: str, mode: str, seconds: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.noisy",
        "--noise",
        target,
        mode,
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )


async def _arm(target: str, arm: str, warmup: float, duration: float) -> dict[str, Any]:
    if arm == "alone":
        return {"arm": arm, "quiet_ops_per_s": await quiet_appends(target, warmup, duration)}
    # The noise starts first (its process's start-up outside the measurement)
    # and outlasts it.
    process = await _noise_process(target, arm, warmup + duration + 1.5)
    assert process.stdout is not None
    if (await process.stdout.readline()).strip() != b"ready":
        raise RuntimeError("the noise process did not start")
    ops = await quiet_appends(target, warmup, duration)
    out, _ = await process.communicate()
    counts = json.loads(out.decode().strip().splitlines()[-1])
    return {"arm": arm, "quiet_ops_per_s": ops, **{f"noisy_{k}": v for k, v in counts.items()}}


async def measure(
    backend: str, url: str, *, pairs: int, warmup: float, duration: float, quota: float
) -> dict[str, Any]:
    from bench.harness import server

    rows: list[dict[str, Any]] = []
    async with server(url, "FULL") as target:
        async with grpc.aio.insecure_channel(target) as channel:
            admin = na_grpc.NamespaceAdminStub(channel)
            quotas = na.NamespaceQuotas(writes_per_second=quota)
            await admin.CreateNamespace(
                na.CreateNamespaceRequest(namespace=na.Namespace(name="noisy", quotas=quotas))
            )
            await admin.CreateNamespace(
                na.CreateNamespaceRequest(namespace=na.Namespace(name="quiet"))
            )
        for pair in range(pairs):
            order = ARMS[pair % 3 :] + ARMS[: pair % 3]
            figures = {}
            for arm in order:
                row = await _arm(target, arm, warmup, duration)
                figures[arm] = row
                print(f"noisy_neighbour {backend} pair {pair + 1}/{pairs} {arm}: {row}", flush=True)
            rows.append(figures)
    ratios = {
        arm: [pair[arm]["quiet_ops_per_s"] / pair["alone"]["quiet_ops_per_s"] for pair in rows]
        for arm in ("typed", "raw")
    }
    typed = statistics.median(ratios["typed"])
    return {
        "backend": backend,
        "pairs": pairs,
        "duration_s": duration,
        "noisy_writes_per_second": quota,
        "quiet_alone_ops_per_s": round(
            statistics.median(pair["alone"]["quiet_ops_per_s"] for pair in rows), 1
        ),
        "with_typed_noise": round(typed, 3),
        "with_raw_noise": round(statistics.median(ratios["raw"]), 3),
        "all_typed": [round(r, 3) for r in ratios["typed"]],
        "all_raw": [round(r, 3) for r in ratios["raw"]],
        "noisy_accepted_per_s_typed": round(
            statistics.median(pair["typed"]["noisy_accepted"] for pair in rows)
            / (warmup + duration + 1.5),
            1,
        ),
        "goal": GOAL,
        "met": typed >= GOAL,
    }


async def measure_backends(
    backends: list[str], postgres_url: str, **settings: Any
) -> list[dict[str, Any]]:
    async def one(backend: str, url: str) -> dict[str, Any]:
        return await measure(backend, url, **settings)

    return await standalone.each_backend(backends, postgres_url, one)


# --- The harness's optional-module hooks (bench/harness.py OPTIONAL_MODULES) ---------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--noisy-pairs",
        type=int,
        default=None,
        help="noisy_neighbour workload: rounds of the three arms (3; --quick 1)",
    )


async def measure_report(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    """The ``noisy_neighbour`` workload of ``python -m bench``: a section of its own."""
    if "noisy_neighbour" not in args.workloads:
        return {}
    rows = await measure_backends(
        args.backend,
        args.postgres_url,
        pairs=args.noisy_pairs or (1 if args.quick else 3),
        warmup=max(args.warmup, 0.5),
        duration=max(args.duration, 2.0),
        quota=20.0,
    )
    return {"noisy_neighbour": rows}


def render(report: Any) -> str | None:
    results = report.get("noisy_neighbour") if isinstance(report, dict) else report
    if not results:
        return None
    lines = [
        "noisy_neighbour: quiet namespace's appends (16 in flight) with a namespace at its "
        "write quota hammered at 32 in flight, over its appends alone (median of pairs)",
        f"{'backend':<10} {'alone ops/s':>12} {'typed noise':>12} {'raw noise':>10} "
        f"{'goal':>6} {'met':>5}",
    ]
    for row in results:
        lines.append(
            f"{row['backend']:<10} {row['quiet_alone_ops_per_s']:>12} "
            f"{row['with_typed_noise']:>12} {row['with_raw_noise']:>10} "
            f"{'≥ ' + str(row['goal']):>6} {'yes' if row['met'] else 'NO':>5}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--noise"]:
        _, target, mode, seconds = argv
        print(json.dumps(asyncio.run(noise(target, mode, float(seconds)))), flush=True)
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.noisy", description=__doc__)
    standalone.add_backend_arguments(parser)
    parser.add_argument("--pairs", type=int, default=3, help="rounds of the three arms")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before counting")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds counted per arm")
    parser.add_argument(
        "--noisy-quota", type=float, default=20.0, help="writes_per_second of the noisy namespace"
    )
    args = parser.parse_args(argv)
    with postgres.provide(args):
        results = asyncio.run(
            measure_backends(
                standalone.backends(args.backend),
                args.postgres_url,
                pairs=args.pairs,
                warmup=args.warmup,
                duration=args.duration,
                quota=args.noisy_quota,
            )
        )
    standalone.print_report(render(results), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
