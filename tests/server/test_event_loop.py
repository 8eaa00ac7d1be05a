"""``--event-loop``: the server runs on uvloop or on asyncio's own loop, as
asked; ``auto`` (the default) takes uvloop where it is installed and asyncio's
loop where it is not (uvloop's absence simulated: an import of it that fails)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runstore.server.config import ServerConfig
from tests.processes import server_process


def _uvloop_loaded(pid: int) -> bool:
    """Whether uvloop's extension module is mapped (not just any path naming it:
    the test's own directory does, and SQLite maps its -shm file there)."""
    return "/uvloop/loop." in Path(f"/proc/{pid}/maps").read_text()


def _without_uvloop(directory: Path) -> dict[str, str]:
    """An environment in which ``import uvloop`` fails, as where it is not installed."""
    blocker = directory / "no-uvloop" / "uvloop"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("uvloop is not installed")\n')
    path = os.pathsep.join(p for p in (str(blocker.parent), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


async def _serves(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_the_default_is_auto() -> None:
    assert ServerConfig().event_loop == "auto"


@pytest.mark.parametrize(
    ("loop", "on_uvloop"), [("uvloop", True), ("asyncio", False), ("auto", True)]
)
async def test_the_server_serves_on_the_loop_it_is_given(
    tmp_path: Path, loop: str, on_uvloop: bool
) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with server_process("--database-url", database, "--event-loop", loop) as server:
        await _serves(server.target)
        assert _uvloop_loaded(server.process.pid) == on_uvloop


async def test_without_uvloop_the_default_serves_on_asyncios_loop(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    env = _without_uvloop(tmp_path)
    async with server_process("--database-url", database, env=env) as server:
        await _serves(server.target)
        assert not _uvloop_loaded(server.process.pid)


async def test_without_uvloop_asking_for_it_is_a_one_line_error(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runstore.server", "serve", "--listen", "127.0.0.1:0",
        "--database-url", f"sqlite:///{tmp_path / 'runstore.db'}", "--event-loop", "uvloop",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=_without_uvloop(tmp_path),
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert err.decode().strip() == (
        "runstore: --event-loop must be auto or asyncio where uvloop is not installed "
        "(pip install uvloop), not 'uvloop'"
    )
    assert not (tmp_path / "runstore.db").exists()
