"""Clients that cancel their Watch streams never take a real server down.

With the access log on, a stream a client cancelled used to be logged by asking
the finished call for its peer; grpc.aio has released the core call by then,
and the server process died of a segfault inside grpc's C core. Only a real
process shows it (the test's own process would die with it), under a load of
many streams cancelled while records commit.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.driver import Client
from runstore.v1 import runtime_store_pb2 as rs
from tests.processes import server_process

ROUNDS = 12
WATCHERS = 100
APPENDS = 40


async def _follow(call: grpc.aio.UnaryStreamCall[object, object]) -> None:
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError:
        pass
    except asyncio.CancelledError:
        pass


async def test_many_cancelled_watch_streams_leave_the_server_serving(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    flags = ("--log-format", "json", "--access-log", "--metrics-listen", "127.0.0.1:0")
    rng = random.Random(7)
    async with (
        server_process("--database-url", database, *flags) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        client = Client(channel)
        for round_ in range(ROUNDS):
            session_id = await client.session()
            run = await client.start(session_id)
            request = rs.WatchSessionRunRecordsRequest(session_id=session_id)
            calls = [client.runtime.WatchSessionRunRecords(request) for _ in range(WATCHERS)]
            followers = [asyncio.ensure_future(_follow(call)) for call in calls]
            # Records commit while the streams are cut in a random order.
            appends = asyncio.gather(
                *(client.append(run, f"k{round_}-{i}") for i in range(APPENDS))
            )
            rng.shuffle(calls)
            for call in calls:
                call.cancel()
                await asyncio.sleep(0)
            await appends
            await asyncio.gather(*followers)
            assert server.process.returncode is None, server.log.decode()[-2000:]

        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

    # Every cancelled stream was logged, each with the peer it came from.
    lines = [json.loads(line) for line in server.log.decode().splitlines() if line.startswith("{")]
    cancelled = [
        line
        for line in lines
        if line.get("method", "").endswith("/WatchSessionRunRecords")
        and line.get("code") == "Canceled"
    ]
    assert cancelled
    assert all(line["peer"].startswith("ipv4:127.0.0.1:") for line in cancelled)
