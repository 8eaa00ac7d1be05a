"""Commit stalls: health follows a database that answers queries but completes
no commit (docs/failover.md#what-to-clear-on-promotion).

A standby made with ``pg_basebackup`` from a primary that already names a
synchronous standby keeps that setting; once promoted, every commit waits for
a standby that does not exist while ``SELECT 1`` still answers. The replica's
heartbeat (its commit probe) stops completing, health reports NOT_SERVING
with ``runstore_database_commit_stalled`` at 1 and one log line saying why,
and once the operator clears ``synchronous_standby_names`` the next heartbeat
commits and health is SERVING again, with a line saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from runstore.server.app import Telemetry, build_server, create_stores, open_database, shutdown
from runstore.server.config import ServerConfig
from runstore.server.db import migrate
from runstore.server.metrics import Metrics
from runstore.v1 import runtime_store_pb2 as rs
from tests import pg_standby
from tests.support import Store, fails

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
STALLED_LINE = "database commits stalled"
RESUMED_LINE = "database commits complete again"


def _sample(metrics: Metrics, name: str) -> float | None:
    for family in text_string_to_metric_families(metrics.scrape()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


async def _until(what: str, check: Callable[[], Awaitable[bool]], within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(0.05)


class HealthWatch:
    """Every status health answers, polled every 50 ms by a task of its own."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = health_pb2_grpc.HealthStub(channel)
        self.seen: list[tuple[float, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> Any:
        response = await self._stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return response.status

    async def _poll(self) -> None:
        while True:
            self.seen.append((time.monotonic(), await self.check()))
            await asyncio.sleep(0.05)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def between(self, start: float, end: float) -> set[Any]:
        return {status for at, status in self.seen if start <= at < end}

    async def until(self, status: Any, within: float = 60) -> None:
        async def reached() -> bool:
            return bool(self.seen) and self.seen[-1][1] == status

        await _until(f"health {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}", reached)


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@pytest.fixture
async def pair() -> AsyncIterator[pg_standby.Pair]:
    async with pg_standby.primary_and_standby("stalls", setting_copied=True) as pair:
        await migrate.upgrade(pair.url())  # through the multi-host URL: the primary
        yield pair


@pytest.mark.postgres
@pytest.mark.timeout(600)  # two clusters and a promotion on a loaded machine
async def test_health_follows_a_promoted_standby_that_waits_for_a_synchronous_standby(
    pair: pg_standby.Pair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runstore.server.health")
    copied = (pair.standby.data / "postgresql.auto.conf").read_text()
    assert f"synchronous_standby_names = '{pg_standby.STANDBY_NAME}'" in copied
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=pair.url(),
        health_probe_interval=0.2,
        commit_stall_after=4.0,
        db_operation_timeout=2.0,
    )
    metrics = Metrics("9.9.9-test")
    telemetry = Telemetry(metrics=metrics)
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config, telemetry))
        running = await build_server(config, create_stores(config, db), telemetry=telemetry)
        stack.push_async_callback(shutdown, running, 0)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
        )
        store = Store(channel)
        health = HealthWatch(channel)
        health.start()
        stack.push_async_callback(health.stop)
        await store.session()
        assert await health.check() == SERVING

        await pair.primary.stop("fast")  # ships its WAL to the standby first
        await health.until(NOT_SERVING)
        down_at = time.monotonic()
        await pair.standby.promote()
        promoted = await asyncpg.connect(pair.standby_url(), timeout=5)
        stack.push_async_callback(promoted.close)
        # The promoted standby accepts connections and answers queries...
        assert await promoted.fetchval("SELECT NOT pg_is_in_recovery()")
        assert await promoted.fetchval("SHOW synchronous_standby_names") == "standby1"

        async def stalled() -> bool:
            return _sample(metrics, "runstore_database_commit_stalled") == 1

        await _until("the stall is declared", stalled)
        # ...but completes no commit: a write through runstore gives up.
        assert (await fails(store.session())).code == grpc.StatusCode.UNAVAILABLE
        assert await health.check() == NOT_SERVING
        assert _sample(metrics, "runstore_database_commit_stalls_total") == 1
        [line] = _lines(caplog, STALLED_LINE)
        assert "--commit-stall-after" in line and "health NOT_SERVING" in line
        assert not _lines(caplog, RESUMED_LINE)

        await promoted.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await promoted.execute("SELECT pg_reload_conf()")
        reset_at = time.monotonic()
        await health.until(SERVING)
        # NOT_SERVING from the primary's loss until the setting was cleared: a
        # database that answers again is not SERVING before a commit proves it.
        assert health.between(down_at, reset_at) == {NOT_SERVING}
        assert _sample(metrics, "runstore_database_commit_stalled") == 0
        assert _sample(metrics, "runstore_database_commit_stalls_total") == 1
        [resumed] = _lines(caplog, RESUMED_LINE)
        assert "health SERVING" in resumed
        assert len(_lines(caplog, STALLED_LINE)) == 1
        await store.session()  # writes commit again


async def test_sqlite_health_stays_serving_under_a_write_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite: the heartbeat commits through the one writer between the calls'
    group commits, so a steady write load never reads as a stall."""
    caplog.set_level(logging.INFO, logger="runstore.server.health")
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{tmp_path / 'runstore.db'}",
        migrate=True,
        health_probe_interval=0.1,
        commit_stall_after=4.0,
    )
    metrics = Metrics("9.9.9-test")
    telemetry = Telemetry(metrics=metrics)
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config, telemetry))
        running = await build_server(config, create_stores(config, db), telemetry=telemetry)
        stack.push_async_callback(shutdown, running, 0)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
        )
        store = Store(channel)
        health = HealthWatch(channel)
        health.start()
        stack.push_async_callback(health.stop)
        # Longer than --commit-stall-after: without the heartbeat's commits
        # (or with one stuck behind the load) health would turn NOT_SERVING.
        until = time.monotonic() + 1.5 * config.commit_stall_after
        written = 0

        async def writer() -> None:
            nonlocal written
            while time.monotonic() < until:
                run = await store.root()
                for number in range(5):
                    request = rs.AppendRunRecordRequest(record=run.record(f"r{number}"))
                    await store.runtime.AppendRunRecord(request)
                written += 6

        await asyncio.gather(*(writer() for _ in range(8)))
        await health.stop()
        assert written > 100
        assert {status for _, status in health.seen} == {SERVING}
        assert _sample(metrics, "runstore_database_commit_stalls_total") == 0
        assert not _lines(caplog, "health NOT_SERVING")
