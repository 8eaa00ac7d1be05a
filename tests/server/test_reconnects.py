"""Connections that the database ends, and a database that restarts under
many replicas.

* Idle pooled connections ended by the server (``pg_terminate_backend``, as a
  pooler or ``idle_session_timeout`` does) cost no caller an error: a call
  that finds its connection dead before anything ran moves to a fresh one.
* Eight ``runstore serve`` replicas under load while their database (a
  private cluster, ``log_connections`` on) stops and starts again: the
  connection attempts per second stay bounded by the paced reconnects, every
  call answers within the operation bound (UNAVAILABLE while the database is
  down), and every replica serves again within 10 s of its return.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runstore.server.config import ServerConfig
from runstore.server.db import migrate
from runstore.server.db.postgres import asyncpg_dsn
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests import pg_standby, postgres
from tests.faults import served
from tests.processes import server_process
from tests.support import Store, failure_of, now_ms, ts, unique

pytestmark = pytest.mark.postgres

ROUNDS = 25
REPLICAS = 8
LOADERS_PER_REPLICA = 2
POOL_MAX = 4
OPERATION_BOUND = 2.0
REFUSING_SECONDS = 6.0


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with postgres.fresh_database("runstore_reaped") as url:
        await migrate.upgrade(url)
        yield url


async def _reap_idle(admin: asyncpg.Connection) -> int:
    killed: int = await admin.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'runstore' AND state = 'idle' "
        "AND datname = current_database() AND pid <> pg_backend_pid()"
    )
    return killed


async def test_reaped_idle_connections_cost_no_caller_an_error(pg_url: str) -> None:
    config = ServerConfig(listen="127.0.0.1:0", database_url=pg_url, pg_pool_min=4, pg_pool_max=4)
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    reaped = 0
    calls = 0
    try:
        async with served(config) as server:
            store = server.store
            run = await store.root()
            for number in range(ROUNDS):
                reaped += await _reap_idle(admin)
                # At once, before the replica can notice: appends (one statement),
                # a transaction and reads.
                appends = [
                    store.runtime.AppendRunRecord(
                        rs.AppendRunRecordRequest(record=run.record(f"k{number}-{i}"))
                    )
                    for i in range(3)
                ]
                await asyncio.gather(
                    *appends,
                    store.session(),
                    store.runtime.LoadRun(rs.LoadRunRequest(run_id=run.id)),
                    store.runtime.ListRunRecords(rs.ListRunRecordsRequest(run_id=run.id, limit=10)),
                )
                calls += 6
    finally:
        await admin.close()
    assert reaped >= ROUNDS  # every round ended idle pooled connections
    print(
        f"\nreaped: {reaped} idle pooled connections ended over {ROUNDS} rounds, "
        f"{calls} calls, 0 errors"
    )


_CONNECTION_RECEIVED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC.*connection received", re.M
)


def _utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _attempts_per_second(log: str, since: datetime, until: datetime) -> list[int]:
    """Connection attempts the postmaster logged in each whole second from ``since``."""
    counts = [0] * max(1, int((until - since).total_seconds()))
    for match in _CONNECTION_RECEIVED.finditer(log):
        moment = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f")
        second = int((moment - since).total_seconds())
        if since <= moment and second < len(counts):
            counts[second] += 1
    return counts


async def _serving(store: Store) -> bool:
    stub = health_pb2_grpc.HealthStub(store.channel)
    try:
        response = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
    except grpc.aio.AioRpcError:
        return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


async def _allow_connections(node: pg_standby.Node, allowed: bool) -> None:
    conn = await asyncpg.connect(node.url(), timeout=10)
    try:
        await conn.execute(f"ALTER DATABASE storm WITH ALLOW_CONNECTIONS {str(allowed).lower()}")
        if not allowed:
            await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = 'storm'"
            )
    finally:
        await conn.close()


@pytest.mark.timeout(600)  # several processes on a loaded machine
async def test_a_database_restart_under_eight_replicas_is_no_reconnect_storm() -> None:
    """The database first refuses every connection to runstore's database
    (``ALLOW_CONNECTIONS false``, every backend ended), is restarted while
    refusing, and then accepts again. The postmaster logs every attempt."""
    settings = {"log_connections": "on", "log_line_prefix": "%m ", "log_timezone": "UTC"}
    async with AsyncExitStack() as stack:
        node = await stack.enter_async_context(pg_standby.durable_cluster(settings))
        url = await node.create_database("storm")
        await migrate.upgrade(url)
        args = (
            "--database-url",
            url,
            "--pg-pool-min",
            "1",
            "--pg-pool-max",
            str(POOL_MAX),
            "--db-operation-timeout",
            str(OPERATION_BOUND),
            "--health-probe-interval",
            "0.5",
        )
        stores = []
        for _ in range(REPLICAS):
            server = await stack.enter_async_context(server_process(*args))
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
            stores.append(Store(channel, target=server.target))

        stopping = False
        outcomes: collections.Counter[str] = collections.Counter()
        slowest = 0.0
        slowest_refusal = 0.0

        async def load(store: Store) -> None:
            nonlocal slowest, slowest_refusal
            while not stopping:
                request = sa.CreateSessionRequest(
                    session_id=unique("storm"), created_at=ts(now_ms())
                )
                started = time.monotonic()
                try:
                    await store.admin.CreateSession(request, timeout=30)
                    outcomes["OK"] += 1
                except grpc.aio.AioRpcError as err:
                    outcomes[err.code().name] += 1
                    assert err.code() is grpc.StatusCode.UNAVAILABLE, err
                    assert failure_of(err).reason == "TRANSIENT"
                    slowest_refusal = max(slowest_refusal, time.monotonic() - started)
                    await asyncio.sleep(0.01)  # a client that retries at once, almost
                slowest = max(slowest, time.monotonic() - started)

        async def until(what: str, condition: Callable[[], bool], within: float = 60) -> None:
            deadline = time.monotonic() + within
            while not condition():
                assert time.monotonic() < deadline, what
                for loader in loaders:
                    if loader.done():
                        loader.result()
                await asyncio.sleep(0.05)

        loaders = [
            asyncio.ensure_future(load(store))
            for store in stores
            for _ in range(LOADERS_PER_REPLICA)
        ]
        try:
            await until("load runs", lambda: outcomes["OK"] >= 100)
            await _allow_connections(node, False)
            refusing_since = _utc_now()
            await node.stop("immediate")
            await node.start()  # the restart, still refusing runstore's database
            window = time.monotonic() + REFUSING_SECONDS
            await until("a refusing window", lambda: time.monotonic() > window)
            refused = outcomes["UNAVAILABLE"]
            back_at = _utc_now()
            await _allow_connections(node, True)
            returned = time.monotonic()
            recovered: dict[int, float] = {}
            while len(recovered) < REPLICAS:
                for index, store in enumerate(stores):
                    if index not in recovered and await _serving(store):
                        recovered[index] = time.monotonic() - returned
                assert time.monotonic() - returned < 30, f"replicas serving: {recovered}"
                await asyncio.sleep(0.05)
            ok_before = outcomes["OK"]
            await until("load succeeds again", lambda: outcomes["OK"] >= ok_before + 100)
        finally:
            stopping = True
            await asyncio.gather(*loaders, return_exceptions=True)
        for loader in loaders:
            loader.result()
        log = node.log_text()
        refusing = _attempts_per_second(log, refusing_since, back_at)
        after = _attempts_per_second(log, back_at, _utc_now())

    seconds = sorted(round(v, 2) for v in recovered.values())
    print(
        f"\nstorm: {REPLICAS} replicas x {LOADERS_PER_REPLICA} loaders, pool max {POOL_MAX}; "
        f"{refused} calls refused UNAVAILABLE while the database refused; connection attempts "
        f"per second while refusing {refusing}, after its return {after}; every replica "
        f"serving {seconds} s after the return; slowest UNAVAILABLE answer "
        f"{slowest_refusal:.2f} s, slowest call {slowest:.2f} s (bound {OPERATION_BOUND} s); "
        f"outcomes {dict(outcomes)}"
    )
    assert refused > 0
    assert max(seconds) < 10
    # The bound, plus what gRPC and a loaded machine add to it.
    assert slowest_refusal < OPERATION_BOUND + 2, slowest_refusal
    # Paced: once the pauses have grown (after the first seconds), each replica
    # tries about once per pause, for its pool, its probe and its LISTEN alike.
    assert max(refusing[2:], default=0) <= 3 * REPLICAS, refusing
    # Once back, each replica opens at most its pool, probe, LISTEN and NOTIFY
    # connections, and a few paced attempts that found it still refusing.
    assert sum(after) <= REPLICAS * (POOL_MAX + 3) + 3 * REPLICAS, after
