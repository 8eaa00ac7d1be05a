"""A database that refuses connections is logged once per state change: one
line when it starts refusing, one when it accepts again (and health's own two),
never a traceback, and not once per call or per reconnect attempt; asyncpg's
"Failed to restore the pool connection floor" at most once, as one line.

The private cluster is stopped for real while calls keep coming, then started.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from runstore.server.db import migrate
from tests import pg_cluster
from tests.processes import server_process
from tests.support import Store

pytestmark = pytest.mark.postgres

REFUSING = "the database refuses connections"
ACCEPTING = "the database accepts connections again"
HEALTH_DOWN = "database probe failed"
HEALTH_UP = "health SERVING"
FLOOR = "Failed to restore the pool connection floor"
DIED = "a connection died before its commit"
LOST_AT_COMMIT = "a connection died during its commit"


async def _calls_until(store: Store, done: asyncio.Event, outcomes: list[str]) -> None:
    while not done.is_set():
        try:
            await store.session()
            outcomes.append("OK")
        except grpc.aio.AioRpcError as err:
            outcomes.append(err.code().name)
        await asyncio.sleep(0.02)


@pytest.mark.timeout(300)
async def test_a_database_that_refuses_then_accepts_is_two_lines_not_a_traceback() -> None:
    async with pg_cluster.private_cluster() as cluster:
        url = await cluster.create_database("state_lines")
        await migrate.upgrade(url)
        async with (
            server_process(
                "--database-url",
                url,
                "--health-probe-interval",
                "0.2",
                "--pg-reconnect-pause-max",
                "0.5",  # many reconnect attempts while it is down
            ) as server,
            grpc.aio.insecure_channel(server.target) as channel,
        ):
            store = Store(channel)
            await store.session()
            mark = len(server.log)
            done = asyncio.Event()
            outcomes: list[str] = []
            callers = [asyncio.ensure_future(_calls_until(store, done, outcomes)) for _ in range(4)]
            try:
                await cluster.stop("fast")

                async def seen(text: str, within: float = 60) -> None:
                    deadline = time.monotonic() + within
                    while text.encode() not in server.log[mark:]:
                        assert time.monotonic() < deadline, server.log[mark:].decode()
                        assert server.process.returncode is None
                        await asyncio.sleep(0.05)

                await seen(HEALTH_DOWN)
                refused = len(outcomes)
                deadline = time.monotonic() + 60  # many calls meet the refusing database
                while len(outcomes) < refused + 50 or "UNAVAILABLE" not in outcomes[refused:]:
                    assert time.monotonic() < deadline, outcomes[-5:]
                    await asyncio.sleep(0.05)
                await cluster.start()
                await seen(HEALTH_UP)
                await seen(ACCEPTING)
                ok_after = len(outcomes)
                while "OK" not in outcomes[ok_after:]:
                    assert time.monotonic() < deadline + 60
                    await asyncio.sleep(0.05)
            finally:
                done.set()
                await asyncio.gather(*callers)

        lines = server.log[mark:].decode().splitlines()
        assert "Traceback" not in server.log[mark:].decode(), "\n".join(lines)
        assert outcomes.count("UNAVAILABLE") >= 50

        def count(text: str) -> int:
            return sum(text in line for line in lines)

        assert count(REFUSING) == 1, "\n".join(lines)
        assert count(ACCEPTING) == 1, "\n".join(lines)
        assert count(HEALTH_DOWN) == 1 and count(HEALTH_UP) == 1, "\n".join(lines)
        assert count(FLOOR) <= 1
        # The calls in flight at the stop may each say their connection died,
        # before its commit (they run again elsewhere) or during it (the
        # caller's retry settles it), in one line; nothing else: no line per
        # refused call, per reconnect attempt or per background task.
        assert count(DIED) + count(LOST_AT_COMMIT) <= len(callers), "\n".join(lines)
        known = (REFUSING, ACCEPTING, HEALTH_DOWN, HEALTH_UP, FLOOR, DIED, LOST_AT_COMMIT)
        others = [line for line in lines if not any(text in line for text in known)]
        assert not others, "\n".join(others)
