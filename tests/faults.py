"""Helpers for tests that break the database under a running server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runstore.server.app import RunningServer, build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from tests.support import Store, failure_of

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class Served:
    store: Store
    running: RunningServer
    health: health_pb2_grpc.HealthStub

    async def status(self, service: str = "") -> int:
        """The health status; health itself must always answer promptly."""
        response = await self.health.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2
        )
        return int(response.status)

    async def wait_for_status(self, wanted: int, within: float) -> float:
        """Seconds until health reports ``wanted`` (probes run on their own
        interval; this waits that interval out, bounded by ``within``)."""
        started = time.monotonic()
        while await self.status() != wanted:
            if time.monotonic() - started > within:
                raise AssertionError(f"health did not become {wanted} within {within} s")
            await asyncio.sleep(0.05)
        return time.monotonic() - started


@asynccontextmanager
async def served(config: ServerConfig) -> AsyncIterator[Served]:
    """An in-process server over ``config``'s database, with a channel to it."""
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))

        async def stop() -> None:
            if running.monitor is not None:
                await running.monitor.stop()
            await running.server.stop(None)

        stack.push_async_callback(stop)
        target = f"127.0.0.1:{running.port}"
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        yield Served(Store(channel, target=target), running, health_pb2_grpc.HealthStub(channel))


@dataclass(frozen=True)
class Timed:
    """How a call ended and how long it took."""

    seconds: float
    code: grpc.StatusCode
    reason: str
    permanent: str


async def timed(call: Any) -> Timed:
    started = time.monotonic()
    try:
        await call
    except grpc.aio.AioRpcError as err:
        elapsed = time.monotonic() - started
        if err.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            return Timed(elapsed, err.code(), "", "")
        failure = failure_of(err)
        return Timed(elapsed, err.code(), failure.reason, failure.metadata.get("permanent", ""))
    return Timed(time.monotonic() - started, grpc.StatusCode.OK, "", "")
