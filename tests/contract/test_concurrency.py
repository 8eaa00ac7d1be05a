"""Races made to happen: many identical or conflicting commands at once (§7).

Every test fires its commands together with ``asyncio.gather`` over one channel,
so the server sees them concurrently; the assertions hold for any interleaving.
"""

from __future__ import annotations

import asyncio
import collections

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.support import Store, canceled_record, outcome, run_start, started_record

N = 32


async def test_concurrent_identical_root_starts_insert_exactly_once(store: Store) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    results = await asyncio.gather(
        *(store.runtime.StartRootRun(run.root_request()) for _ in range(N))
    )
    assert sum(result.started.inserted for result in results) == 1
    assert {(r.outcome, r.started.id) for r in results} == {(pb.RUN_START_OUTCOME_PROCEED, "1")}
    assert len(await store.records(run.id)) == 1


async def test_concurrent_identical_one_shot_starts_insert_exactly_once(store: Store) -> None:
    run = run_start()
    results = await asyncio.gather(
        *(store.runtime.StartOneShotRun(run.one_shot_request()) for _ in range(N))
    )
    assert sum(result.record.inserted for result in results) == 1
    assert len(await store.records(run.id)) == 1


async def test_concurrent_different_starts_of_one_run_id_have_one_winner(store: Store) -> None:
    session = await store.session()
    base = run_start(session_id=session)
    requests = []
    for index in range(N):
        request = base.root_request(started_key=f"started-{index}")
        request.run.labels["attempt"] = str(index)
        request.started.CopyFrom(started_record(request.run, f"started-{index}"))
        request.canceled.CopyFrom(canceled_record(request.run))
        requests.append(request)

    outcomes = collections.Counter(
        await asyncio.gather(*(outcome(store.runtime.StartRootRun(r)) for r in requests))
    )
    assert outcomes == {"ok": 1, "RUN_CONFLICT": N - 1}
    records = await store.records(base.id)
    assert len(records) == 1
    winner = lifecycle.decode_run_started(records[0].payload).labels["attempt"]
    assert dict((await store.load(base.id)).labels) == {"site": "one", "attempt": winner}


async def test_concurrent_identical_appends_insert_exactly_once(store: Store) -> None:
    run = await store.root()
    record = run.record("tool-1")
    results = await asyncio.gather(
        *(store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record)) for _ in range(N))
    )
    assert sum(result.inserted for result in results) == 1
    assert {result.id for result in results} == {"2"}


async def test_concurrent_distinct_appends_get_dense_ids_and_positions(store: Store) -> None:
    session = await store.session()
    runs = [await store.root(session_id=session) for _ in range(4)]
    requests = [
        rs.AppendRunRecordRequest(record=run.record(f"k{index}"))
        for index in range(N)
        for run in runs
    ]
    results = await asyncio.gather(*(store.runtime.AppendRunRecord(r) for r in requests))
    assert all(result.inserted for result in results)
    for run in runs:
        ids = [int(r.id) for r in await store.records(run.id)]
        assert ids == list(range(1, N + 2))
    session_records = await store.session_records(session)
    assert len(session_records) == len(runs) * (N + 1)
    assert len({(r.run_id, r.id) for r in session_records}) == len(session_records)
    # Session order agrees with each run's own order.
    for run in runs:
        in_session = [int(r.id) for r in session_records if r.run_id == run.id]
        assert in_session == sorted(in_session)


async def test_concurrent_terminals_with_different_keys_store_one_ending(store: Store) -> None:
    run = await store.root()
    requests = [run.terminal_request(key=f"done-{index}") for index in range(N)]

    outcomes = collections.Counter(
        await asyncio.gather(*(outcome(store.runtime.RecordRunTerminal(r)) for r in requests))
    )
    assert outcomes == {"ok": 1, "RUN_TERMINAL_CONFLICT": N - 1}
    assert [r.type for r in await store.records(run.id)] == [
        lifecycle.RUN_STARTED,
        lifecycle.RUN_COMPLETED,
    ]


async def test_end_session_racing_starts_every_later_start_stops(store: Store) -> None:
    """§7.3: a start serialised after EndSession sees ``ended``."""
    session = await store.session()
    before = [run_start(session_id=session) for _ in range(N)]
    end = asyncio.ensure_future(store.end(session))
    results = await asyncio.gather(*(store.runtime.StartRootRun(r.root_request()) for r in before))
    await end
    for run, result in zip(before, results, strict=True):
        meta = await store.load(run.id)
        records = await store.records(run.id)
        if result.outcome == pb.RUN_START_OUTCOME_STOP:
            assert meta.status == pb.RUN_STATUS_CANCELED
            assert [r.type for r in records] == [lifecycle.RUN_STARTED, lifecycle.RUN_COMPLETED]
        else:
            assert meta.status == pb.RUN_STATUS_RUNNING
            assert [r.type for r in records] == [lifecycle.RUN_STARTED]
    after = [run_start(session_id=session) for _ in range(N)]
    late = await asyncio.gather(*(store.runtime.StartRootRun(r.root_request()) for r in after))
    assert {result.outcome for result in late} == {pb.RUN_START_OUTCOME_STOP}


async def test_concurrent_child_starts_link_each_child_once(store: Store) -> None:
    session = await store.session()
    parent = await store.root(session_id=session)
    children = [run_start(session_id=session, parent_run_id=parent.id) for _ in range(N)]
    requests = [
        child.child_request(parent.start.agent_id, link_key=f"link-{index}")
        for index, child in enumerate(children)
    ]
    doubled = requests + requests
    results = await asyncio.gather(*(store.runtime.StartChildRun(r) for r in doubled))
    assert sum(result.started.inserted for result in results) == N
    parent_ids = [int(r.id) for r in await store.records(parent.id)]
    assert parent_ids == list(range(1, N + 2))
