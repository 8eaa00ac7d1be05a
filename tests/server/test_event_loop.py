"""``--event-loop``: the server runs on uvloop or on asyncio's own loop, as asked."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.processes import server_process


def _uvloop_loaded(pid: int) -> bool:
    return "uvloop" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_the_server_serves_on_the_loop_it_is_given(tmp_path: Path, loop: str) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with server_process("--database-url", database, "--event-loop", loop) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest()
            )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert _uvloop_loaded(server.process.pid) == (loop == "uvloop")
