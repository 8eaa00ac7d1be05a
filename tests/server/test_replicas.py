"""Several ``runstore serve`` replicas on one PostgreSQL behave as one server.

Two server processes share a fresh database; the tests drive both at once
through gRPC and check the contract's guarantees across processes (§7, D3).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
import pytest

from runstore.contract import lifecycle
from runstore.server.db import migrate
from runstore.server.db.postgres import asyncpg_dsn
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests import postgres
from tests.duplicates import SCENARIOS, fire_duplicates
from tests.processes import server_process
from tests.seeds import Upload, another_attempt, declaration, messages
from tests.support import Store, canceled_record, outcome, run_start, started_record

pytestmark = pytest.mark.postgres

REPLICAS = 2


@dataclass
class Cluster:
    url: str
    replicas: list[Store]

    def pick(self, index: int) -> Store:
        return self.replicas[index % len(self.replicas)]


@pytest.fixture(scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    async with postgres.fresh_database("runstore_replicas") as url, AsyncExitStack() as stack:
        await migrate.upgrade(url)
        replicas = []
        for _ in range(REPLICAS):
            server = await stack.enter_async_context(
                server_process("--database-url", url, "--pg-pool-max", "8")
            )
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
            replicas.append(Store(channel, target=server.target))
        yield Cluster(url, replicas)


async def test_conflicting_starts_of_one_run_id_have_one_winner(cluster: Cluster) -> None:
    session = await cluster.pick(0).session()
    base = run_start(session_id=session)
    requests = []
    for index in range(16):
        request = base.root_request(started_key=f"started-{index}")
        request.run.labels["replica_attempt"] = str(index)
        request.started.CopyFrom(started_record(request.run, f"started-{index}"))
        request.canceled.CopyFrom(canceled_record(request.run))
        requests.append(request)
    outcomes = collections.Counter(
        await asyncio.gather(
            *(
                outcome(cluster.pick(index).runtime.StartRootRun(request))
                for index, request in enumerate(requests)
            )
        )
    )
    assert outcomes == {"ok": 1, "RUN_CONFLICT": 15}
    assert len(await cluster.pick(1).records(base.id)) == 1


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_exact_duplicates_across_replicas_insert_once_and_replay(
    cluster: Cluster, scenario: str
) -> None:
    await fire_duplicates(scenario, cluster.replicas)


async def test_identical_starts_on_both_replicas_insert_once(cluster: Cluster) -> None:
    one_shot = run_start()
    results = await asyncio.gather(
        *(
            cluster.pick(index).runtime.StartOneShotRun(one_shot.one_shot_request())
            for index in range(16)
        )
    )
    assert sum(result.record.inserted for result in results) == 1
    session = await cluster.pick(1).session()
    root = run_start(session_id=session)
    results_root = await asyncio.gather(
        *(cluster.pick(index).runtime.StartRootRun(root.root_request()) for index in range(16))
    )
    assert sum(result.started.inserted for result in results_root) == 1


async def test_session_reader_sees_every_record_once_in_final_order(cluster: Cluster) -> None:
    """D3: positions are taken under the session lock, so a reader paging while
    writers on two replicas append never skips a record that commits later."""
    session = await cluster.pick(0).session()
    runs = [await cluster.pick(i).root(session_id=session) for i in range(4)]
    keys = itertools.count()
    writes_done = asyncio.Event()

    async def writer(replica: Store, run_index: int) -> None:
        for _ in range(40):
            run = runs[run_index]
            await replica.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record(f"k{next(keys)}"))
            )

    async def reader(replica: Store) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        final_pass = False
        while True:
            cursor = str(len(seen)) if seen else ""
            page = await replica.runtime.ListSessionRunRecords(
                rs.ListSessionRunRecordsRequest(session_id=session, cursor=cursor, limit=7)
            )
            seen.extend((record.run_id, record.id) for record in page.events)
            if page.next_cursor:
                assert page.next_cursor == str(len(seen))
                continue
            if final_pass:
                return seen
            final_pass = writes_done.is_set()

    async def all_writers() -> None:
        await asyncio.gather(
            *(writer(cluster.pick(i), i % len(runs)) for i in range(2 * REPLICAS * len(runs)))
        )
        writes_done.set()

    seen, _ = await asyncio.gather(reader(cluster.pick(1)), all_writers())
    final = [(r.run_id, r.id) for r in await cluster.pick(0).session_records(session)]
    assert len(final) == len(runs) + 2 * REPLICAS * len(runs) * 40
    assert seen == final


async def test_end_session_racing_starts_every_later_start_stops(cluster: Cluster) -> None:
    """§7.3 across replicas: in commit (session) order, once one start saw the
    session ended, every later start stops too."""
    session = await cluster.pick(0).session()
    runs = [run_start(session_id=session) for _ in range(24)]
    starts = [
        cluster.pick(index).runtime.StartRootRun(run.root_request())
        for index, run in enumerate(runs)
    ]
    end = cluster.pick(1).end(session)
    results = await asyncio.gather(end, *starts)
    outcome_by_run = {run.id: result.outcome for run, result in zip(runs, results[1:], strict=True)}
    started_order = [
        record.run_id
        for record in await cluster.pick(0).session_records(session)
        if record.type == lifecycle.RUN_STARTED
    ]
    outcomes = [outcome_by_run[run_id] for run_id in started_order]
    first_stop = (
        outcomes.index(pb.RUN_START_OUTCOME_STOP)
        if pb.RUN_START_OUTCOME_STOP in outcomes
        else len(outcomes)
    )
    assert set(outcomes[first_stop:]) <= {pb.RUN_START_OUTCOME_STOP}
    assert set(outcomes[:first_stop]) <= {pb.RUN_START_OUTCOME_PROCEED}
    late = await asyncio.gather(
        *(
            cluster.pick(index).runtime.StartRootRun(run_start(session_id=session).root_request())
            for index in range(8)
        )
    )
    assert {result.outcome for result in late} == {pb.RUN_START_OUTCOME_STOP}


async def _rows_of(url: str, session_id: str) -> tuple[int, int]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        runs = await conn.fetchval("SELECT count(*) FROM runs WHERE session_id = $1", session_id)
        records = await conn.fetchval(
            "SELECT count(*) FROM records WHERE session_id = $1", session_id
        )
        orphans = await conn.fetchval(
            "SELECT count(*) FROM records r WHERE NOT EXISTS "
            "(SELECT 1 FROM runs WHERE runs.run_id = r.run_id)"
        )
    finally:
        await conn.close()
    assert orphans == 0
    return runs, records


async def test_purge_racing_appends_and_starts_leaves_no_orphan(cluster: Cluster) -> None:
    session = await cluster.pick(0).session()
    busy = await cluster.pick(0).root(session_id=session)
    await cluster.pick(0).end(session)
    stop_requests = [run_start(session_id=session).root_request() for _ in range(20)]

    async def appender(replica: Store) -> collections.Counter[str]:
        tally: collections.Counter[str] = collections.Counter()
        for index in itertools.count():
            result = await outcome(
                replica.runtime.AppendRunRecord(
                    rs.AppendRunRecordRequest(record=busy.record(f"{replica.target}-{index}"))
                )
            )
            tally[result] += 1
            if result == "RUN_NOT_FOUND":
                return tally

    async def finisher_and_purger(replica: Store) -> None:
        await replica.runtime.RecordRunTerminal(busy.terminal_request())
        await replica.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))

    async def late_starter(replica: Store, request: rs.StartRootRunRequest) -> str:
        return await outcome(replica.runtime.StartRootRun(request))

    results = await asyncio.gather(
        appender(cluster.pick(0)),
        appender(cluster.pick(1)),
        finisher_and_purger(cluster.pick(1)),
        *(late_starter(cluster.pick(i), r) for i, r in enumerate(stop_requests)),
    )
    for tally in results[:2]:
        assert set(tally) <= {"ok", "RUN_NOT_ACTIVE", "RUN_NOT_FOUND"}
    assert set(results[3:]) <= {"ok", "SESSION_PURGED"}
    assert await _rows_of(cluster.url, session) == (0, 0)
    for replica in cluster.replicas:
        assert await outcome(replica.runtime.LoadRun(rs.LoadRunRequest(run_id=busy.id))) == (
            "RUN_NOT_FOUND"
        )


async def test_racing_groups_of_both_replicas_keep_ids_and_positions_dense(
    cluster: Cluster,
) -> None:
    """Group commit across replicas (docs/scaling.md): many appends released
    at once (a barrier) on both replicas, so each replica's groups race the
    other's on the same runs and session. Every record is stored once with
    dense IDs per run and dense positions in the session; an identical copy
    sent to the other replica is its exact retry (one inserts, both answer
    the same ID) and a changed copy is EVENT_CONFLICT."""
    session = await cluster.pick(0).session()
    runs = [await cluster.pick(0).root(session_id=session) for _ in range(4)]
    release = asyncio.Event()
    queued = 0
    callers = 0

    async def at_barrier(call: Callable[[], Awaitable[Any]]) -> Any:
        nonlocal queued
        queued += 1
        if queued == callers:
            release.set()
        await release.wait()
        return await call()

    def append(replica: int, record: pb.RunRecord) -> Callable[[], Awaitable[Any]]:
        request = rs.AppendRunRecordRequest(record=record)
        return lambda: cluster.pick(replica).runtime.AppendRunRecord(request)

    def append_outcome(replica: int, record: pb.RunRecord) -> Callable[[], Awaitable[Any]]:
        request = rs.AppendRunRecordRequest(record=record)
        return lambda: outcome(cluster.pick(replica).runtime.AppendRunRecord(request))

    def append_batch(replica: int, batch: list[pb.RunRecord]) -> Callable[[], Awaitable[Any]]:
        request = rs.AppendRunRecordsRequest(records=batch)
        return lambda: cluster.pick(replica).runtime.AppendRunRecords(request)

    pairs = [runs[n % 4].record(f"twice-{n}") for n in range(48)]
    changed = [(runs[n % 4], f"changed-{n}") for n in range(8)]
    calls: list[Callable[[], Awaitable[Any]]] = []
    for record in pairs:
        calls += [append(0, record), append(1, record)]
    for run, key in changed:
        calls += [
            append_outcome(replica, run.record(key, payload=b'{"copy":%d}' % replica))
            for replica in (0, 1)
        ]
    batches = 8
    for n in range(batches):
        calls.append(append_batch(n, [runs[n % 4].record(f"batch-{n}-{i}") for i in range(3)]))
    callers = len(calls)
    results = await asyncio.gather(*(at_barrier(call) for call in calls))

    twice = results[: 2 * len(pairs)]
    for first, second in zip(twice[::2], twice[1::2], strict=True):
        assert first.id == second.id and first.inserted != second.inserted, (first, second)
    conflicts = results[2 * len(pairs) : 2 * len(pairs) + 2 * len(changed)]
    assert collections.Counter(conflicts) == {"ok": len(changed), "EVENT_CONFLICT": len(changed)}
    conn = await asyncpg.connect(asyncpg_dsn(cluster.url))
    try:
        positions = [
            row[0]
            for row in await conn.fetch(
                "SELECT session_position FROM records WHERE session_id = $1 ORDER BY 1", session
            )
        ]
        for run in runs:
            rows = await conn.fetch(
                "SELECT record_id, event_key FROM records WHERE run_id = $1 ORDER BY 1", run.id
            )
            assert [row[0] for row in rows] == list(range(1, len(rows) + 1))
            assert len({row[1] for row in rows}) == len(rows)
    finally:
        await conn.close()
    expected = len(runs) + len(pairs) + len(changed) + 3 * batches
    assert positions == list(range(1, expected + 1))


async def test_seed_races_across_replicas_have_one_winner_and_dense_ids(cluster: Cluster) -> None:
    """Two uploads of one seed, publish against publish and settle against
    settle, split over both replicas (§9.7): the run's seed_operations row
    lock decides, whichever process serves the call."""
    first = Upload(cluster.pick(0).runtime, declaration())
    uploads = [first] + [another_attempt(first) for _ in range(7)]
    for index, upload in enumerate(uploads):
        upload.runtime = cluster.pick(index).runtime
        await upload.begin()
    # Every attempt appends its history at once: each chain stays dense.
    for _ in range(3):
        await asyncio.gather(*(upload.history() for upload in uploads))
    assert {upload.end for upload in uploads} == {3}
    await asyncio.gather(*(upload.compiled() for upload in uploads))
    outcomes = await asyncio.gather(*(outcome(upload.publish()) for upload in uploads))
    assert collections.Counter(outcomes) == {"ok": 1, "SEED_CONFLICT": 7}
    winner = uploads[outcomes.index("ok")].decl.attempt_id
    settled = await asyncio.gather(
        *(cluster.pick(i).runtime.SettleRunPreparation(u.settle()) for i, u in enumerate(uploads))
    )
    assert {answer.preparation.seed.declaration.attempt_id for answer in settled} == {winner}
    # Racing appends at one position of one attempt: one is accepted.
    racer = Upload(cluster.pick(0).runtime, declaration())
    await racer.begin()
    requests = [racer.request(messages(f"k{index}", "0")) for index in range(8)]
    tallies = await asyncio.gather(
        *(outcome(cluster.pick(i).runtime.AppendRunSeed(r)) for i, r in enumerate(requests))
    )
    assert collections.Counter(tallies) == {"ok": 1, "SEED_CONFLICT": 7}
