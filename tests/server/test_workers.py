"""``runstore serve --workers N``: N processes on one port (PostgreSQL only),
supervised by the parent, and the port still refused to anyone else."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests import postgres
from tests.processes import run_module, server_process

_SERVING = re.compile(rb"serving on \S+ \(port (\d+)\)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Workers:
    def __init__(self, process: asyncio.subprocess.Process, port: int, log: bytearray) -> None:
        self.process = process
        self.port = port
        self.log = log

    def pids(self) -> list[int]:
        """The workers' pids (the parent's children)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]


@contextlib.asynccontextmanager
async def workers(url: str, count: int, *args: str) -> AsyncIterator[Workers]:
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.server",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--database-url",
        url,
        "--workers",
        str(count),
        *args,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    log = bytearray()

    async def read() -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            log.extend(line)

    reader = asyncio.ensure_future(read())
    try:
        for _ in range(600):  # every worker says it serves (bounded)
            if len(_SERVING.findall(log)) >= count:
                break
            assert process.returncode is None, log.decode()
            await asyncio.sleep(0.05)
        assert len(_SERVING.findall(log)) == count, log.decode()
        yield Workers(process, port, log)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 30)
        if process.returncode is None:
            process.kill()
            await process.wait()
        await reader


def _gone(pid: int) -> bool:
    """The process ended (reaped, or a zombie waiting for it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _established(pid: int, port: int) -> int:
    """Connections to ``port`` the process ``pid`` holds (its sockets in /proc/net/tcp)."""
    return _sockets(pid, port, state="01")


def _sockets(pid: int, port: int, state: str) -> int:
    """The process's sockets on local ``port`` in the kernel's TCP ``state``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # grpc binds dual-stack sockets
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == state and fields[9] in inodes:
                count += 1
    return count


def _listening(pid: int, port: int) -> int:
    """Listening sockets on ``port`` that the process ``pid`` holds."""
    return _sockets(pid, port, state="0A")


def test_sqlite_refuses_more_than_one_worker_in_one_line(tmp_path: Path) -> None:
    code, _, stderr = asyncio.run(
        run_module(
            "runstore.server",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            f"sqlite:///{tmp_path / 'runstore.db'}",
            "--workers",
            "2",
        )
    )
    lines = stderr.decode().strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert "SQLite" in lines[0] and "--workers 2" in lines[0]
    assert not (tmp_path / "runstore.db").exists()


@pytest.mark.postgres
async def test_two_workers_share_one_port_and_stop_on_sigterm() -> None:
    async with postgres.fresh_database("runstore_workers") as url:
        code, _, stderr = await run_module("runstore.server", "migrate", "--database-url", url)
        assert code == 0, stderr
        async with workers(url, 2, "--log-format", "json", "--access-log") as served:
            pids = served.pids()
            assert len(pids) == 2
            # A connection of its own for each channel (not grpc's shared one).
            channels = [
                grpc.aio.insecure_channel(
                    f"127.0.0.1:{served.port}", options=[("grpc.use_local_subchannel_pool", 1)]
                )
                for _ in range(16)
            ]
            try:
                for channel in channels:
                    answer = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest()
                    )
                    assert answer.status == health_pb2.HealthCheckResponse.SERVING
                # 16 connections over 2 workers: both serve some (all on one:
                # 2 × 0.5^16, about 3 in 100,000).
                held = [_established(pid, served.port) for pid in pids]
                assert sum(held) == 16 and min(held) >= 1, held
            finally:
                for channel in channels:
                    await channel.close()
            served.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(served.process.wait(), 30) == 0
            assert all(_gone(pid) for pid in pids)
        await asyncio.sleep(0)  # the reader has the last lines once the pipe closed
        entries = [json.loads(line) for line in served.log.decode().splitlines()]
        # Each worker's own JSON lines, whole: none wrapped again by the parent.
        assert not [entry for entry in entries if entry["logger"] == "stderr"]
        checks = [entry for entry in entries if entry["logger"] == "runstore.access"]
        assert len(checks) == 16


@pytest.mark.postgres
async def test_the_port_stays_refused_to_another_runstore() -> None:
    async with postgres.fresh_database("runstore_workers") as url:
        code, _, stderr = await run_module("runstore.server", "migrate", "--database-url", url)
        assert code == 0, stderr
        async with workers(url, 2) as served:
            listen = f"127.0.0.1:{served.port}"
            for extra in (("--workers", "2"), ()):
                code, _, stderr = await run_module(
                    "runstore.server", "serve", "--listen", listen, "--database-url", url, *extra
                )
                assert code == 2, stderr
                assert b"address already in use" in stderr.lower(), stderr
            assert served.process.returncode is None
        # And a runstore serving alone keeps workers off its port.
        async with server_process("--database-url", url) as alone:
            code, _, stderr = await run_module(
                "runstore.server",
                "serve",
                "--listen",
                alone.target,
                "--database-url",
                url,
                "--workers",
                "2",
            )
            assert code == 2 and b"address already in use" in stderr.lower(), stderr


@pytest.mark.postgres
async def test_a_worker_that_dies_takes_the_set_down_non_zero() -> None:
    async with postgres.fresh_database("runstore_workers") as url:
        code, _, stderr = await run_module("runstore.server", "migrate", "--database-url", url)
        assert code == 0, stderr
        async with workers(url, 2) as served:
            first, second = served.pids()
            os.kill(first, signal.SIGKILL)
            assert await asyncio.wait_for(served.process.wait(), 30) == 1
            assert b"exited unexpectedly" in served.log
            for _ in range(200):  # the other worker was stopped too (bounded)
                if _gone(second):
                    break
                await asyncio.sleep(0.05)
            assert _gone(second)


@pytest.mark.postgres
async def test_the_console_is_served_once_by_the_first_worker() -> None:
    """With ``--console-listen``, a second worker binding the same console port
    would die of it and take the set down; the first worker alone serves it."""
    console_port = _free_port()
    async with postgres.fresh_database("runstore_workers") as url:
        code, _, stderr = await run_module("runstore.server", "migrate", "--database-url", url)
        assert code == 0, stderr
        async with workers(url, 2, "--console-listen", f"127.0.0.1:{console_port}") as served:
            async with httpx.AsyncClient(timeout=30) as http:
                answer = await http.get(f"http://127.0.0.1:{console_port}/healthz")
            assert answer.status_code == 200 and answer.text == "ok"
            held = [_listening(pid, console_port) for pid in served.pids()]
            assert sorted(held) == [0, 1], held
            assert served.process.returncode is None, served.log.decode()
