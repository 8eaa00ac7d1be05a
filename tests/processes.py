"""Real ``runstore serve`` processes for tests that need them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

_PORT_LINE = re.compile(rb"serving on \S+ \(port (\d+)\)")


@dataclass
class ServerProcess:
    process: asyncio.subprocess.Process
    target: str
    log: bytearray = field(default_factory=bytearray)

    async def reload(self, principals: int) -> None:
        """SIGHUP, then waits (bounded) for the reload's log line naming ``principals``."""
        mark = len(self.log)
        self.process.send_signal(signal.SIGHUP)
        expected = f"reloaded: {principals} principals".encode()
        async with asyncio.timeout(30):
            while expected not in self.log[mark:]:
                assert self.process.returncode is None, self.log.decode()
                await asyncio.sleep(0.02)


async def _drain(stream: asyncio.StreamReader, log: bytearray) -> None:
    """Keeps reading the server's log so a full pipe never blocks it."""
    while chunk := await stream.read(65536):
        log.extend(chunk)


@asynccontextmanager
async def serve_process(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """Starts ``runstore serve`` on an ephemeral port and yields (process, target)."""
    async with server_process(*args) as server:
        yield server.process, server.target


@asynccontextmanager
async def server_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> AsyncIterator[ServerProcess]:
    """``runstore serve`` on an ephemeral port; ``env`` replaces the environment,
    ``preexec_fn`` runs in the child before it starts (e.g. to lower its limits)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.server",
        "serve",
        "--listen",
        "127.0.0.1:0",
        *args,
        stderr=asyncio.subprocess.PIPE,
        env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
        preexec_fn=preexec_fn,
    )
    assert process.stderr is not None
    log = bytearray()
    drain: asyncio.Task[None] | None = None
    try:
        while (match := _PORT_LINE.search(log)) is None:
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
            if not line:
                raise AssertionError(f"server exited before serving:\n{log.decode()}")
            log.extend(line)
        drain = asyncio.ensure_future(_drain(process.stderr, log))
        yield ServerProcess(process, f"127.0.0.1:{int(match.group(1))}", log)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        if drain is not None:
            with contextlib.suppress(Exception):
                await drain


async def run_module(*args: str, kill_after: float = 60) -> tuple[int, bytes, bytes]:
    """Runs ``python -m *args`` to its end (killed after ``kill_after`` seconds);
    returns its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=kill_after)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, stdout, stderr
