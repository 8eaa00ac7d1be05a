"""Failover: the primary is killed and its synchronous standby promoted while
16 writers and several watchers use two ``runstore serve`` replicas.

The replicas know both hosts through one libpq multi-host URL
(``target_session_attrs=read-write``). The primary and every backend get
SIGKILL at once (the machine is gone), both replicas must report NOT_SERVING
while no primary exists, then the standby is promoted. A writer whose command
failed sends exactly that command again until it is acknowledged (the client's
exact retry), so every answer during the switch is counted: only UNAVAILABLE
with reason TRANSIENT may come back, never INTERNAL or DATA_LOSS.

Afterwards every acknowledged record is on the new primary under its
acknowledged ID and every acknowledged command answers its original result
again; each watcher (on the replica that did not write its session, so its
wake-ups come by NOTIFY) received exactly the session's records in order: no
gap, no duplicate. With ``-s`` the test prints its figures.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from runstore.server.db import migrate
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests import pg_standby
from tests.ledger import Acked
from tests.ledger import Ledger as Acknowledgements
from tests.processes import server_process
from tests.support import Store, failure_of, now_ms, run_start, ts, unique

pytestmark = pytest.mark.postgres

WRITERS = int(os.environ.get("RUNSTORE_FAILOVER_WRITERS", "16"))
WATCHED = 4
"""Sessions (of the first writers) that a watcher follows on the other replica."""
IDLE_WATCHED = 2
"""Sessions first written after the promotion: their watchers wait through the
switch on an open stream, and only a LISTEN re-established on the new primary
wakes them (the poll interval is longer than the test)."""
APPENDS = 3
CALL_TIMEOUT = 15.0
ALLOWED_DURING_SWITCH = frozenset({grpc.StatusCode.UNAVAILABLE})
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class Ledger(Acknowledgements):
    runs: dict[str, str] = field(default_factory=dict)
    """Run ID → its session."""
    stopping: bool = False


async def _call(
    ledger: Ledger,
    store: Store,
    send: Callable[[Store], Awaitable[Any]],
    result_id: Callable[[Any], str],
) -> Any:
    """``send`` until acknowledged, each failure counted and checked."""
    for _ in range(3000):
        try:
            response = await asyncio.wait_for(send(store), CALL_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            ledger.codes[err.code().name] += 1
            assert err.code() in ALLOWED_DURING_SWITCH, f"{err.code()}: {err.details()}"
            if rpc_status.from_call(err) is not None:  # answered by runstore itself
                assert failure_of(err).reason == "TRANSIENT", err
            await asyncio.sleep(random.uniform(0.01, 0.05))  # the client's back-off
            continue
        ledger.codes["OK"] += 1
        ledger.commands.append(Acked(send, result_id, result_id(response)))
        await ledger.ack()
        return response
    raise AssertionError("a command never succeeded")


def _payload(rng: random.Random) -> bytes:
    return b'{"data":"' + rng.randbytes(rng.randint(8, 600)).hex().encode() + b'"}'


async def _writer(ledger: Ledger, store: Store, session: str, index: int) -> None:
    rng = random.Random(index)
    while not ledger.stopping:
        run = run_start(session_id=session)
        start = run.root_request()
        started = await _call(
            ledger, store, lambda s, r=start: s.runtime.StartRootRun(r), lambda r: r.started.id
        )
        ledger.runs[run.id] = session
        ledger.records[(run.id, start.started.event_key)] = (
            started.started.id,
            start.started.payload,
        )
        for number in range(APPENDS):
            record = run.record(f"r{number}", payload=_payload(rng))
            request = rs.AppendRunRecordRequest(record=record)
            appended = await _call(
                ledger, store, lambda s, r=request: s.runtime.AppendRunRecord(r), lambda r: r.id
            )
            ledger.records[(run.id, record.event_key)] = (appended.id, record.payload)
        status = rng.choice([pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED])
        terminal = run.terminal_request(status)
        ended = await _call(
            ledger, store, lambda s, r=terminal: s.runtime.RecordRunTerminal(r), lambda r: r.id
        )
        ledger.records[(run.id, terminal.record.event_key)] = (ended.id, terminal.record.payload)


@dataclass
class Watcher:
    session: str
    received: list[str] = field(default_factory=list)
    reopened: int = 0
    codes: collections.Counter[str] = field(default_factory=collections.Counter)


async def _watch(store: Store, watcher: Watcher) -> None:
    """Follows the session; on UNAVAILABLE reopens from the last cursor, as
    the client library does."""
    cursor = ""
    while True:
        stream = store.runtime.WatchSessionRunRecords(
            rs.WatchSessionRunRecordsRequest(session_id=watcher.session, cursor=cursor)
        )
        try:
            async for batch in stream:
                watcher.received.extend(event.id for event in batch.events)
                cursor = batch.next_cursor or cursor
        except grpc.aio.AioRpcError as err:
            watcher.codes[err.code().name] += 1
            assert err.code() in ALLOWED_DURING_SWITCH, f"{err.code()}: {err.details()}"
            watcher.reopened += 1
            await asyncio.sleep(0.05)
            continue
        raise AssertionError("a session watch ended by itself")


async def _health(store: Store) -> Any:
    stub = health_pb2_grpc.HealthStub(store.channel)
    response = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return response.status


async def _until_health(stores: list[Store], status: Any, within: float) -> float:
    """Seconds until every replica reports ``status`` (bounded polling)."""
    started = time.monotonic()
    while True:
        statuses = [await _health(store) for store in stores]
        if all(s == status for s in statuses):
            return time.monotonic() - started
        assert time.monotonic() - started < within, f"health {statuses}, wanted {status}"
        await asyncio.sleep(0.05)


async def _all_session_records(store: Store, session: str) -> list[pb.RunRecord]:
    return await store.session_records(session)


async def _verify(store: Store, ledger: Ledger) -> int:
    by_run: dict[str, list[tuple[str, str, bytes]]] = collections.defaultdict(list)
    for (run_id, key), (record_id, payload) in ledger.records.items():
        by_run[run_id].append((key, record_id, payload))
    missing: list[str] = []

    async def check(run_id: str) -> None:
        page = await store.runtime.ListRunRecords(
            rs.ListRunRecordsRequest(run_id=run_id, limit=1000), timeout=10
        )
        stored = {r.event_key: (r.id, r.payload) for r in page.events}
        for key, record_id, payload in by_run[run_id]:
            if stored.get(key) != (record_id, payload):
                missing.append(f"{run_id}/{key}")

    runs = sorted(by_run)
    for offset in range(0, len(runs), 32):
        await asyncio.gather(*(check(run_id) for run_id in runs[offset : offset + 32]))
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:5]}"
    return len(ledger.records)


async def _replay(store: Store, ledger: Ledger) -> int:
    async def replay(command: Acked) -> None:
        response = await command.send(store)
        assert command.result_id(response) == command.record_id

    commands = list(ledger.commands)
    for offset in range(0, len(commands), 64):
        await asyncio.gather(*(replay(c) for c in commands[offset : offset + 64]))
    return len(commands)


@pytest.fixture
async def pair() -> AsyncIterator[pg_standby.Pair]:
    async with pg_standby.primary_and_standby("failover", synchronous=True) as pair:
        await migrate.upgrade(pair.url())  # through the multi-host URL: the primary
        yield pair


@pytest.mark.timeout(600)  # several processes on a loaded machine
async def test_failover_to_a_synchronous_standby_loses_nothing_acknowledged(
    pair: pg_standby.Pair,
) -> None:
    ledger = Ledger()
    args = (
        "--database-url",
        pair.url(),
        "--pg-pool-max",
        "6",
        "--health-probe-interval",
        "0.2",
        "--watch-poll-seconds",
        "60",  # a watcher must be woken by the re-established LISTEN, not by polling
    )
    async with AsyncExitStack() as stack:
        stores: list[Store] = []
        for _ in range(2):
            server = await stack.enter_async_context(server_process(*args))
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
            stores.append(Store(channel, target=server.target))
        sessions = [unique("failover") for _ in range(WRITERS + IDLE_WATCHED)]
        late = sessions[WRITERS:]
        watchers = [Watcher(session) for session in sessions[:WATCHED] + late]
        tasks: list[asyncio.Future[None]] = []
        try:
            for index, session in enumerate(sessions):
                await _call(
                    ledger,
                    stores[index % 2],
                    lambda s, r=session: s.admin.CreateSession(  # type: ignore[misc]
                        sa.CreateSessionRequest(session_id=r, created_at=ts(now_ms()))
                    ),
                    lambda r: r.session.id,
                )
            # Each watcher on the replica that does not write its session.
            tasks += [
                asyncio.ensure_future(_watch(stores[(index + 1) % 2], watcher))
                for index, watcher in enumerate(watchers)
            ]
            tasks += [
                asyncio.ensure_future(_writer(ledger, stores[index % 2], session, index))
                for index, session in enumerate(sessions[:WRITERS])
            ]
            await ledger.reach(ledger.acked + 200, tasks)
            assert all(watcher.received for watcher in watchers[:WATCHED])
            before_kill = ledger.acked

            pair.primary.kill()
            killed_at = time.monotonic()
            not_serving_after = await _until_health(stores, NOT_SERVING, within=15)
            refused_while_down = sum(v for k, v in ledger.codes.items() if k != "OK")
            promoted_at = time.monotonic()
            await pair.standby.promote()
            tasks += [
                asyncio.ensure_future(_writer(ledger, stores[index % 2], session, index))
                for index, session in enumerate(late, start=WATCHED)
            ]

            await ledger.reach(ledger.acked + 200, tasks)
            serving_after = await _until_health(stores, SERVING, within=15)
            ledger.stopping = True
            writers = tasks[len(watchers) :]
            await asyncio.wait_for(asyncio.gather(*writers), 60)

            checked = await _verify(stores[1], ledger)
            replayed = await _replay(stores[0], ledger)
            expected = {
                w.session: [r.id for r in await _all_session_records(stores[0], w.session)]
                for w in watchers
            }
            deadline = time.monotonic() + 30
            while any(len(w.received) < len(expected[w.session]) for w in watchers):
                assert time.monotonic() < deadline, "watchers did not catch up"
                await asyncio.sleep(0.05)
            for watcher in watchers:
                assert watcher.received == expected[watcher.session], "gap or duplicate"
            for watcher in watchers[WATCHED:]:
                assert not watcher.reopened, "a waiting stream did not survive the switch"
        finally:
            ledger.stopping = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    first_success = ledger.first_ack_after(promoted_at) - promoted_at
    codes = dict(sorted(ledger.codes.items()))
    assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
    print(
        f"\nfailover: {WRITERS} writers over 2 replicas, {before_kill} acknowledged before the "
        f"kill, {checked} acknowledged records checked on the new primary, 0 lost; "
        f"{replayed} acknowledged commands replayed with their original results; "
        f"codes {codes} ({refused_while_down} refusals before promotion); health NOT_SERVING "
        f"{not_serving_after:.2f} s after the kill, SERVING again; first success "
        f"{first_success:.2f} s after pg_ctl promote began "
        f"({promoted_at - killed_at:.2f} s after the kill), both replicas "
        f"SERVING {serving_after:.2f} s after 200 more acknowledgements; "
        f"{len(watchers)} watch streams continued without gap or duplicate "
        f"({sum(w.reopened for w in watchers)} reopened from their cursor, "
        f"{sum(1 for w in watchers if not w.reopened)} never interrupted, woken on the new "
        "primary)"
    )
