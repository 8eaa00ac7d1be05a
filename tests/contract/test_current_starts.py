"""Current-generation engine starts (§9.2, §10.1, §10.2, §10.6, §10.7, D1): the
request digest, closed-start replay from stored proof, the ended-session
intent, one successor per suspended run and child continuations under another
execution parent, next to seed-era starts of the same server."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests import current_starts as cur
from tests.seeds import Upload, declaration
from tests.support import (
    Run,
    Store,
    canceled_record,
    fails_with,
    outcome,
    run_start,
    started_record,
)

CONFLICT = grpc.StatusCode.ALREADY_EXISTS
INVALID = grpc.StatusCode.INVALID_ARGUMENT
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
DATA_LOSS = grpc.StatusCode.DATA_LOSS
HOUR_MS = 3_600_000


async def _current_root(store: Store, session: str | None = None, **kwargs: Any) -> Run:
    run = run_start(session_id=session or await store.session(), **kwargs)
    await cur.seeded(store.runtime, run)
    await store.runtime.StartRootRun(cur.root(run, cur.digest(run.id)))
    return run


async def _suspended_root(store: Store, *, current: bool) -> Run:
    session = await store.session()
    if current:
        run = await _current_root(store, session)
    else:
        run = await store.root(session)
    await store.runtime.RecordRunSuspension(run.suspension_request())
    return run


def _successor(pred: Run, **kwargs: Any) -> Run:
    return run_start(session_id=pred.start.session_id, predecessor_run_id=pred.id, **kwargs)


# --- The digest tells the generation ------------------------------------------------


def _requests(run: Run, request_digest: bytes) -> dict[str, tuple[str, Any]]:
    sessionless = run_start(run_id=run.id, parent_run_id="")
    one_shot_child = run_start(run_id=run.id, parent_run_id="parent")
    session_child = run_start(
        run_id=run.id, session_id=run.start.session_id, parent_run_id="parent"
    )
    return {
        "root": ("StartRootRun", cur.root(run, request_digest)),
        "child": ("StartChildRun", cur.child(session_child, request_digest)),
        "one_shot": ("StartOneShotRun", cur.one_shot(sessionless, request_digest)),
        "one_shot_child": (
            "StartOneShotChildRun",
            cur.one_shot_child(one_shot_child, request_digest),
        ),
    }


@pytest.mark.parametrize("kind", ["root", "child", "one_shot", "one_shot_child"])
@pytest.mark.parametrize(
    "bad", [bytes(32), b"\x01" * 31, b"\x01" * 33, b"\x07"], ids=["zeros", "31", "33", "1"]
)
async def test_a_digest_of_the_wrong_shape_is_refused_naming_it(
    store: Store, kind: str, bad: bytes
) -> None:
    """D1: 32 bytes not all zero, or none; anything else writes nothing."""
    session = await store.session()
    run = run_start(session_id=session)
    method, request = _requests(run, bad)[kind]
    failure = await fails_with(
        getattr(store.runtime, method)(request), INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.metadata["field"] == "request_digest"
    expected = "accepted request digest is required" if bad == bytes(32) else "must be 32 bytes"
    assert expected in failure.message
    assert not await store.exists(run.id)
    assert await store.session_records(session) == []


@pytest.mark.parametrize("kind", ["root", "child", "one_shot", "one_shot_child"])
async def test_a_seed_era_start_naming_a_seed_end_is_refused(store: Store, kind: str) -> None:
    """D1: only a current start attaches a seed, so an empty digest with a
    seed end is refused naming ``run.seed_end_id``; nothing is written."""
    session = await store.session()
    run = run_start(session_id=session)
    method, request = _requests(run, b"")[kind]
    request.run.seed_end_id = "1"
    failure = await fails_with(
        getattr(store.runtime, method)(request), INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.metadata["field"] == "run.seed_end_id"
    assert not await store.exists(run.id)
    assert await store.session_records(session) == []


async def test_each_generation_carries_its_own_ended_session_record(store: Store) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    both = cur.root(run, cur.digest(run.id))
    both.canceled.CopyFrom(canceled_record(run.start))
    failure = await fails_with(store.runtime.StartRootRun(both), INVALID, "CONTRACT_VALIDATION")
    assert failure.metadata["field"] == "canceled"

    seed_era_with_intent = run.root_request()
    seed_era_with_intent.cancellation.CopyFrom(cur.intent_record(run.start))
    failure = await fails_with(
        store.runtime.StartRootRun(seed_era_with_intent), INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.metadata["field"] == "cancellation"

    without_intent = cur.root(run, cur.digest(run.id))
    without_intent.ClearField("cancellation")
    await fails_with(
        store.runtime.StartRootRun(without_intent),
        INVALID,
        "CONTRACT_VALIDATION",
        "cancellation record is required",
    )
    same_keys = cur.root(run, cur.digest(run.id), intent="started")
    await fails_with(
        store.runtime.StartRootRun(same_keys),
        INVALID,
        "CONTRACT_VALIDATION",
        "started and cancellation records require different event keys",
    )
    assert not await store.exists(run.id)


async def test_every_start_result_reports_the_run_status(store: Store) -> None:
    """§3.11: seed-era and current results both carry run_status."""
    session = await store.session()
    seed_era = run_start(session_id=session)
    result = await store.runtime.StartRootRun(seed_era.root_request())
    assert result.run_status == pb.RUN_STATUS_RUNNING
    current = await cur.seeded(store.runtime, run_start(session_id=session))
    result = await store.runtime.StartRootRun(cur.root(current, cur.digest(current.id)))
    assert (result.run_status, result.started.id) == (pb.RUN_STATUS_RUNNING, "1")
    one_shot = await cur.seeded(store.runtime, run_start())
    shot = await store.runtime.StartOneShotRun(cur.one_shot(one_shot, cur.digest(one_shot.id)))
    assert (shot.run_status, shot.record.id) == (pb.RUN_STATUS_RUNNING, "1")
    await store.runtime.RecordRunTerminal(seed_era.terminal_request())
    retry = await store.runtime.StartRootRun(seed_era.root_request())
    assert (retry.run_status, retry.started.inserted) == (pb.RUN_STATUS_COMPLETED, False)
    await store.end(session)
    stopped = run_start(session_id=session)
    result = await store.runtime.StartRootRun(stopped.root_request())
    assert (result.outcome, result.run_status) == (
        pb.RUN_START_OUTCOME_STOP,
        pb.RUN_STATUS_CANCELED,
    )
    assert result.canceled.id == "2" and result.cancellation == pb.AppendResult()


# --- Seed attachment (§9.7.9) ------------------------------------------------------------

KINDS = ["root", "child", "one_shot", "one_shot_child"]


async def _fresh(store: Store, kind: str) -> tuple[str, Run, Callable[[Run], Any], str]:
    """A fresh run of ``kind`` (its parent started), the start method, a
    builder of its current start, and its session ("" when sessionless)."""
    session = await store.session()
    if kind == "root":
        return "StartRootRun", run_start(session_id=session), _current(cur.root), session
    if kind == "child":
        parent = await _current_root(store, session)
        kid = run_start(session_id=session, parent_run_id=parent.id)
        return "StartChildRun", kid, _current(cur.child), session
    parent = await cur.seeded(store.runtime, run_start())
    await store.runtime.StartOneShotRun(cur.one_shot(parent, cur.digest(parent.id)))
    if kind == "one_shot":
        return "StartOneShotRun", run_start(), _current(cur.one_shot), ""
    shot_kid = run_start(parent_run_id=parent.id)
    return "StartOneShotChildRun", shot_kid, _current(cur.one_shot_child), ""


def _current(builder: Callable[[Run, bytes], Any]) -> Callable[[Run], Any]:
    return lambda run: builder(run, cur.digest(run.id))


def _seed_era(kind: str, run: Run) -> Any:
    if kind == "root":
        return run.root_request()
    if kind == "child":
        return run.child_request(parent_agent_id="agent")
    if kind == "one_shot":
        return run.one_shot_request()
    return run.one_shot_child_request(parent_agent_id="agent")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_current_start_without_a_published_seed_writes_nothing(
    store: Store, kind: str
) -> None:
    """No seed, or one still uploading: SEED_NOT_FOUND, the run not created."""
    method, run, current, session = await _fresh(store, kind)
    run.start.seed_end_id = "1"
    before = await store.state(session_id=session, run_ids=(run.id, run.start.parent_run_id))
    await fails_with(
        getattr(store.runtime, method)(current(run)), grpc.StatusCode.NOT_FOUND, "SEED_NOT_FOUND"
    )
    upload = Upload(store.runtime, declaration(run_id=run.id, session_id=run.start.session_id))
    await upload.begin()
    await upload.history()
    await fails_with(
        getattr(store.runtime, method)(current(run)), grpc.StatusCode.NOT_FOUND, "SEED_NOT_FOUND"
    )
    assert not await store.exists(run.id)
    assert await store.state(session_id=session, run_ids=(run.id, run.start.parent_run_id)) == (
        before
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_a_current_start_attaches_its_seed_exactly(store: Store, kind: str) -> None:
    """The start's seed_end_id is the seed's history end, first start and
    retries alike; the run keeps it as RunMeta.seed_end_id."""
    method, run, current, session = await _fresh(store, kind)
    await cur.seeded(store.runtime, run)
    end = run.start.seed_end_id
    start = getattr(store.runtime, method)
    for wrong in ("", str(int(end) + 1)):
        run.start.seed_end_id = wrong
        await fails_with(start(current(run)), CONFLICT, "SEED_CONFLICT")
    assert not await store.exists(run.id)
    run.start.seed_end_id = end
    await start(current(run))
    assert (await store.load(run.id)).seed_end_id == end
    retry = await start(current(run))
    assert retry.run_status == pb.RUN_STATUS_RUNNING
    before = await store.state(session_id=session, run_ids=(run.id,))
    run.start.seed_end_id = str(int(end) + 1)
    await fails_with(start(current(run)), CONFLICT, "SEED_CONFLICT")
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


async def test_the_seed_must_be_the_starts_own(store: Store) -> None:
    """The declaration's agent and session are the start's
    (RUN_RECORD_OWNER_MISMATCH); a continuation seed exactly for a
    continuation of its source (SEED_CONFLICT)."""
    session = await store.session()
    other_agent = await cur.seeded(store.runtime, run_start(session_id=session, agent_id="other"))
    other_agent.start.agent_id = "agent"
    await fails_with(
        store.runtime.StartRootRun(cur.root(other_agent, cur.digest(other_agent.id))),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    sessionless_seed = await cur.seeded(store.runtime, run_start())
    sessionless_seed.start.session_id = session
    await fails_with(
        store.runtime.StartRootRun(cur.root(sessionless_seed, cur.digest(sessionless_seed.id))),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )

    pred = await _suspended_root(store, current=True)
    other_pred = await _current_root(store, pred.start.session_id)
    await store.runtime.RecordRunSuspension(other_pred.suspension_request())
    literal = await cur.seeded(store.runtime, run_start(session_id=pred.start.session_id))
    literal.start.predecessor_run_id = pred.id
    continued = await cur.seeded(store.runtime, _successor(pred))
    not_continued = run_start(run_id=continued.id, session_id=pred.start.session_id)
    not_continued.start.seed_end_id = continued.start.seed_end_id
    elsewhere = await cur.seeded(store.runtime, _successor(other_pred))
    elsewhere.start.predecessor_run_id = pred.id
    for wrong in (literal, not_continued, elsewhere):
        await fails_with(
            store.runtime.StartRootRun(cur.root(wrong, cur.digest(wrong.id))),
            CONFLICT,
            "SEED_CONFLICT",
        )
    for run in (literal, continued, elsewhere):
        assert not await store.exists(run.id)
    for predecessor in (pred, other_pred):
        assert (await store.load(predecessor.id)).successor_run_id == ""


@pytest.mark.parametrize("kind", KINDS)
async def test_a_seed_era_start_never_looks_at_seeds(store: Store, kind: str) -> None:
    """D1: with or without a published seed for its run, a seed-era start
    starts as before and records no seed end."""
    _, unseeded, _, _ = await _fresh(store, kind)
    method, seeded, _, _ = await _fresh(store, kind)
    await cur.seeded(store.runtime, seeded)
    for run in (unseeded, cur.seed_era(seeded)):
        result = await getattr(store.runtime, method)(_seed_era(kind, run))
        assert result.run_status == pb.RUN_STATUS_RUNNING
        assert (await store.load(run.id)).seed_end_id == ""


# --- Binding (§10.6) -------------------------------------------------------------------


async def test_a_running_current_run_takes_only_its_exact_retry(store: Store) -> None:
    session = await store.session()
    run = await cur.seeded(store.runtime, run_start(session_id=session))
    bound = cur.digest(run.id)
    first = await store.runtime.StartRootRun(cur.root(run, bound))
    assert (first.started.id, first.started.inserted) == ("1", True)
    retry = await store.runtime.StartRootRun(cur.root(run, bound))
    assert (retry.started.id, retry.started.inserted, retry.run_status) == (
        "1",
        False,
        pb.RUN_STATUS_RUNNING,
    )
    before = await store.state(session_id=session, run_ids=(run.id,))
    for changed in (
        cur.root(run, cur.digest("another request")),
        cur.root(cur.moved(run, HOUR_MS), bound),  # a new time while running
        cur.root(run, bound, started="other-key"),
        cur.seed_era(run).root_request(),  # seed-era: binds no digest
    ):
        await fails_with(store.runtime.StartRootRun(changed), CONFLICT, "RUN_CONFLICT")
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


async def test_a_seed_era_run_refuses_a_current_start(store: Store) -> None:
    """§10.7: the run's own (seed-era) start bound no digest; the run's seed,
    published before that start, does not change it."""
    run = await cur.seeded(store.runtime, run_start(session_id=await store.session()))
    await store.runtime.StartRootRun(cur.seed_era(run).root_request())
    await fails_with(
        store.runtime.StartRootRun(cur.root(run, cur.digest(run.id))), CONFLICT, "RUN_CONFLICT"
    )
    shot = await cur.seeded(store.runtime, run_start())
    await store.runtime.StartOneShotRun(cur.seed_era(shot).one_shot_request())
    await fails_with(
        store.runtime.StartOneShotRun(cur.one_shot(shot, cur.digest(shot.id))),
        CONFLICT,
        "RUN_CONFLICT",
    )
    current_shot = await cur.seeded(store.runtime, run_start())
    await store.runtime.StartOneShotRun(cur.one_shot(current_shot, cur.digest(current_shot.id)))
    await fails_with(
        store.runtime.StartOneShotRun(cur.seed_era(current_shot).one_shot_request()),
        CONFLICT,
        "RUN_CONFLICT",
    )


async def test_a_closed_run_replays_its_original_start_at_a_new_time(store: Store) -> None:
    """§14.23: same digest, started_at an hour later: original outcome and IDs,
    current status, nothing written."""
    session = await store.session()
    run = await _current_root(store, session)
    bound = cur.digest(run.id)
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record("tool")))
    await store.runtime.RecordRunTerminal(run.terminal_request())
    before = await store.state(session_id=session, run_ids=(run.id,))

    later = cur.moved(run, HOUR_MS)
    replay = await store.runtime.StartRootRun(cur.root(later, bound))
    assert replay.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert replay.run_status == pb.RUN_STATUS_COMPLETED
    assert (replay.started.id, replay.started.inserted) == ("1", False)
    assert replay.started.session_status == pb.SESSION_STATUS_ACTIVE
    assert replay.cancellation == pb.AppendResult() == replay.canceled
    assert await store.state(session_id=session, run_ids=(run.id,)) == before

    relabeled = cur.moved(run, HOUR_MS)
    relabeled.start.labels["site"] = "two"
    for changed in (
        cur.root(later, cur.digest("another request")),
        cur.root(relabeled, bound),
        cur.root(later, bound, started="other-key"),
    ):
        await fails_with(store.runtime.StartRootRun(changed), CONFLICT, "RUN_CONFLICT")
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


async def test_closed_replays_of_every_engine_start(store: Store) -> None:
    """Suspended root, child, one-shot and one-shot child: each returns its
    original IDs for a new execution of its request."""
    session = await store.session()
    parent = await _current_root(store, session)
    kid = await cur.seeded(store.runtime, run_start(session_id=session, parent_run_id=parent.id))
    kid_digest = cur.digest(kid.id)
    first = await store.runtime.StartChildRun(cur.child(kid, kid_digest))
    await store.runtime.RecordRunSuspension(kid.suspension_request())
    await store.runtime.RecordRunSuspension(parent.suspension_request())
    replay = await store.runtime.StartChildRun(cur.child(cur.moved(kid, HOUR_MS), kid_digest))
    assert replay.run_status == pb.RUN_STATUS_SUSPENDED
    assert (replay.parent_record.id, replay.started.id) == (first.parent_record.id, "1")
    assert not replay.parent_record.inserted and not replay.started.inserted
    other_call = cur.child(cur.moved(kid, HOUR_MS), kid_digest, tool_call_id="call-2")
    await fails_with(store.runtime.StartChildRun(other_call), CONFLICT, "RUN_CONFLICT")
    parent_replay = await store.runtime.StartRootRun(
        cur.root(cur.moved(parent, HOUR_MS), cur.digest(parent.id))
    )
    assert parent_replay.run_status == pb.RUN_STATUS_SUSPENDED

    shot = await cur.seeded(store.runtime, run_start())
    shot_digest = cur.digest(shot.id)
    await store.runtime.StartOneShotRun(cur.one_shot(shot, shot_digest))
    shot_kid = await cur.seeded(store.runtime, run_start(parent_run_id=shot.id))
    kid_digest = cur.digest(shot_kid.id)
    linked = await store.runtime.StartOneShotChildRun(cur.one_shot_child(shot_kid, kid_digest))
    await store.runtime.RecordRunTerminal(shot_kid.terminal_request(pb.RUN_STATUS_FAILED))
    await store.runtime.RecordRunTerminal(shot.terminal_request())
    shot_replay = await store.runtime.StartOneShotRun(
        cur.one_shot(cur.moved(shot, HOUR_MS), shot_digest)
    )
    assert (shot_replay.record.id, shot_replay.run_status) == ("1", pb.RUN_STATUS_COMPLETED)
    kid_replay = await store.runtime.StartOneShotChildRun(
        cur.one_shot_child(cur.moved(shot_kid, HOUR_MS), kid_digest)
    )
    assert kid_replay.run_status == pb.RUN_STATUS_FAILED
    assert (kid_replay.parent_record.id, kid_replay.started.id) == (
        linked.parent_record.id,
        "1",
    )
    assert len(await store.records(shot.id)) == 3


# --- The ended-session intent (§10.1) ---------------------------------------------------


async def test_a_current_stopped_start_stores_the_intent_and_keeps_running(
    store: Store,
) -> None:
    session = await store.session()
    await store.end(session)
    run = await cur.seeded(store.runtime, run_start(session_id=session))
    bound = cur.digest(run.id)
    first = await store.runtime.StartRootRun(cur.root(run, bound))
    assert (first.outcome, first.run_status) == (
        pb.RUN_START_OUTCOME_STOP,
        pb.RUN_STATUS_RUNNING,
    )
    assert (first.cancellation.id, first.cancellation.inserted) == ("2", True)
    assert first.canceled == pb.AppendResult()
    meta = await store.load(run.id)
    assert (meta.status, meta.cancellation_reason) == (
        pb.RUN_STATUS_RUNNING,
        lifecycle.REASON_SESSION_ENDED,
    )
    assert [r.type for r in await store.records(run.id)] == [
        lifecycle.RUN_STARTED,
        lifecycle.CANCELLATION_INTENT,
    ]
    retry = await store.runtime.StartRootRun(cur.root(run, bound))
    assert (retry.cancellation.id, retry.cancellation.inserted) == ("2", False)
    await fails_with(
        store.runtime.StartRootRun(cur.root(run, bound, intent="other")),
        CONFLICT,
        "RUN_CONFLICT",
    )

    await fails_with(
        store.runtime.RecordRunTerminal(run.terminal_request()),
        INVALID,
        "CONTRACT_VALIDATION",
        "ended-session start cannot complete successfully",
    )
    await fails_with(
        store.runtime.RecordRunSuspension(run.suspension_request()),
        INVALID,
        "CONTRACT_VALIDATION",
        "ended-session start cannot suspend",
    )
    await store.runtime.RecordRunTerminal(
        run.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_SESSION_ENDED)
    )
    replay = await store.runtime.StartRootRun(cur.root(cur.moved(run, HOUR_MS), bound))
    assert (replay.outcome, replay.run_status) == (
        pb.RUN_START_OUTCOME_STOP,
        pb.RUN_STATUS_CANCELED,
    )
    assert (replay.started.id, replay.cancellation.id) == ("1", "2")
    assert replay.cancellation.session_status == pb.SESSION_STATUS_ENDED


async def test_a_seed_era_stopped_start_still_closes_the_run(store: Store) -> None:
    session = await store.session()
    await store.end(session)
    run = run_start(session_id=session)
    result = await store.runtime.StartRootRun(run.root_request())
    assert (result.outcome, result.run_status, result.canceled.id) == (
        pb.RUN_START_OUTCOME_STOP,
        pb.RUN_STATUS_CANCELED,
        "2",
    )
    assert (await store.load(run.id)).status == pb.RUN_STATUS_CANCELED


# --- Stored proof (§10.6): missing or corrupt is DATA_LOSS, never a write -------------------


async def _closed_current_run(store: Store) -> tuple[Run, bytes, str]:
    session = await store.session()
    run = await _current_root(store, session)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    return run, cur.digest(run.id), session


@pytest.mark.parametrize(
    ("corruption", "message"),
    [
        (
            "DELETE FROM records WHERE run_id = :run_id AND event_key = 'started'",
            "stored run is missing a required lifecycle record",
        ),
        (
            "UPDATE records SET payload = :bad WHERE run_id = :run_id AND event_key = 'completed'",
            "stored run closing record",
        ),
        (
            "UPDATE records SET payload = :bad WHERE run_id = :run_id AND event_key = 'started'",
            "stored run start",
        ),
        (
            "UPDATE runs SET request_digest = :short WHERE run_id = :run_id",
            "stored run has no accepted request digest",
        ),
    ],
    ids=["start-missing", "closing-corrupt", "start-corrupt", "digest-corrupt"],
)
async def test_corrupt_proof_is_data_loss_and_writes_nothing(
    store: Store, database_url: str, corruption: str, message: str
) -> None:
    run, bound, session = await _closed_current_run(store)
    touched = await cur.execute(
        database_url, corruption, run_id=run.id, bad=b'{"unknown":1}', short=b"\x01" * 5
    )
    assert touched == 1
    before = await store.state(session_id=session, run_ids=(run.id,))
    failure = await fails_with(
        store.runtime.StartRootRun(cur.root(cur.moved(run, HOUR_MS), bound)),
        DATA_LOSS,
        "STORED_STATE_CORRUPT",
        message,
    )
    assert failure.metadata["run_id"] == run.id
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


# --- One successor per suspended run (§10.2) ---------------------------------------------


async def test_the_first_current_continuation_is_the_only_successor(store: Store) -> None:
    pred = await _suspended_root(store, current=True)
    winner = await cur.seeded(store.runtime, _successor(pred))
    await store.runtime.StartRootRun(cur.root(winner, cur.digest(winner.id)))
    meta = await store.load(pred.id)
    assert (meta.status, meta.successor_run_id) == (pb.RUN_STATUS_SUSPENDED, winner.id)

    loser = await cur.seeded(store.runtime, _successor(pred))
    failure = await fails_with(
        store.runtime.StartRootRun(cur.root(loser, cur.digest(loser.id))),
        CONFLICT,
        "RUN_CONFLICT",
    )
    assert failure.metadata["successor_run_id"] == winner.id
    assert not await store.exists(loser.id)
    retry = await store.runtime.StartRootRun(cur.root(winner, cur.digest(winner.id)))
    assert (retry.started.id, retry.started.inserted) == ("1", False)
    assert (await store.load(pred.id)).updated_at == meta.updated_at


async def test_seed_era_continuations_neither_claim_nor_respect_the_slot(store: Store) -> None:
    """§10.7: a continuation follows its own generation's rule (Q3)."""
    pred = await _suspended_root(store, current=False)
    for _ in range(2):
        await store.runtime.StartRootRun(_successor(pred).root_request())
    assert (await store.load(pred.id)).successor_run_id == ""
    current = await cur.seeded(store.runtime, _successor(pred))
    await store.runtime.StartRootRun(cur.root(current, cur.digest(current.id)))
    assert (await store.load(pred.id)).successor_run_id == current.id
    late_seed_era = _successor(pred)
    await store.runtime.StartRootRun(late_seed_era.root_request())
    assert (await store.load(pred.id)).successor_run_id == current.id


async def test_racing_current_continuations_have_one_winner(store: Store) -> None:
    """§14.22: eight at once, one succeeds, the others RUN_CONFLICT with no run."""
    pred = await _suspended_root(store, current=True)
    successors = [await cur.seeded(store.runtime, _successor(pred)) for _ in range(8)]
    results = await asyncio.gather(
        *(outcome(store.runtime.StartRootRun(cur.root(s, cur.digest(s.id)))) for s in successors)
    )
    assert collections.Counter(results) == {"ok": 1, "RUN_CONFLICT": 7}
    winner = successors[results.index("ok")]
    assert (await store.load(pred.id)).successor_run_id == winner.id
    assert [await store.exists(s.id) for s in successors].count(True) == 1


# --- Child continuation under another execution parent (§10.2 [N]) ---------------------------


async def _suspended_child_tree(store: Store) -> tuple[Run, Run, Run]:
    """A suspended parent, its suspended child, and the parent's running continuation."""
    parent = await _current_root(store)
    session = parent.start.session_id
    kid = await cur.seeded(store.runtime, run_start(session_id=session, parent_run_id=parent.id))
    await store.runtime.StartChildRun(cur.child(kid, cur.digest(kid.id)))
    await store.runtime.RecordRunSuspension(kid.suspension_request())
    await store.runtime.RecordRunSuspension(parent.suspension_request())
    next_parent = await cur.seeded(store.runtime, _successor(parent))
    await store.runtime.StartRootRun(cur.root(next_parent, cur.digest(next_parent.id)))
    return parent, kid, next_parent


async def test_a_child_continues_the_same_tool_call_under_the_continued_parent(
    store: Store,
) -> None:
    _, kid, next_parent = await _suspended_child_tree(store)
    next_kid = await cur.seeded(
        store.runtime,
        run_start(
            session_id=kid.start.session_id,
            parent_run_id=next_parent.id,
            predecessor_run_id=kid.id,
        ),
    )
    result = await store.runtime.StartChildRun(cur.child(next_kid, cur.digest(next_kid.id)))
    assert (result.parent_record.id, result.run_status) == ("2", pb.RUN_STATUS_RUNNING)
    assert (await store.load(kid.id)).successor_run_id == next_kid.id


async def test_a_child_continuation_of_another_tool_call_is_refused(store: Store) -> None:
    _, kid, next_parent = await _suspended_child_tree(store)
    next_kid = await cur.seeded(
        store.runtime,
        run_start(
            session_id=kid.start.session_id,
            parent_run_id=next_parent.id,
            predecessor_run_id=kid.id,
        ),
    )
    as_root = await cur.seeded(
        store.runtime, run_start(session_id=kid.start.session_id, predecessor_run_id=kid.id)
    )
    before = await store.state(run_ids=(next_parent.id, next_kid.id, kid.id))
    failure = await fails_with(
        store.runtime.StartChildRun(
            cur.child(next_kid, cur.digest(next_kid.id), tool_call_id="call-2")
        ),
        PRECONDITION,
        "CONTINUATION_MISMATCH",
        "child continuation does not match predecessor parent tool call",
    )
    assert failure.metadata["predecessor_run_id"] == kid.id
    seed_era = cur.seed_era(next_kid).child_request(parent_agent_id="agent")
    await fails_with(
        store.runtime.StartChildRun(seed_era),
        PRECONDITION,
        "CONTINUATION_MISMATCH",
        "parent run id",
    )
    await fails_with(
        store.runtime.StartRootRun(cur.root(as_root, cur.digest(as_root.id))),
        PRECONDITION,
        "CONTINUATION_MISMATCH",
        "parent run id",
    )
    assert await store.state(run_ids=(next_parent.id, next_kid.id, kid.id)) == before


async def test_a_child_continuation_whose_predecessor_link_is_gone_is_data_loss(
    store: Store, database_url: str
) -> None:
    parent, kid, next_parent = await _suspended_child_tree(store)
    await cur.execute(
        database_url,
        "DELETE FROM records WHERE run_id = :run_id AND event_key = 'linked'",
        run_id=parent.id,
    )
    next_kid = await cur.seeded(
        store.runtime,
        run_start(
            session_id=kid.start.session_id,
            parent_run_id=next_parent.id,
            predecessor_run_id=kid.id,
        ),
    )
    await fails_with(
        store.runtime.StartChildRun(cur.child(next_kid, cur.digest(next_kid.id))),
        DATA_LOSS,
        "STORED_STATE_CORRUPT",
    )
    assert not await store.exists(next_kid.id)


async def test_seed_era_start_record_helpers_are_unchanged(store: Store) -> None:
    """The seed-era suite's request shape still answers as before."""
    run = run_start(session_id=await store.session())
    request = rs.StartRootRunRequest(
        run=run.start,
        started=started_record(run.start),
        canceled=canceled_record(run.start),
    )
    result = await store.runtime.StartRootRun(request)
    assert (result.started.id, result.canceled) == ("1", pb.AppendResult())
