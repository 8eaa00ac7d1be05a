"""The ``append_client_go`` workload: the Go adapter's ``AppendRunRecord``
beside the Python client's ``append_client``.

``bench/goclient`` (a Go module of its own, built with the pinned toolchain)
runs 16 goroutines of one process sharing one ``Client`` (coalescing on, its
default), each appending 1 KiB records to a run of its own, for the plan's
duration after its warm-up. Each repetition is measured right after a
ceiling of its own against the backend's main server (the harness's
``SERVER_MODULES`` hook), so its ratio pairs like every other row's. Without
a ``go`` command, or with ``--tls``, the workload is left out (said so).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

WORKLOAD: Final = "append_client_go"
IN_FLIGHT: Final = 16
SOURCE: Final = Path(__file__).resolve().parent / "goclient"


async def _build(directory: str) -> Path | None:
    go = shutil.which("go")
    if go is None:
        print(f"{WORKLOAD}: no go command; left out", flush=True)
        return None
    binary = Path(directory) / "goclient"
    process = await asyncio.create_subprocess_exec(
        go,
        "build",
        "-o",
        str(binary),
        ".",
        cwd=SOURCE,
        env={**os.environ, "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "go1.27.3")},
    )
    if await process.wait() != 0:
        raise RuntimeError(f"{WORKLOAD}: go build in {SOURCE} failed")
    return binary


async def measure_server(
    args: argparse.Namespace, backend: str, url: str, server: Any, tag: dict[str, Any]
) -> list[dict[str, Any]]:
    from bench import cpu, harness

    if WORKLOAD not in args.workloads:
        return []
    if args.tls:
        print(f"{WORKLOAD}: not measured with --tls", flush=True)
        return []
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="runstore-bench-go-") as directory:
        binary = await _build(directory)
        if binary is None:
            return []
        tokens = server.protections.plan()["tokens"]
        for repetition in range(args.repeat):
            pair = f"go{repetition}"
            base = {"concurrency": IN_FLIGHT, "duration": args.duration, "warmup": args.warmup}
            rows += await harness.run_driver(
                server, [{**base, "workload": "ceiling", "pair": pair}], tag=tag, database_url=url
            )
            process = await asyncio.create_subprocess_exec(
                str(binary),
                f"-target={server.target}",
                f"-worker-token={tokens.get('worker') or ''}",
                f"-host-token={tokens.get('host') or ''}",
                f"-concurrency={IN_FLIGHT}",
                f"-duration={args.duration}s",
                f"-warmup={args.warmup}s",
                stdout=asyncio.subprocess.PIPE,
            )
            assert process.stdout is not None
            server_cpu: dict[str, float | None] = {}
            measured: dict[str, Any] = {}
            while line := await process.stdout.readline():
                message = json.loads(line)
                if "mark" in message:
                    server_cpu[message["mark"]] = cpu.process_cpu(server.pid)
                else:
                    measured = message
            if await process.wait() != 0 or not measured:
                raise RuntimeError(f"{WORKLOAD} failed on {backend}")
            begin, end = server_cpu.get("begin"), server_cpu.get("end")
            seconds = None if begin is None or end is None else end - begin
            measured["server_cpu_ms_per_op"] = cpu.per_op_ms(seconds, measured.get("ops", 0))
            row = {
                **base,
                **measured,
                "workload": WORKLOAD,
                "pair": pair,
                "repetition": repetition,
                **tag,
            }
            print(harness.progress_line(row, repetition + 1, args.repeat), flush=True)
            rows.append(row)
    return rows
