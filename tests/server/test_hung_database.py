"""A hung PostgreSQL (docs/limits.md, "Database operation bound"): a private cluster frozen with
SIGSTOP while calls are in flight.

With default settings every call ends within 5 s of its start, UNAVAILABLE
(reason TRANSIENT) for callers whose deadline is longer or who set none;
health keeps answering throughout, NOT_SERVING while the database hangs and
SERVING again once it thaws; the server then serves as before.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from runstore.server.config import ServerConfig
from runstore.server.db import migrate
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests import pg_cluster
from tests.faults import NOT_SERVING, SERVING, Served, Timed, served, timed
from tests.support import Run, now_ms, ts, unique

pytestmark = pytest.mark.postgres

CALL_BOUND = 5.0
"""The goal: every call ends within this many seconds of its start."""
IN_FLIGHT = 48


@pytest.fixture(scope="module")
async def cluster() -> AsyncIterator[pg_cluster.Cluster]:
    async with pg_cluster.private_cluster() as cluster:
        yield cluster


def _calls(server: Served, runs: list[Run], count: int) -> list[object]:
    """Reads and writes of every kind: some without a deadline, some with a long one."""
    store = server.store
    keys = itertools.count()
    calls: list[object] = []
    for index in range(count):
        run = runs[index % len(runs)]
        timeout = None if index % 2 else 30.0
        kind = index % 4
        if kind == 0:
            request = rs.AppendRunRecordRequest(record=run.record(f"frozen-{next(keys)}"))
            calls.append(store.runtime.AppendRunRecord(request, timeout=timeout))
        elif kind == 1:
            calls.append(
                store.runtime.ListRunRecords(
                    rs.ListRunRecordsRequest(run_id=run.id, limit=100), timeout=timeout
                )
            )
        elif kind == 2:
            calls.append(
                store.admin.CreateSession(
                    sa.CreateSessionRequest(session_id=unique("s"), created_at=ts(now_ms())),
                    timeout=timeout,
                )
            )
        else:
            calls.append(store.runtime.LoadRun(rs.LoadRunRequest(run_id=run.id), timeout=timeout))
    return calls


async def test_frozen_database_bounds_every_call_and_health_follows(
    cluster: pg_cluster.Cluster,
) -> None:
    url = await cluster.create_database(f"hung_{unique('db').replace('-', '_')}")
    await migrate.upgrade(url)
    config = ServerConfig(listen="127.0.0.1:0", database_url=url)  # default bounds
    async with served(config) as server:
        runs = [await server.store.root() for _ in range(4)]
        await asyncio.gather(*_calls(server, runs, 16))  # warm: the pool is full of connections
        assert await server.status() == SERVING

        health: list[tuple[float, int]] = []
        frozen = asyncio.Event()

        async def watch_health() -> None:
            """Health must answer (within its own 2 s deadline) all along."""
            while not frozen.is_set() or len(health) < 400:
                health.append((time.monotonic(), await server.status()))
                if frozen.is_set() and health[-1][1] == NOT_SERVING:
                    return
                await asyncio.sleep(0.05)

        in_flight = [asyncio.ensure_future(timed(call)) for call in _calls(server, runs, IN_FLIGHT)]
        cluster.freeze()
        frozen.set()
        try:
            watcher = asyncio.ensure_future(watch_health())
            results: list[Timed] = await asyncio.gather(*in_flight)
            late: list[Timed] = await asyncio.gather(
                *(timed(call) for call in _calls(server, runs, 8))
            )
            await watcher
        finally:
            cluster.thaw()

        for result in [*results, *late]:
            assert result.seconds < CALL_BOUND, result
            assert result.code in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE), result
            if result.code is grpc.StatusCode.UNAVAILABLE:
                assert (result.reason, result.permanent) == ("TRANSIENT", "false"), result
        assert all(r.code is grpc.StatusCode.UNAVAILABLE for r in late)
        print(  # shown with -s: the figures of the run
            f"\nfrozen: {len(results)} in flight + {len(late)} late calls, "
            f"codes {sorted(collections.Counter(r.code.name for r in [*results, *late]).items())}, "
            f"slowest {max(r.seconds for r in [*results, *late]):.2f} s, "
            f"NOT_SERVING after {health[-1][0] - health[0][0]:.2f} s"
        )
        assert health[-1][1] == NOT_SERVING

        await server.wait_for_status(SERVING, within=10)
        after = await asyncio.gather(*(timed(call) for call in _calls(server, runs, 16)))
        assert {r.code for r in after} == {grpc.StatusCode.OK}, after
