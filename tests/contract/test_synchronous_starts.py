"""StartSynchronousRun (docs/contract.md §9.2.5): a sessionless start with its
published seed, exact retries only, and never an engine start of its run."""

from __future__ import annotations

import asyncio
import collections

import grpc

from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests import current_starts as cur
from tests.seeds import Upload, declaration, synchronous_request
from tests.support import Run, Store, fails_with, outcome, run_start, started_record, ts

CONFLICT = grpc.StatusCode.ALREADY_EXISTS


def _copy(request: sd.StartSynchronousRunRequest) -> sd.StartSynchronousRunRequest:
    copy = sd.StartSynchronousRunRequest()
    copy.CopyFrom(request)
    return copy


async def test_a_synchronous_start_attaches_its_seed_and_retries_exactly(store: Store) -> None:
    request = await synchronous_request(store.runtime)
    first = await store.runtime.StartSynchronousRun(request)
    assert (first.record.id, first.record.inserted) == ("1", True)
    assert first.run_status == pb.RUN_STATUS_RUNNING
    meta = await store.load(request.run.run_id)
    assert (meta.status, meta.session_id, meta.seed_end_id) == (pb.RUN_STATUS_RUNNING, "", "1")
    again = await store.runtime.StartSynchronousRun(request)
    assert (again.record.id, again.record.inserted) == ("1", False)
    assert len(await store.records(request.run.run_id)) == 1


async def test_a_changed_retry_conflicts_even_after_the_run_closed(store: Store) -> None:
    request = await synchronous_request(store.runtime)
    await store.runtime.StartSynchronousRun(request)
    later = _copy(request)
    later.run.started_at.CopyFrom(ts(request.run.started_at.ToMilliseconds() + 3_600_000))
    later.started.CopyFrom(started_record(later.run))
    await fails_with(store.runtime.StartSynchronousRun(later), CONFLICT, "RUN_CONFLICT")
    relabelled = _copy(request)
    relabelled.run.labels["site"] = "two"
    relabelled.started.CopyFrom(started_record(relabelled.run))
    await fails_with(store.runtime.StartSynchronousRun(relabelled), CONFLICT, "RUN_CONFLICT")
    other_key = _copy(request)
    other_key.started.event_key = "another"
    await fails_with(store.runtime.StartSynchronousRun(other_key), CONFLICT, "RUN_CONFLICT")

    run = run_start(run_id=request.run.run_id)
    run.start.CopyFrom(request.run)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await fails_with(store.runtime.StartSynchronousRun(later), CONFLICT, "RUN_CONFLICT")
    replay = await store.runtime.StartSynchronousRun(request)
    assert (replay.record.id, replay.record.inserted) == ("1", False)
    assert replay.run_status == pb.RUN_STATUS_COMPLETED
    assert (await store.load(request.run.run_id)).status == pb.RUN_STATUS_COMPLETED


async def test_the_seed_must_be_published_matching_and_owned(store: Store) -> None:
    run = run_start(seed_end_id="1")
    bare = sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    await fails_with(
        store.runtime.StartSynchronousRun(bare), grpc.StatusCode.NOT_FOUND, "SEED_NOT_FOUND"
    )
    assert not await store.exists(run.id)

    request = await synchronous_request(store.runtime)
    wrong_end = _copy(request)
    wrong_end.run.seed_end_id = "2"
    await fails_with(store.runtime.StartSynchronousRun(wrong_end), CONFLICT, "SEED_CONFLICT")
    other_agent = await synchronous_request(store.runtime, agent_id="someone-else")
    other_agent.run.agent_id = "agent"
    other_agent.started.CopyFrom(started_record(other_agent.run))
    await fails_with(
        store.runtime.StartSynchronousRun(other_agent),
        grpc.StatusCode.FAILED_PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    for failed in (wrong_end, other_agent):
        assert not await store.exists(failed.run.run_id)


async def test_engine_and_synchronous_starts_never_share_a_run(store: Store) -> None:
    request = await synchronous_request(store.runtime)
    await store.runtime.StartSynchronousRun(request)
    engine = rs.StartOneShotRunRequest(run=request.run, started=request.started)
    engine.run.seed_end_id = ""
    await fails_with(store.runtime.StartOneShotRun(engine), CONFLICT, "RUN_CONFLICT")

    # A run an engine start created (its seed published before) takes no
    # synchronous start.
    upload = await Upload(store.runtime, declaration()).published()
    run = run_start(run_id=upload.run_id)
    await store.runtime.StartOneShotRun(run.one_shot_request())
    synchronous = sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    synchronous.run.seed_end_id = "1"
    await fails_with(store.runtime.StartSynchronousRun(synchronous), CONFLICT, "RUN_CONFLICT")


async def test_no_engine_start_of_either_generation_takes_a_synchronous_run(
    store: Store,
) -> None:
    """Each of the four engine starts of a synchronous run's ID, seed-era or
    current (the current sessionless ones attaching its very seed):
    RUN_CONFLICT, nothing written."""
    request = await synchronous_request(store.runtime)
    await store.runtime.StartSynchronousRun(request)
    run = Run(request.run)
    session_parent = await store.root()
    sessionless_parent = await store.one_shot()

    def variant(**fields: str) -> Run:
        start = pb.RunStart()
        start.CopyFrom(run.start)
        for name, value in fields.items():
            setattr(start, name, value)
        return Run(start)

    in_session = {"session_id": session_parent.start.session_id, "seed_end_id": ""}
    calls = [
        store.runtime.StartRootRun(variant(**in_session).root_request()),
        store.runtime.StartChildRun(
            variant(**in_session, parent_run_id=session_parent.id).child_request("agent")
        ),
        store.runtime.StartOneShotRun(variant(seed_end_id="").one_shot_request()),
        store.runtime.StartOneShotChildRun(
            variant(seed_end_id="", parent_run_id=sessionless_parent.id).one_shot_child_request(
                "agent"
            )
        ),
        store.runtime.StartOneShotRun(cur.one_shot(run, cur.digest(run.id))),
        store.runtime.StartOneShotChildRun(
            cur.one_shot_child(variant(parent_run_id=sessionless_parent.id), cur.digest(run.id))
        ),
    ]
    for call in calls:
        await fails_with(call, CONFLICT, "RUN_CONFLICT")
    assert len(await store.records(run.id)) == 1
    for parent in (session_parent, sessionless_parent):
        assert len(await store.records(parent.id)) == 1

    # A run a current one-shot child start created takes no synchronous start.
    kid = await cur.seeded(store.runtime, run_start(parent_run_id=sessionless_parent.id))
    await store.runtime.StartOneShotChildRun(cur.one_shot_child(kid, cur.digest(kid.id)))
    as_root = pb.RunStart()
    as_root.CopyFrom(kid.start)
    as_root.parent_run_id = ""
    synchronous = sd.StartSynchronousRunRequest(run=as_root, started=started_record(as_root))
    await fails_with(store.runtime.StartSynchronousRun(synchronous), CONFLICT, "RUN_CONFLICT")


async def test_racing_synchronous_and_engine_starts_make_one_run(store: Store) -> None:
    for _ in range(4):
        request = await synchronous_request(store.runtime)
        engine = rs.StartOneShotRunRequest(run=request.run, started=request.started)
        engine.run.seed_end_id = ""
        calls = [store.runtime.StartSynchronousRun(request) for _ in range(8)] + [
            store.runtime.StartOneShotRun(engine) for _ in range(8)
        ]
        outcomes = await asyncio.gather(*(outcome(call) for call in calls))
        sync, eng = collections.Counter(outcomes[:8]), collections.Counter(outcomes[8:])
        # One kind won the run ID; every call of the other kind conflicts.
        assert (sync, eng) in (
            ({"ok": 8}, {"RUN_CONFLICT": 8}),
            ({"RUN_CONFLICT": 8}, {"ok": 8}),
        ), (sync, eng)
        assert len(await store.records(request.run.run_id)) == 1


async def test_retention_deletes_a_sessionless_run_with_its_seed(store: Store) -> None:
    upload = await Upload(store.runtime, declaration()).published()
    long_ago = -5_000_000_000_000  # 1811: finished before every other test's runs
    run = run_start(run_id=upload.run_id, started_ms=long_ago, seed_end_id="1")
    request = sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    await store.runtime.StartSynchronousRun(request)
    await store.runtime.RecordRunTerminal(run.terminal_request(at_ms=long_ago))
    purged: list[str] = []
    more = True
    while more and run.id not in purged:
        response = await store.admin.PurgeSessionlessRuns(
            sa.PurgeSessionlessRunsRequest(finished_before=ts(long_ago + 1), limit=100)
        )
        purged += response.purged_run_ids
        more = response.more
    assert run.id in purged
    await fails_with(
        store.runtime.LoadRunSeed(sd.LoadRunSeedRequest(run_id=run.id, end_id="1")),
        grpc.StatusCode.NOT_FOUND,
        "SEED_NOT_FOUND",
    )
    # The run's tombstone still refuses a new seed or start of the ID.
    await fails_with(
        Upload(store.runtime, declaration(run_id=run.id)).begin(), CONFLICT, "RUN_CONFLICT"
    )
