"""Starts: root, child, one-shot, one-shot child (§9.2, §10.2, §10.3, §14)."""

from __future__ import annotations

import grpc
import pytest

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.support import Store, canceled_record, fails_with, run_start, started_record, unique

NOT_FOUND = grpc.StatusCode.NOT_FOUND
CONFLICT = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT


# --- Root starts -------------------------------------------------------------


async def test_root_start_proceeds_once_and_retry_keeps_outcome_after_end(store: Store) -> None:
    """§14.1: proceed with ID 1; after EndSession the identical retry is still proceed."""
    session = await store.session()
    run = run_start(session_id=session)
    first = await store.runtime.StartRootRun(run.root_request())
    assert first.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert (first.started.id, first.started.inserted) == ("1", True)
    assert first.started.session_status == pb.SESSION_STATUS_ACTIVE
    assert first.canceled == pb.AppendResult()

    await store.end(session)
    retry = await store.runtime.StartRootRun(run.root_request())
    assert retry.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert (retry.started.id, retry.started.inserted) == ("1", False)
    assert retry.started.session_status == pb.SESSION_STATUS_ENDED
    assert [r.type for r in await store.records(run.id)] == [lifecycle.RUN_STARTED]
    meta = await store.load(run.id)
    assert (meta.status, meta.start_outcome) == (
        pb.RUN_STATUS_RUNNING,
        pb.RUN_START_OUTCOME_PROCEED,
    )
    assert dict(meta.labels) == {"site": "one"}


async def test_root_start_retry_after_completion_returns_original(store: Store) -> None:
    """§14.2."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    retry = await store.runtime.StartRootRun(run.root_request())
    assert retry.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert (retry.started.id, retry.started.inserted) == ("1", False)


async def test_ended_session_record_of_another_run_is_rejected_even_when_active(
    store: Store,
) -> None:
    """§14.3: the ended-session record is always validated."""
    session = await store.session()
    run = run_start(session_id=session)
    other = run_start(session_id=session)
    request = run.root_request()
    request.canceled.CopyFrom(canceled_record(other.start))
    before = await store.state(session_id=session, run_ids=(run.id,))
    failure = await fails_with(
        store.runtime.StartRootRun(request), PRECONDITION, "RUN_RECORD_OWNER_MISMATCH"
    )
    assert failure.message == "canceled record: run record owner does not match stored run"
    assert failure.metadata["permanent"] == "true"
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


async def test_ended_session_start_stores_canceled_completion(store: Store) -> None:
    """§14.10 [S]: stop, canceled, records run_started then run_completed."""
    session = await store.session()
    await store.end(session)
    run = run_start(session_id=session)
    result = await store.runtime.StartRootRun(run.root_request())
    assert result.outcome == pb.RUN_START_OUTCOME_STOP
    assert (result.started.id, result.started.inserted) == ("1", True)
    assert (result.canceled.id, result.canceled.inserted) == ("2", True)
    assert result.canceled.session_status == pb.SESSION_STATUS_ENDED
    meta = await store.load(run.id)
    assert meta.status == pb.RUN_STATUS_CANCELED
    assert meta.start_outcome == pb.RUN_START_OUTCOME_STOP
    assert meta.cancellation_reason == lifecycle.REASON_SESSION_ENDED
    records = await store.records(run.id)
    assert [r.type for r in records] == [lifecycle.RUN_STARTED, lifecycle.RUN_COMPLETED]
    assert records[1].timestamp == run.start.started_at

    retry = await store.runtime.StartRootRun(run.root_request())
    assert (retry.outcome, retry.started.inserted, retry.canceled.inserted) == (
        pb.RUN_START_OUTCOME_STOP,
        False,
        False,
    )
    before = await store.state(session_id=session, run_ids=(run.id,))
    await fails_with(
        store.runtime.StartRootRun(run.root_request(canceled_key="different-stopped")),
        CONFLICT,
        "RUN_CONFLICT",
    )
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


async def test_stop_run_cancellation_requests_are_refused(store: Store) -> None:
    """§9.4.1 consequences: same reason -> not active; other reason -> conflict."""
    session = await store.session()
    await store.end(session)
    run = run_start(session_id=session)
    await store.runtime.StartRootRun(run.root_request())
    await fails_with(
        store.runtime.RecordRunCancellation(run.cancellation_request(reason="session_ended")),
        PRECONDITION,
        "RUN_NOT_ACTIVE",
    )
    await fails_with(
        store.runtime.RecordRunCancellation(run.cancellation_request(reason="user_requested")),
        CONFLICT,
        "RUN_CANCELLATION_CONFLICT",
    )
    # Its own completion can be recorded again as an exact retry.
    request = rs.RecordRunTerminalRequest(
        run_id=run.id, status=pb.RUN_STATUS_CANCELED, record=canceled_record(run.start)
    )
    retry = await store.runtime.RecordRunTerminal(request)
    assert (retry.id, retry.inserted) == ("2", False)


async def test_changed_root_retries_conflict(store: Store) -> None:
    run = await store.root()
    changed_labels = rs.StartRootRunRequest()
    changed_labels.CopyFrom(run.root_request())
    changed_labels.run.labels["site"] = "two"
    changed_labels.started.CopyFrom(started_record(changed_labels.run))
    changed_labels.canceled.CopyFrom(canceled_record(changed_labels.run))
    await fails_with(store.runtime.StartRootRun(changed_labels), CONFLICT, "RUN_CONFLICT")
    await fails_with(
        store.runtime.StartRootRun(run.root_request(started_key="other-start")),
        CONFLICT,
        "RUN_CONFLICT",
    )
    changed_agent = run.root_request()
    changed_agent.run.agent_id = "other-agent"
    changed_agent.started.agent_id = "other-agent"
    changed_agent.canceled.agent_id = "other-agent"
    await fails_with(store.runtime.StartRootRun(changed_agent), CONFLICT, "RUN_CONFLICT")
    # Same identity and key, different bytes: the record itself conflicts (§6.1).
    changed_payload = run.root_request()
    changed_payload.started.payload = b'{"labels": {"site":"one"}}'
    failure = await fails_with(
        store.runtime.StartRootRun(changed_payload), CONFLICT, "EVENT_CONFLICT"
    )
    assert failure.metadata["event_key"] == "started"
    assert failure.metadata["run_id"] == run.id
    assert [r.type for r in await store.records(run.id)] == [lifecycle.RUN_STARTED]


async def test_start_in_unknown_or_purged_session(store: Store) -> None:
    run = run_start(session_id=unique("nowhere"))
    await fails_with(store.runtime.StartRootRun(run.root_request()), NOT_FOUND, "SESSION_NOT_FOUND")
    assert not await store.exists(run.id)

    session = await store.session()
    await store.end(session)
    from runstore.v1 import session_admin_pb2 as sa

    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))
    purged = run_start(session_id=session)
    await fails_with(
        store.runtime.StartRootRun(purged.root_request()), PRECONDITION, "SESSION_PURGED"
    )


# --- Continuations (§10.2) -----------------------------------------------------


async def _suspended_root(store: Store, session: str, **kwargs: object) -> str:
    run = await store.root(session_id=session, **kwargs)  # type: ignore[arg-type]
    await store.runtime.RecordRunSuspension(run.suspension_request())
    return run.id


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "run not found"),
        ("running", 'has status "running", want "suspended"'),
        ("completed", 'has status "completed", want "suspended"'),
        ("session", 'does not match successor "'),
        ("agent", 'agent id "other-agent" does not match successor "agent"'),
        ("parent", 'parent run id "'),
    ],
)
async def test_continuation_requires_matching_suspended_predecessor(
    store: Store, case: str, message: str
) -> None:
    """§14.4: each mismatch is a contract error; no successor, no records."""
    session = await store.session()
    if case == "missing":
        predecessor = unique("missing")
    elif case == "running":
        predecessor = (await store.root(session_id=session)).id
    elif case == "completed":
        done = await store.root(session_id=session)
        await store.runtime.RecordRunTerminal(done.terminal_request())
        predecessor = done.id
    elif case == "session":
        predecessor = await _suspended_root(store, await store.session())
    elif case == "agent":
        predecessor = await _suspended_root(store, session, agent_id="other-agent")
    else:  # a suspended child of some parent continued as a root
        parent = await store.root(session_id=session)
        child = run_start(session_id=session, parent_run_id=parent.id)
        await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
        await store.runtime.RecordRunSuspension(child.suspension_request())
        predecessor = child.id
    successor = run_start(session_id=session, predecessor_run_id=predecessor)
    before = await store.state(session_id=session, run_ids=(successor.id,))
    failure = await fails_with(
        store.runtime.StartRootRun(successor.root_request()),
        NOT_FOUND if case == "missing" else PRECONDITION,
        "RUN_NOT_FOUND" if case == "missing" else "CONTINUATION_MISMATCH",
        message,
    )
    assert failure.message.startswith(f'continuation predecessor "{predecessor}"')
    assert await store.state(session_id=session, run_ids=(successor.id,)) == before


async def test_continuation_of_suspended_predecessor_runs(store: Store) -> None:
    session = await store.session()
    predecessor = await _suspended_root(store, session)
    successor = run_start(session_id=session, predecessor_run_id=predecessor)
    result = await store.runtime.StartRootRun(successor.root_request())
    assert result.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert (await store.load(successor.id)).status == pb.RUN_STATUS_RUNNING
    # [S] (Q3): any number of successors may name the same predecessor.
    another = run_start(session_id=session, predecessor_run_id=predecessor)
    await store.runtime.StartRootRun(another.root_request())
    assert (await store.load(predecessor)).status == pb.RUN_STATUS_SUSPENDED
    started = (await store.records(successor.id))[0]
    assert lifecycle.decode_run_started(started.payload).predecessor_run_id == predecessor


async def test_child_continuation_checks_predecessor_before_writing_the_link(
    store: Store,
) -> None:
    """§14.5."""
    session = await store.session()
    parent = await store.root(session_id=session)
    running = run_start(session_id=session, parent_run_id=parent.id)
    await store.runtime.StartChildRun(running.child_request(parent.start.agent_id, link_key="l1"))
    assert len(await store.records(parent.id)) == 2
    successor = run_start(
        session_id=session, parent_run_id=parent.id, predecessor_run_id=running.id
    )
    await fails_with(
        store.runtime.StartChildRun(successor.child_request(parent.start.agent_id, link_key="l2")),
        PRECONDITION,
        "CONTINUATION_MISMATCH",
    )
    assert len(await store.records(parent.id)) == 2
    assert not await store.exists(successor.id)
    await store.runtime.RecordRunSuspension(running.suspension_request())
    result = await store.runtime.StartChildRun(
        successor.child_request(parent.start.agent_id, link_key="l2")
    )
    assert result.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert len(await store.records(parent.id)) == 3


# --- Child starts (§9.2.2, §10.3) ----------------------------------------------


async def test_child_start_writes_link_on_parent_and_start_on_child(store: Store) -> None:
    """§14.11."""
    session = await store.session()
    parent = await store.root(session_id=session)
    child = run_start(session_id=session, parent_run_id=parent.id, agent_id="child-agent")
    result = await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    assert result.outcome == pb.RUN_START_OUTCOME_PROCEED
    assert (result.parent_record.id, result.parent_record.inserted) == ("2", True)
    assert (result.started.id, result.started.inserted) == ("1", True)
    assert result.canceled == pb.AppendResult()
    parent_records = await store.records(parent.id)
    assert [r.type for r in parent_records] == [lifecycle.RUN_STARTED, lifecycle.CHILD_RUN_LINKED]
    assert [r.type for r in await store.records(child.id)] == [lifecycle.RUN_STARTED]
    session_records = await store.session_records(session)
    assert [(r.run_id, r.id) for r in session_records] == [
        (parent.id, "1"),
        (parent.id, "2"),
        (child.id, "1"),
    ]
    meta = await store.load(child.id)
    assert (meta.parent_run_id, meta.agent_id) == (parent.id, "child-agent")


async def test_child_start_in_ended_session_still_links_and_stops(store: Store) -> None:
    session = await store.session()
    parent = await store.root(session_id=session)
    await store.end(session)
    child = run_start(session_id=session, parent_run_id=parent.id)
    result = await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    assert result.outcome == pb.RUN_START_OUTCOME_STOP
    assert [result.parent_record.id, result.started.id, result.canceled.id] == ["2", "1", "2"]
    session_records = await store.session_records(session)
    assert [r.type for r in session_records[-3:]] == [
        lifecycle.CHILD_RUN_LINKED,
        lifecycle.RUN_STARTED,
        lifecycle.RUN_COMPLETED,
    ]


async def test_new_child_needs_running_parent_but_exact_retry_survives_it(store: Store) -> None:
    """§14.14."""
    session = await store.session()
    parent = await store.root(session_id=session)
    child = run_start(session_id=session, parent_run_id=parent.id)
    first = await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    await store.runtime.RecordRunTerminal(parent.terminal_request())
    retry = await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    assert (retry.parent_record.id, retry.started.id) == (first.parent_record.id, first.started.id)
    assert not retry.parent_record.inserted and not retry.started.inserted

    late = run_start(session_id=session, parent_run_id=parent.id)
    before = await store.state(session_id=session, run_ids=(late.id, parent.id))
    await fails_with(
        store.runtime.StartChildRun(late.child_request(parent.start.agent_id, link_key="late")),
        PRECONDITION,
        "RUN_NOT_ACTIVE",
    )
    assert await store.state(session_id=session, run_ids=(late.id, parent.id)) == before


async def test_child_retry_with_new_link_key_conflicts(store: Store) -> None:
    session = await store.session()
    parent = await store.root(session_id=session)
    child = run_start(session_id=session, parent_run_id=parent.id)
    await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    await fails_with(
        store.runtime.StartChildRun(child.child_request(parent.start.agent_id, link_key="other")),
        CONFLICT,
        "RUN_CONFLICT",
    )
    assert len(await store.records(parent.id)) == 2


async def test_child_with_parent_in_other_session_is_owner_mismatch(store: Store) -> None:
    """§9.2.2: V6 pins the link to the child's session, PLC to the parent's."""
    parent = await store.root()
    session = await store.session()
    child = run_start(session_id=session, parent_run_id=parent.id)
    await fails_with(
        store.runtime.StartChildRun(child.child_request(parent.start.agent_id)),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    assert not await store.exists(child.id)


async def test_child_of_missing_parent_is_not_found(store: Store) -> None:
    session = await store.session()
    child = run_start(session_id=session, parent_run_id=unique("ghost"))
    await fails_with(
        store.runtime.StartChildRun(child.child_request("agent")), NOT_FOUND, "RUN_NOT_FOUND"
    )


async def test_child_start_after_purge_is_session_purged(store: Store) -> None:
    """§14.15."""
    from runstore.v1 import session_admin_pb2 as sa

    session = await store.session()
    parent = await store.root(session_id=session)
    await store.runtime.RecordRunTerminal(parent.terminal_request())
    await store.end(session)
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))
    child = run_start(session_id=session, parent_run_id=parent.id)
    await fails_with(
        store.runtime.StartChildRun(child.child_request(parent.start.agent_id)),
        PRECONDITION,
        "SESSION_PURGED",
    )


# --- Sessionless starts (§9.2.3, §9.2.4) -----------------------------------------


async def test_one_shot_start_and_retry(store: Store) -> None:
    run = run_start()
    first = await store.runtime.StartOneShotRun(run.one_shot_request())
    assert (first.record.id, first.record.inserted) == ("1", True)
    assert first.record.session_status == pb.SESSION_STATUS_UNSPECIFIED
    retry = await store.runtime.StartOneShotRun(run.one_shot_request())
    assert (retry.record.id, retry.record.inserted) == ("1", False)
    await fails_with(
        store.runtime.StartOneShotRun(run.one_shot_request(started_key="other")),
        CONFLICT,
        "RUN_CONFLICT",
    )
    meta = await store.load(run.id)
    assert (meta.session_id, meta.status) == ("", pb.RUN_STATUS_RUNNING)


async def test_one_shot_child_links_and_retries(store: Store) -> None:
    """§14.12."""
    parent = await store.one_shot()
    child = run_start(parent_run_id=parent.id)
    first = await store.runtime.StartOneShotChildRun(child.one_shot_child_request("agent"))
    assert (first.parent_record.id, first.started.id) == ("2", "1")
    assert first.parent_record.inserted and first.started.inserted
    assert first.started.session_status == pb.SESSION_STATUS_UNSPECIFIED
    retry = await store.runtime.StartOneShotChildRun(child.one_shot_child_request("agent"))
    assert (retry.parent_record.id, retry.started.id) == ("2", "1")
    assert not retry.parent_record.inserted and not retry.started.inserted
    assert [r.type for r in await store.records(parent.id)] == [
        lifecycle.RUN_STARTED,
        lifecycle.CHILD_RUN_LINKED,
    ]
    assert [r.type for r in await store.records(child.id)] == [lifecycle.RUN_STARTED]


async def test_one_shot_child_needs_running_sessionless_parent(store: Store) -> None:
    """§14.13."""
    session_parent = await store.root()
    child = run_start(parent_run_id=session_parent.id)
    request = child.one_shot_child_request("agent")
    request.parent_linked.session_id = session_parent.start.session_id
    await fails_with(
        store.runtime.StartOneShotChildRun(request),
        INVALID,
        "CONTRACT_VALIDATION",
        "parent identity does not match child run",
    )
    # A link that claims no session reaches the stored parent: a session mismatch.
    await fails_with(
        store.runtime.StartOneShotChildRun(child.one_shot_child_request("agent")),
        PRECONDITION,
        "RUN_SESSION_MISMATCH",
    )
    done = await store.one_shot()
    await store.runtime.RecordRunTerminal(done.terminal_request())
    late = run_start(parent_run_id=done.id)
    await fails_with(
        store.runtime.StartOneShotChildRun(late.one_shot_child_request("agent")),
        PRECONDITION,
        "RUN_NOT_ACTIVE",
    )
    assert not await store.exists(late.id)
    assert len(await store.records(done.id)) == 2


async def test_one_shot_child_link_agent_must_be_parents(store: Store) -> None:
    parent = await store.one_shot()
    child = run_start(parent_run_id=parent.id)
    await fails_with(
        store.runtime.StartOneShotChildRun(child.one_shot_child_request("someone-else")),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    assert len(await store.records(parent.id)) == 1


async def test_purged_run_id_is_free_again(store: Store) -> None:
    """Facts: purge deletes runs; only the session ID is tombstoned."""
    from runstore.v1 import session_admin_pb2 as sa

    session = await store.session()
    run = await store.root(session_id=session)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await store.end(session)
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))
    again = run_start(run_id=run.id)
    result = await store.runtime.StartOneShotRun(again.one_shot_request())
    assert (result.record.id, result.record.inserted) == ("1", True)


async def test_started_record_of_the_wrong_type_is_invalid(store: Store) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    request = run.root_request()
    request.started.type = "run_begun"
    failure = await fails_with(store.runtime.StartRootRun(request), INVALID, "CONTRACT_VALIDATION")
    assert failure.message == 'started record: record has type "run_begun", want "run_started"'
    assert failure.metadata["field"] == "started.type"
