"""Lifecycle changes, repairs and checkpoints (§9.4, §9.5, §9.6.2, §10.1, §14.16–21).

Upstream's in-memory store tests of these methods (§14.16–§14.21) are mirrored
here; every rejected command is also checked to have written nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.support import Failure, Run, Store, canceled_record, fails_with, run_start, ts, unique

NOT_FOUND = grpc.StatusCode.NOT_FOUND
CONFLICT = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT


SUCCESS_PAYLOAD = b'{"status":"success","phase":"completed","labels":{"site":"one"}}'
SUSPENDED_PAYLOAD = (
    b'{"SuspensionID":"checkpoint-1","Version":"v6","PendingCount":1,"RequiredTools":null}'
)


# --- Helpers -------------------------------------------------------------------


async def checkpoint_of(store: Store, run_id: str) -> pb.Checkpoint | None:
    try:
        response = await store.runtime.LoadRunSuspension(rs.LoadRunSuspensionRequest(run_id=run_id))
    except grpc.aio.AioRpcError as err:
        if err.code() is grpc.StatusCode.NOT_FOUND:
            return None
        raise
    return response.suspension


async def snapshot(store: Store, run: Run) -> Any:
    """Run meta, records, session records and checkpoint: what a failure must not touch."""
    state = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    return state, await checkpoint_of(store, run.id)


async def rejects(
    store: Store,
    run: Run,
    method: Callable[[Any], Awaitable[Any]],
    request: Any,
    code: grpc.StatusCode,
    reason: str,
    message: str | None = None,
) -> Failure:
    """The call fails with (code, reason, message) and leaves ``run`` untouched."""
    before = await snapshot(store, run)
    failure = await fails_with(method(request), code, reason, message)
    assert failure.metadata["permanent"] == "true"
    assert await snapshot(store, run) == before
    return failure


def repair_terminal(request: rs.RecordRunTerminalRequest) -> rs.RepairRunTerminalRequest:
    return rs.RepairRunTerminalRequest(
        run_id=request.run_id, status=request.status, record=request.record
    )


def repair_suspension(request: rs.RecordRunSuspensionRequest) -> rs.RepairRunSuspensionRequest:
    return rs.RepairRunSuspensionRequest(
        run_id=request.run_id, suspension=request.suspension, record=request.record
    )


def nanos(stamp: Any) -> int:
    return int(stamp.seconds) * 1_000_000_000 + int(stamp.nanos)


def terminal(
    run: Run, command: int, payload_status: str, reason: str | None = None
) -> rs.RecordRunTerminalRequest:
    """A terminal command whose run_completed status may disagree with it."""
    return rs.RecordRunTerminalRequest(
        run_id=run.id, status=command, record=run.completed(status=payload_status, reason=reason)
    )


# --- RecordRunCancellation (§9.4.1, §10.1) ---------------------------------------


async def test_cancellation_stores_reason_and_intent_but_keeps_running(store: Store) -> None:
    """§9.4.1 steps 7–8: reason, slot and intent record; the status does not change."""
    run = await store.root()
    before = await store.load(run.id)
    result = await store.runtime.RecordRunCancellation(run.cancellation_request())
    assert (result.id, result.inserted) == ("2", True)
    assert result.session_status == pb.SESSION_STATUS_ACTIVE
    meta = await store.load(run.id)
    assert meta.status == pb.RUN_STATUS_RUNNING
    assert meta.cancellation_reason == lifecycle.REASON_USER_REQUESTED
    assert nanos(meta.updated_at) > nanos(before.updated_at)
    records = await store.records(run.id)
    assert [r.type for r in records] == [lifecycle.RUN_STARTED, lifecycle.CANCELLATION_INTENT]
    assert records[1].payload == run.cancellation().payload
    assert records[1].event_key == "cancel"


async def test_cancellation_retry_returns_original_without_changes(store: Store) -> None:
    """§8 rule 3: same ID, inserted=false, UpdatedAt unchanged."""
    run = await store.one_shot()
    first = await store.runtime.RecordRunCancellation(run.cancellation_request())
    before = await snapshot(store, run)
    retry = await store.runtime.RecordRunCancellation(run.cancellation_request())
    assert (retry.id, retry.inserted) == (first.id, False)
    assert retry.session_status == pb.SESSION_STATUS_UNSPECIFIED
    assert await snapshot(store, run) == before


async def test_second_reason_conflicts_before_the_record_conflict(store: Store) -> None:
    """§14.17 / test 17: user_requested then session_ended under the same key is a
    reason conflict, although the record under that key differs too (§9.4.1 step 3)."""
    run = await store.one_shot()
    await store.runtime.RecordRunCancellation(run.cancellation_request())
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        run.cancellation_request(reason=lifecycle.REASON_SESSION_ENDED),
        CONFLICT,
        "RUN_CANCELLATION_CONFLICT",
    )
    assert failure.message == "run cancellation reason conflict"
    assert failure.metadata["run_id"] == run.id
    # A different reason under a new key is the same conflict.
    await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        run.cancellation_request(key="cancel-2", reason=lifecycle.REASON_SESSION_ENDED),
        CONFLICT,
        "RUN_CANCELLATION_CONFLICT",
    )
    assert (await store.load(run.id)).cancellation_reason == lifecycle.REASON_USER_REQUESTED


async def test_cancellation_retry_with_new_key_conflicts(store: Store) -> None:
    """§14.20 / test 23: the cancellation slot keeps its first key."""
    run = await store.root()
    await store.runtime.RecordRunCancellation(run.cancellation_request())
    await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        run.cancellation_request(key="cancel-again"),
        CONFLICT,
        "RUN_CANCELLATION_CONFLICT",
        "run cancellation reason conflict",
    )


async def test_same_reason_same_key_different_record_is_event_conflict(store: Store) -> None:
    """§9.4.1 step 4: the reason matches, the record under the key does not."""
    run = await store.root()
    await store.runtime.RecordRunCancellation(run.cancellation_request())
    request = run.cancellation_request()
    request.record.timestamp.CopyFrom(ts(nanos(request.record.timestamp) // 1_000_000 + 1))
    failure = await rejects(
        store, run, store.runtime.RecordRunCancellation, request, CONFLICT, "EVENT_CONFLICT"
    )
    assert failure.message == f'run "{run.id}" event key "cancel": runlog: event conflict'
    assert failure.metadata["event_key"] == "cancel"


async def test_cancellation_key_used_by_another_record_is_event_conflict(store: Store) -> None:
    run = await store.root()
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record("note")))
    await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        run.cancellation_request(key="note"),
        CONFLICT,
        "EVENT_CONFLICT",
    )
    assert (await store.load(run.id)).cancellation_reason == ""


@pytest.mark.parametrize("terminal", [pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED])
async def test_cancelled_run_may_still_complete_or_fail(store: Store, terminal: int) -> None:
    """§10.1: a stored reason does not force a canceled ending (test 17)."""
    run = await store.root()
    await store.runtime.RecordRunCancellation(run.cancellation_request())
    result = await store.runtime.RecordRunTerminal(run.terminal_request(terminal))
    assert (result.id, result.inserted) == ("3", True)
    meta = await store.load(run.id)
    assert meta.status == terminal
    assert meta.cancellation_reason == lifecycle.REASON_USER_REQUESTED


async def test_canceled_terminal_must_repeat_the_requested_reason(store: Store) -> None:
    """§10.1 pairing 1; §14.21: engine_canceled after user_requested is rejected."""
    run = await store.root()
    await store.runtime.RecordRunCancellation(run.cancellation_request())
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_ENGINE_CANCELED),
        INVALID,
        "CONTRACT_VALIDATION",
    )
    assert failure.message == "terminal record cancellation reason does not match run"
    result = await store.runtime.RecordRunTerminal(
        run.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_USER_REQUESTED)
    )
    assert (result.id, result.inserted) == ("3", True)
    meta = await store.load(run.id)
    assert (meta.status, meta.cancellation_reason) == (
        pb.RUN_STATUS_CANCELED,
        lifecycle.REASON_USER_REQUESTED,
    )


async def test_canceled_terminal_without_request_must_say_engine_canceled(store: Store) -> None:
    """§10.1 pairing 3: no recorded request means engine_canceled, and the reason stays empty."""
    run = await store.root()
    await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_USER_REQUESTED),
        INVALID,
        "CONTRACT_VALIDATION",
        "terminal record cancellation reason does not match run",
    )
    result = await store.runtime.RecordRunTerminal(run.terminal_request(pb.RUN_STATUS_CANCELED))
    assert result.inserted
    meta = await store.load(run.id)
    assert (meta.status, meta.cancellation_reason) == (pb.RUN_STATUS_CANCELED, "")
    records = await store.records(run.id)
    assert [r.type for r in records] == [lifecycle.RUN_STARTED, lifecycle.RUN_COMPLETED]


@pytest.mark.parametrize("ending", ["completed", "suspended"])
async def test_cancellation_after_the_run_stopped_is_not_active(store: Store, ending: str) -> None:
    """§9.4.1 step 5: empty slot and a terminal (or suspended) run."""
    run = await store.root()
    if ending == "completed":
        await store.runtime.RecordRunTerminal(run.terminal_request())
    else:
        await store.runtime.RecordRunSuspension(run.suspension_request())
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        run.cancellation_request(),
        PRECONDITION,
        "RUN_NOT_ACTIVE",
    )
    assert failure.message == "run is not active"
    assert (await store.load(run.id)).cancellation_reason == ""


async def test_exact_cancellation_retry_after_the_run_ended_succeeds(store: Store) -> None:
    """§9.4.1 consequences: the exact retry survives the end; a new key does not."""
    run = await store.root()
    first = await store.runtime.RecordRunCancellation(run.cancellation_request())
    await store.runtime.RecordRunTerminal(
        run.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_USER_REQUESTED)
    )
    before = await snapshot(store, run)
    retry = await store.runtime.RecordRunCancellation(run.cancellation_request())
    assert (retry.id, retry.inserted) == (first.id, False)
    assert await snapshot(store, run) == before
    await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        run.cancellation_request(key="late-cancel"),
        CONFLICT,
        "RUN_CANCELLATION_CONFLICT",
    )


async def test_cancelled_run_can_still_suspend(store: Store) -> None:
    """A reason is not an ending: suspension is still allowed and keeps the reason."""
    run = await store.root()
    await store.runtime.RecordRunCancellation(run.cancellation_request())
    result = await store.runtime.RecordRunSuspension(run.suspension_request())
    assert (result.id, result.inserted) == ("3", True)
    meta = await store.load(run.id)
    assert (meta.status, meta.cancellation_reason) == (
        pb.RUN_STATUS_SUSPENDED,
        lifecycle.REASON_USER_REQUESTED,
    )


# --- RecordRunTerminal (§9.4.3) ---------------------------------------------------


async def test_terminal_ends_the_run_and_retry_keeps_updated_at(store: Store) -> None:
    """§14.17 / test 17: inserted once; the retry changes nothing."""
    run = await store.root()
    started = await store.load(run.id)
    result = await store.runtime.RecordRunTerminal(run.terminal_request())
    assert (result.id, result.inserted) == ("2", True)
    assert result.session_status == pb.SESSION_STATUS_ACTIVE
    meta = await store.load(run.id)
    assert meta.status == pb.RUN_STATUS_COMPLETED
    assert nanos(meta.updated_at) > nanos(started.updated_at)
    records = await store.records(run.id)
    assert [r.type for r in records] == [lifecycle.RUN_STARTED, lifecycle.RUN_COMPLETED]
    assert records[1].payload == run.completed().payload

    before = await snapshot(store, run)
    retry = await store.runtime.RecordRunTerminal(run.terminal_request())
    assert (retry.id, retry.inserted, retry.session_status) == ("2", False, result.session_status)
    assert await snapshot(store, run) == before


async def test_failed_terminal_on_a_sessionless_run(store: Store) -> None:
    run = await store.one_shot()
    result = await store.runtime.RecordRunTerminal(run.terminal_request(pb.RUN_STATUS_FAILED))
    assert (result.id, result.inserted) == ("2", True)
    assert result.session_status == pb.SESSION_STATUS_UNSPECIFIED
    assert (await store.load(run.id)).status == pb.RUN_STATUS_FAILED
    stored = (await store.records(run.id))[1]
    decoded = lifecycle.decode_run_completed(stored.payload)
    assert decoded.failure is not None and decoded.failure.kind == "internal"


@pytest.mark.parametrize("other", [pb.RUN_STATUS_FAILED, pb.RUN_STATUS_CANCELED])
async def test_terminal_with_other_status_after_completion_conflicts(
    store: Store, other: int
) -> None:
    """§9.4.3 step 3."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(other, key="second-ending"),
        CONFLICT,
        "RUN_TERMINAL_CONFLICT",
    )
    assert failure.message == "run terminal outcome conflict"
    # Same key, other status: still the status conflict, not the record conflict.
    await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(other),
        CONFLICT,
        "RUN_TERMINAL_CONFLICT",
    )


async def test_terminal_retry_with_new_key_conflicts(store: Store) -> None:
    """§14.20 / test 23: same status, new key."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(key="completed-again"),
        CONFLICT,
        "RUN_TERMINAL_CONFLICT",
        "run terminal outcome conflict",
    )


async def test_terminal_retry_with_changed_timestamp_is_event_conflict(store: Store) -> None:
    """§6.1: the timestamp is part of the record's identity."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    later = run.terminal_request(at_ms=nanos(run.start.started_at) // 1_000_000 + 2)
    failure = await rejects(
        store, run, store.runtime.RecordRunTerminal, later, CONFLICT, "EVENT_CONFLICT"
    )
    assert failure.message == f'run "{run.id}" event key "completed": runlog: event conflict'


async def test_terminal_key_used_by_an_ordinary_record_is_event_conflict(store: Store) -> None:
    """§9.4.3 step 4 on a running run: nothing is ended."""
    run = await store.root()
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record("completed")))
    await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(),
        CONFLICT,
        "EVENT_CONFLICT",
    )
    assert (await store.load(run.id)).status == pb.RUN_STATUS_RUNNING


async def test_terminal_record_labels_compare_as_maps(store: Store) -> None:
    """V7: the payload's label order does not matter; absent equals empty."""
    run = await store.root(labels={"b": "2", "a": "1"})
    request = run.terminal_request()
    request.record.payload = b'{"status":"success","phase":"completed","labels":{"b":"2","a":"1"}}'
    assert (await store.runtime.RecordRunTerminal(request)).inserted
    bare = await store.root(labels={})
    bare_request = bare.terminal_request()
    assert bare_request.record.payload == b'{"status":"success","phase":"completed"}'
    assert (await store.runtime.RecordRunTerminal(bare_request)).inserted


async def test_terminal_payload_trailing_whitespace_is_accepted_and_kept(store: Store) -> None:
    """§5.1 rule 1: whitespace after the object is allowed; bytes are stored as sent."""
    run = await store.root()
    request = run.terminal_request()
    request.record.payload = SUCCESS_PAYLOAD + b" \n"
    assert (await store.runtime.RecordRunTerminal(request)).inserted
    assert (await store.records(run.id))[1].payload == SUCCESS_PAYLOAD + b" \n"


# --- RecordRunSuspension and LoadRunSuspension (§9.4.2, §9.6.2) -----------------------


async def test_suspension_stores_exact_checkpoint_and_retry_keeps_updated_at(
    store: Store,
) -> None:
    """§14.18 / test 18."""
    run = await store.root()
    started = await store.load(run.id)
    data = b'\x00\xff{"state": 1}\n'
    result = await store.runtime.RecordRunSuspension(
        run.suspension_request(suspension_id="suspension", data=data)
    )
    assert (result.id, result.inserted) == ("2", True)
    assert result.session_status == pb.SESSION_STATUS_ACTIVE
    meta = await store.load(run.id)
    assert meta.status == pb.RUN_STATUS_SUSPENDED
    assert nanos(meta.updated_at) > nanos(started.updated_at)
    assert await checkpoint_of(store, run.id) == pb.Checkpoint(id="suspension", data=data)
    assert [r.type for r in await store.records(run.id)] == [
        lifecycle.RUN_STARTED,
        lifecycle.RUN_SUSPENDED,
    ]

    before = await snapshot(store, run)
    retry = await store.runtime.RecordRunSuspension(
        run.suspension_request(suspension_id="suspension", data=data)
    )
    assert (retry.id, retry.inserted) == ("2", False)
    assert await snapshot(store, run) == before


@pytest.mark.parametrize("change", ["id", "data"])
async def test_suspension_with_another_checkpoint_conflicts(store: Store, change: str) -> None:
    """§9.4.2 step 4 (before the record conflict of step 5)."""
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    request = (
        run.suspension_request(suspension_id="checkpoint-2")
        if change == "id"
        else run.suspension_request(data=b'{"s":2}')
    )
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunSuspension,
        request,
        CONFLICT,
        "RUN_SUSPENSION_CONFLICT",
    )
    assert failure.message == "run suspension conflict"
    assert await checkpoint_of(store, run.id) == pb.Checkpoint(id="checkpoint-1", data=b'{"s":1}')


async def test_suspension_retry_with_new_key_conflicts(store: Store) -> None:
    """§14.20 / test 23."""
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    await rejects(
        store,
        run,
        store.runtime.RecordRunSuspension,
        run.suspension_request(key="suspended-again"),
        CONFLICT,
        "RUN_SUSPENSION_CONFLICT",
        "run suspension conflict",
    )


async def test_suspension_retry_with_changed_timestamp_is_event_conflict(store: Store) -> None:
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    request = run.suspension_request()
    request.record.timestamp.seconds += 1
    await rejects(
        store, run, store.runtime.RecordRunSuspension, request, CONFLICT, "EVENT_CONFLICT"
    )


@pytest.mark.parametrize(
    "status", [pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED, pb.RUN_STATUS_CANCELED]
)
async def test_terminal_after_suspension_conflicts(store: Store, status: int) -> None:
    """§9.4.2 step 7: suspension fills the terminal slot too."""
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        run.terminal_request(status),
        CONFLICT,
        "RUN_TERMINAL_CONFLICT",
        "run terminal outcome conflict",
    )
    assert (await store.load(run.id)).status == pb.RUN_STATUS_SUSPENDED


async def test_suspension_after_completion_conflicts(store: Store) -> None:
    """§9.4.2 step 3."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await rejects(
        store,
        run,
        store.runtime.RecordRunSuspension,
        run.suspension_request(),
        CONFLICT,
        "RUN_TERMINAL_CONFLICT",
    )
    assert await checkpoint_of(store, run.id) is None


async def test_load_run_suspension_errors(store: Store) -> None:
    """§9.6.2: no checkpoint -> RUN_SUSPENSION_NOT_FOUND; unknown run -> RUN_NOT_FOUND."""
    run = await store.root()
    failure = await fails_with(
        store.runtime.LoadRunSuspension(rs.LoadRunSuspensionRequest(run_id=run.id)),
        NOT_FOUND,
        "RUN_SUSPENSION_NOT_FOUND",
    )
    assert failure.message == "run suspension not found"
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await fails_with(
        store.runtime.LoadRunSuspension(rs.LoadRunSuspensionRequest(run_id=run.id)),
        NOT_FOUND,
        "RUN_SUSPENSION_NOT_FOUND",
    )
    for missing in (unique("ghost"), ""):
        failure = await fails_with(
            store.runtime.LoadRunSuspension(rs.LoadRunSuspensionRequest(run_id=missing)),
            NOT_FOUND,
            "RUN_NOT_FOUND",
        )
        assert failure.message == "run not found"


# --- Repairs (§9.5) ----------------------------------------------------------------


class Ending:
    """One of the two endings a repair may store: what the workflow records,
    how its repair is asked, and the status either leaves."""

    def __init__(
        self,
        request: Callable[[Run], Any],
        repair: Callable[[Any], Any],
        record: str,
        status: int,
        stored: Callable[[Store, Run], Awaitable[None]] | None = None,
    ) -> None:
        self.request, self.repair, self.status = request, repair, status
        self.record_rpc, self.repair_rpc = f"Record{record}", f"Repair{record}"
        self.stored = stored

    async def record(self, store: Store, request: Any) -> Any:
        return await getattr(store.runtime, self.record_rpc)(request)

    async def repaired(self, store: Store, request: Any) -> Any:
        return await getattr(store.runtime, self.repair_rpc)(self.repair(request))


async def _holds_the_checkpoint(store: Store, run: Run) -> None:
    assert await checkpoint_of(store, run.id) == pb.Checkpoint(id="checkpoint-1", data=b'{"s":1}')


ENDINGS = [
    pytest.param(
        Ending(
            lambda run: run.terminal_request(),
            repair_terminal,
            "RunTerminal",
            pb.RUN_STATUS_COMPLETED,
        ),
        id="terminal",
    ),
    pytest.param(
        Ending(
            lambda run: run.suspension_request(),
            repair_suspension,
            "RunSuspension",
            pb.RUN_STATUS_SUSPENDED,
            stored=_holds_the_checkpoint,
        ),
        id="suspension",
    ),
]


@pytest.mark.parametrize("ending", ENDINGS)
async def test_a_repair_keeps_the_workflow_result(store: Store, ending: Ending) -> None:
    """§14.19 / tests 19 and 21: same key, timestamp +1 s -> different_terminal, no write."""
    run = await store.root()
    original = ending.request(run)
    await ending.record(store, original)
    before = await snapshot(store, run)
    later = ending.request(run)
    later.record.timestamp.seconds += 1
    result = await ending.repaired(store, later)
    assert result.outcome == pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL
    assert result.status == ending.status
    assert result.record == pb.AppendResult()
    assert await snapshot(store, run) == before
    records = await store.records(run.id)
    assert len(records) == 2
    assert records[1].timestamp == original.record.timestamp


@pytest.mark.parametrize("ending", ENDINGS)
async def test_a_repair_on_a_running_run_stores_then_reports_already_stored(
    store: Store, ending: Ending
) -> None:
    """§14.19 / tests 20 and 22."""
    run = await store.root()
    first = await ending.repaired(store, ending.request(run))
    assert (first.outcome, first.status) == (pb.RUN_REPAIR_OUTCOME_STORED, ending.status)
    assert (first.record.id, first.record.inserted) == ("2", True)
    assert first.record.session_status == pb.SESSION_STATUS_ACTIVE
    assert (await store.load(run.id)).status == ending.status
    if ending.stored is not None:
        await ending.stored(store, run)

    before = await snapshot(store, run)
    retry = await ending.repaired(store, ending.request(run))
    assert (retry.outcome, retry.status) == (pb.RUN_REPAIR_OUTCOME_ALREADY_STORED, ending.status)
    assert (retry.record.id, retry.record.inserted) == ("2", False)
    assert retry.record.session_status == first.record.session_status
    assert await snapshot(store, run) == before
    # The workflow's own retry of the same ending is an exact retry too.
    again = await ending.record(store, ending.request(run))
    assert (again.id, again.inserted) == ("2", False)


async def test_repair_terminal_never_overrides_another_ending(store: Store) -> None:
    """§9.5.1 step 2: other status or other key -> different_terminal, no error."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request(pb.RUN_STATUS_FAILED))
    before = await snapshot(store, run)
    for request in (
        run.terminal_request(),
        run.terminal_request(pb.RUN_STATUS_FAILED, key="repair-ending"),
        run.terminal_request(pb.RUN_STATUS_CANCELED, key="repair-cancel"),
    ):
        result = await store.runtime.RepairRunTerminal(repair_terminal(request))
        assert (result.outcome, result.status) == (
            pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL,
            pb.RUN_STATUS_FAILED,
        )
        assert result.record == pb.AppendResult()
    assert await snapshot(store, run) == before


async def test_repair_terminal_on_suspended_run_is_different_terminal(store: Store) -> None:
    """§9.5.1 step 2: status SUSPENDED, nothing written."""
    run = await store.root()
    await store.runtime.RecordRunSuspension(run.suspension_request())
    before = await snapshot(store, run)
    result = await store.runtime.RepairRunTerminal(repair_terminal(run.terminal_request()))
    assert (result.outcome, result.status) == (
        pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL,
        pb.RUN_STATUS_SUSPENDED,
    )
    assert result.record == pb.AppendResult()
    assert await snapshot(store, run) == before


async def test_repair_terminal_of_a_stop_run_recognises_its_own_completion(
    store: Store,
) -> None:
    """§9.2.1, §10.1: an ended-session start already stored its canceled completion."""
    session = await store.session()
    await store.end(session)
    run = run_start(session_id=session)
    await store.runtime.StartRootRun(run.root_request())
    result = await store.runtime.RepairRunTerminal(
        rs.RepairRunTerminalRequest(
            run_id=run.id, status=pb.RUN_STATUS_CANCELED, record=canceled_record(run.start)
        )
    )
    assert (result.outcome, result.status) == (
        pb.RUN_REPAIR_OUTCOME_ALREADY_STORED,
        pb.RUN_STATUS_CANCELED,
    )
    assert (result.record.id, result.record.inserted) == ("2", False)
    assert result.record.session_status == pb.SESSION_STATUS_ENDED


async def test_repair_terminal_on_running_run_checks_the_record_key(store: Store) -> None:
    """§9.5.1 step 3: the event-conflict check applies while the run is running."""
    run = await store.root()
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record("completed")))
    await rejects(
        store,
        run,
        store.runtime.RepairRunTerminal,
        repair_terminal(run.terminal_request()),
        CONFLICT,
        "EVENT_CONFLICT",
    )


async def test_repair_suspension_never_overrides_another_ending(store: Store) -> None:
    """§9.5.2: other checkpoint bytes, other key, or a completed run -> different_terminal."""
    suspended = await store.root()
    await store.runtime.RecordRunSuspension(suspended.suspension_request())
    before = await snapshot(store, suspended)
    for request in (
        suspended.suspension_request(data=b'{"s":2}'),
        suspended.suspension_request(key="repair-suspended"),
    ):
        result = await store.runtime.RepairRunSuspension(repair_suspension(request))
        assert (result.outcome, result.status) == (
            pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL,
            pb.RUN_STATUS_SUSPENDED,
        )
        assert result.record == pb.AppendResult()
    assert await snapshot(store, suspended) == before

    completed = await store.root()
    await store.runtime.RecordRunTerminal(completed.terminal_request())
    before = await snapshot(store, completed)
    result = await store.runtime.RepairRunSuspension(
        repair_suspension(completed.suspension_request())
    )
    assert (result.outcome, result.status) == (
        pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL,
        pb.RUN_STATUS_COMPLETED,
    )
    assert result.record == pb.AppendResult()
    assert await snapshot(store, completed) == before


async def test_repairs_still_raise_validation_errors(store: Store) -> None:
    """§9.5.1 step 1: validation runs before the terminal check."""
    run = await store.root()
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await rejects(
        store,
        run,
        store.runtime.RepairRunTerminal,
        repair_terminal(
            run.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_USER_REQUESTED)
        ),
        INVALID,
        "CONTRACT_VALIDATION",
        "terminal record cancellation reason does not match run",
    )
    await rejects(
        store,
        run,
        store.runtime.RepairRunTerminal,
        repair_terminal(run.terminal_request(labels={"site": "two"})),
        INVALID,
        "CONTRACT_VALIDATION",
        "terminal record labels do not match run",
    )
    mismatched = repair_suspension(run.suspension_request())
    mismatched.suspension.id = "other-checkpoint"
    await rejects(
        store,
        run,
        store.runtime.RepairRunSuspension,
        mismatched,
        INVALID,
        "CONTRACT_VALIDATION",
        "suspension record does not match checkpoint",
    )
    terminal_status = repair_terminal(run.terminal_request())
    terminal_status.status = pb.RUN_STATUS_SUSPENDED
    await rejects(
        store,
        run,
        store.runtime.RepairRunTerminal,
        terminal_status,
        INVALID,
        "CONTRACT_VALIDATION",
        "run terminal requires completed, failed, or canceled status",
    )


# --- Contradictory typed records (§14.21, test 24) -----------------------------------


async def test_cancellation_record_reason_must_match_command(store: Store) -> None:
    run = await store.root()
    request = run.cancellation_request()
    request.reason = lifecycle.REASON_SESSION_ENDED
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        request,
        INVALID,
        "CONTRACT_VALIDATION",
    )
    assert failure.message == "cancellation record reason does not match command"
    assert (await store.load(run.id)).cancellation_reason == ""


async def test_suspension_record_must_name_the_checkpoint(store: Store) -> None:
    run = await store.root()
    request = run.suspension_request()
    request.suspension.id = "checkpoint-2"
    failure = await rejects(
        store, run, store.runtime.RecordRunSuspension, request, INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.message == "suspension record does not match checkpoint"


@pytest.mark.parametrize(
    ("command", "payload_status"),
    [
        (pb.RUN_STATUS_COMPLETED, "failed"),
        (pb.RUN_STATUS_FAILED, "success"),
        (pb.RUN_STATUS_CANCELED, "success"),
        (pb.RUN_STATUS_COMPLETED, "canceled"),
    ],
)
async def test_terminal_record_outcome_must_match_command(
    store: Store, command: int, payload_status: str
) -> None:
    run = await store.root()
    reason = lifecycle.REASON_ENGINE_CANCELED if payload_status == "canceled" else None
    request = terminal(run, command, payload_status, reason)
    failure = await rejects(
        store, run, store.runtime.RecordRunTerminal, request, INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.message == "terminal record outcome does not match command"


async def test_terminal_record_phase_must_match_status(store: Store) -> None:
    """§5.3: the phase must be the mapped phase."""
    run = await store.root()
    request = run.terminal_request()
    request.record.payload = b'{"status":"success","phase":"synthesizing","labels":{"site":"one"}}'
    await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        request,
        INVALID,
        "CONTRACT_VALIDATION",
        "terminal record outcome does not match command",
    )


async def test_terminal_record_labels_must_match_run(store: Store) -> None:
    run = await store.root()
    for labels in ({"site": "two"}, {}, {"site": "one", "extra": "x"}):
        failure = await rejects(
            store,
            run,
            store.runtime.RecordRunTerminal,
            run.terminal_request(labels=labels),
            INVALID,
            "CONTRACT_VALIDATION",
        )
        assert failure.message == "terminal record labels do not match run"


# --- Validation of the command itself ---------------------------------------------


async def test_cancellation_requires_a_reason(store: Store) -> None:
    run = await store.root()
    request = run.cancellation_request()
    request.reason = ""
    failure = await rejects(
        store, run, store.runtime.RecordRunCancellation, request, INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.message == "run cancellation requires run id and reason"


@pytest.mark.parametrize("missing", ["id", "data", "checkpoint"])
async def test_suspension_requires_checkpoint_id_and_data(store: Store, missing: str) -> None:
    run = await store.root()
    request = run.suspension_request()
    if missing == "id":
        request.suspension.id = ""
    elif missing == "data":
        request.suspension.data = b""
    else:
        request.ClearField("suspension")
    for method, call in (
        (store.runtime.RecordRunSuspension, request),
        (store.runtime.RepairRunSuspension, repair_suspension(request)),
    ):
        failure = await rejects(store, run, method, call, INVALID, "CONTRACT_VALIDATION")
        assert failure.message == "run suspension requires run id, suspension id, and data"


@pytest.mark.parametrize(
    "status",
    [pb.RUN_STATUS_SUSPENDED, pb.RUN_STATUS_UNSPECIFIED, pb.RUN_STATUS_RUNNING, 99],
)
async def test_terminal_requires_a_terminal_status(store: Store, status: int) -> None:
    run = await store.root()
    request = run.terminal_request()
    request.status = status
    for method, call in (
        (store.runtime.RecordRunTerminal, request),
        (store.runtime.RepairRunTerminal, repair_terminal(request)),
    ):
        failure = await rejects(store, run, method, call, INVALID, "CONTRACT_VALIDATION")
        assert failure.message == "run terminal requires completed, failed, or canceled status"


def _requests(run: Run) -> dict[str, Any]:
    return {
        "RecordRunCancellation": run.cancellation_request(),
        "RecordRunSuspension": run.suspension_request(),
        "RecordRunTerminal": run.terminal_request(),
        "RepairRunSuspension": repair_suspension(run.suspension_request()),
        "RepairRunTerminal": repair_terminal(run.terminal_request()),
    }


LIFECYCLE_METHODS = [
    "RecordRunCancellation",
    "RecordRunSuspension",
    "RecordRunTerminal",
    "RepairRunSuspension",
    "RepairRunTerminal",
]


@pytest.mark.parametrize("method", LIFECYCLE_METHODS)
@pytest.mark.parametrize("run_id", ["", "unknown"])
async def test_lifecycle_commands_on_missing_runs_are_run_not_found(
    store: Store, method: str, run_id: str
) -> None:
    """§9.4 preamble: the run is loaded before validation, so even
    the empty run ID is RUN_NOT_FOUND rather than a validation error."""
    run = await store.root()
    request = _requests(run)[method]
    request.run_id = unique("ghost") if run_id == "unknown" else ""
    if not run_id and method == "RecordRunCancellation":
        request.reason = ""  # would also fail validation; the lookup comes first
    failure = await rejects(
        store, run, getattr(store.runtime, method), request, NOT_FOUND, "RUN_NOT_FOUND"
    )
    assert failure.message == "run not found"


@pytest.mark.parametrize(
    ("method", "prefix"),
    [
        ("RecordRunCancellation", "cancellation record: "),
        ("RecordRunSuspension", "suspension record: "),
        ("RecordRunTerminal", "terminal record: "),
        ("RepairRunSuspension", "suspension record: "),
        ("RepairRunTerminal", "terminal record: "),
    ],
)
@pytest.mark.parametrize("owner_field", ["session_id", "agent_id", "run_id"])
async def test_lifecycle_record_must_belong_to_the_run(
    store: Store, method: str, prefix: str, owner_field: str
) -> None:
    """§14.16 / test 16: a record claiming another owner is an owner mismatch."""
    session = await store.session()
    run = await store.root(session_id=session)
    other = await store.root(session_id=session, agent_id="other-agent")
    request = _requests(run)[method]
    if owner_field == "session_id":
        request.record.session_id = await store.session()
    elif owner_field == "agent_id":
        request.record.agent_id = "other-agent"
    else:
        request.record.run_id = other.id
    failure = await rejects(
        store,
        run,
        getattr(store.runtime, method),
        request,
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    assert failure.message == prefix + "run record owner does not match stored run"
    assert len(await store.records(other.id)) == 1


async def test_terminal_record_of_another_session_is_owner_mismatch(store: Store) -> None:
    """§14.16 exactly: RecordRunTerminal whose record carries the wrong session."""
    run = await store.root()
    request = run.terminal_request()
    request.record.session_id = unique("session")
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunTerminal,
        request,
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    assert failure.message == "terminal record: run record owner does not match stored run"
    assert (await store.load(run.id)).status == pb.RUN_STATUS_RUNNING


@pytest.mark.parametrize(
    ("method", "message"),
    [
        (
            "RecordRunCancellation",
            'cancellation record has type "note", want "runtime.cancellation_intent"',
        ),
        ("RecordRunSuspension", 'suspension record: record has type "note", want "run_suspended"'),
        ("RecordRunTerminal", 'terminal record: record has type "note", want "run_completed"'),
    ],
)
async def test_lifecycle_record_must_have_the_lifecycle_type(
    store: Store, method: str, message: str
) -> None:
    run = await store.root()
    request = _requests(run)[method]
    request.record.type = "note"
    failure = await rejects(
        store, run, getattr(store.runtime, method), request, INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.message == message


@pytest.mark.parametrize(
    ("method", "prefix"),
    [
        ("RecordRunCancellation", "cancellation record: "),
        ("RecordRunSuspension", "suspension record: "),
        ("RecordRunTerminal", "terminal record: "),
    ],
)
@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("missing", "run record is required"),
        ("event_key", "event key is required"),
        ("payload", "record payload is required"),
        ("timestamp", "record timestamp is required"),
        ("go_zero_timestamp", "record timestamp is required"),
        ("sub_millisecond", "record timestamp must use millisecond precision"),
    ],
)
async def test_lifecycle_record_envelope_is_validated(
    store: Store, method: str, prefix: str, breakage: str, message: str
) -> None:
    """V1 with the upstream prefixes (facts §3.6–§3.8, §3.12)."""
    run = await store.root()
    request = _requests(run)[method]
    if breakage == "missing":
        request.ClearField("record")
    elif breakage == "event_key":
        request.record.event_key = ""
    elif breakage == "payload":
        request.record.payload = b""
    elif breakage == "timestamp":
        request.record.ClearField("timestamp")
    elif breakage == "go_zero_timestamp":
        request.record.timestamp.seconds = -62135596800
        request.record.timestamp.nanos = 0
    else:
        request.record.timestamp.nanos += 1
    failure = await rejects(
        store, run, getattr(store.runtime, method), request, INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.message == prefix + message


async def test_lifecycle_record_timestamp_out_of_range_names_the_field(store: Store) -> None:
    """Times must be ones a google.protobuf.Timestamp carries (years 1 to 9999)."""
    run = await store.root()
    request = run.terminal_request()
    request.record.timestamp.seconds = 253_402_300_800  # year 10000
    failure = await rejects(
        store, run, store.runtime.RecordRunTerminal, request, INVALID, "CONTRACT_VALIDATION"
    )
    assert "record.timestamp" in failure.message
    assert failure.metadata["field"] == "record.timestamp"


# --- Strict lifecycle payloads (§5.1, D2) ----------------------------------------------


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (
            pb.RUN_STATUS_COMPLETED,
            SUCCESS_PAYLOAD[:-1] + b',"note":"x"}',
            'json: unknown field "note"',
        ),
        (
            pb.RUN_STATUS_FAILED,
            b'{"status":"failed","phase":"failed","failure":{"message":"boom","kind":"internal",'
            b'"retryable":false,"extra":1},"labels":{"site":"one"}}',
            'json: unknown field "extra"',
        ),
        (
            pb.RUN_STATUS_CANCELED,
            b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"engine_canceled",'
            b'"by":"x"},"labels":{"site":"one"}}',
            'json: unknown field "by"',
        ),
        (
            pb.RUN_STATUS_COMPLETED,
            b'{"Status":"success","phase":"completed","labels":{"site":"one"}}',
            'json: unknown field "Status"',
        ),
        (
            pb.RUN_STATUS_COMPLETED,
            b'{"status":"success","status":"success","phase":"completed","labels":{"site":"one"}}',
            "duplicate",
        ),
        (pb.RUN_STATUS_COMPLETED, SUCCESS_PAYLOAD + b" {}", "multiple JSON values"),
        (pb.RUN_STATUS_COMPLETED, SUCCESS_PAYLOAD + b"1", "multiple JSON values"),
        (
            pb.RUN_STATUS_COMPLETED,
            SUCCESS_PAYLOAD + b"x",
            "invalid character 'x' looking for beginning of value",
        ),
        (pb.RUN_STATUS_COMPLETED, b"null", "null"),
        (
            pb.RUN_STATUS_COMPLETED,
            b'{"status":"success","phase":"completed","labels":{"site":"\xff"}}',
            "invalid UTF-8",
        ),
        (
            pb.RUN_STATUS_FAILED,
            b'{"status":"failed","phase":"failed","failure":{"message":"boom","retryable":false},'
            b'"labels":{"site":"one"}}',
            "failed run completion requires failure kind",
        ),
        (
            pb.RUN_STATUS_FAILED,
            b'{"status":"failed","phase":"failed","labels":{"site":"one"}}',
            "failed run completion requires failure payload",
        ),
        (
            pb.RUN_STATUS_CANCELED,
            b'{"status":"canceled","phase":"canceled","labels":{"site":"one"}}',
            "canceled run completion requires cancellation payload",
        ),
        (
            pb.RUN_STATUS_COMPLETED,
            b'{"status":"success","phase":"completed","cancellation":{"reason":"x"},'
            b'"labels":{"site":"one"}}',
            "successful run completion must not carry terminal outcome payload",
        ),
        (
            pb.RUN_STATUS_COMPLETED,
            b'{"status":"done","phase":"completed","labels":{"site":"one"}}',
            'unexpected run completion status "done"',
        ),
        (pb.RUN_STATUS_COMPLETED, b'{"status":"success"', ""),
        (pb.RUN_STATUS_COMPLETED, b"[]", ""),
        (
            pb.RUN_STATUS_COMPLETED,
            b'{"status":1,"phase":"completed","labels":{"site":"one"}}',
            "json: cannot unmarshal number into",
        ),
    ],
    ids=[
        "unknown-key",
        "unknown-failure-key",
        "unknown-cancellation-key",
        "non-canonical-case",
        "duplicate-key",
        "trailing-object",
        "trailing-number",
        "trailing-garbage",
        "top-level-null",
        "invalid-utf8",
        "failure-without-kind",
        "failed-without-failure",
        "canceled-without-cancellation",
        "success-with-cancellation",
        "unknown-status",
        "truncated",
        "array",
        "wrong-type",
    ],
)
async def test_run_completed_payload_is_decoded_strictly(
    store: Store, status: int, payload: bytes, message: str
) -> None:
    run = await store.root()
    request = run.terminal_request(status)
    request.record.payload = payload
    for method, call in (
        (store.runtime.RecordRunTerminal, request),
        (store.runtime.RepairRunTerminal, repair_terminal(request)),
    ):
        failure = await rejects(store, run, method, call, INVALID, "CONTRACT_VALIDATION", message)
        assert failure.message.startswith("terminal record: decode run_completed payload: ")
        assert failure.metadata["field"] == "record.payload"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (SUSPENDED_PAYLOAD[:-1] + b',"Extra":1}', 'json: unknown field "Extra"'),
        (
            b'{"suspensionID":"checkpoint-1","Version":"v6","PendingCount":1,"RequiredTools":null}',
            'json: unknown field "suspensionID"',
        ),
        (
            b'{"SuspensionID":"checkpoint-1","SuspensionID":"checkpoint-1","Version":"v6",'
            b'"PendingCount":1,"RequiredTools":null}',
            "duplicate",
        ),
        (SUSPENDED_PAYLOAD + b"{}", "multiple JSON values"),
        (SUSPENDED_PAYLOAD + b" x", "invalid character 'x' looking for beginning of value"),
        (b"null", "null"),
        (
            b'{"SuspensionID":"checkpoint-1","Version":"v\xc3","PendingCount":1,'
            b'"RequiredTools":null}',
            "invalid UTF-8",
        ),
        (
            b'{"SuspensionID":"checkpoint-1","Version":"v6","PendingCount":"1",'
            b'"RequiredTools":null}',
            "json: cannot unmarshal string into",
        ),
    ],
    ids=[
        "unknown-key",
        "non-canonical-case",
        "duplicate-key",
        "trailing-object",
        "trailing-garbage",
        "top-level-null",
        "invalid-utf8",
        "wrong-type",
    ],
)
async def test_run_suspended_payload_is_decoded_strictly(
    store: Store, payload: bytes, message: str
) -> None:
    run = await store.root()
    request = run.suspension_request()
    assert request.record.payload == SUSPENDED_PAYLOAD
    request.record.payload = payload
    for method, call in (
        (store.runtime.RecordRunSuspension, request),
        (store.runtime.RepairRunSuspension, repair_suspension(request)),
    ):
        failure = await rejects(store, run, method, call, INVALID, "CONTRACT_VALIDATION", message)
        assert failure.message.startswith("suspension record: decode run_suspended payload: ")
    assert await checkpoint_of(store, run.id) is None


@pytest.mark.parametrize(
    "payload",
    [
        b'{"reason":"user_requested","requested_by":"alice","extra":{"a":[1,2]}}',
        b'{"Reason":"user_requested"}',
        b'{"REASON":"user_requested"}',
        b'{"reason":"user_requested"}\n',
    ],
    ids=["unknown-keys", "capitalised-key", "upper-case-key", "trailing-newline"],
)
async def test_cancellation_payload_is_decoded_leniently(store: Store, payload: bytes) -> None:
    """§5.6: unknown keys ignored, key case ignored; the bytes are stored as sent."""
    run = await store.root()
    request = run.cancellation_request()
    request.record.payload = payload
    result = await store.runtime.RecordRunCancellation(request)
    assert result.inserted
    assert (await store.records(run.id))[1].payload == payload
    assert (await store.load(run.id)).cancellation_reason == lifecycle.REASON_USER_REQUESTED


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"reason":"user_requested"}{}', "decode cancellation record: multiple JSON values"),
        (b'{"reason":"user_requested"} 1', "decode cancellation record: multiple JSON values"),
        (b'{"reason":"user_requested"', "decode cancellation record: "),
        (b'{"reason":"session_ended"}', "cancellation record reason does not match command"),
        (b'{"other":"user_requested"}', "cancellation record reason does not match command"),
    ],
    ids=["trailing-object", "trailing-number", "truncated", "other-reason", "no-reason"],
)
async def test_cancellation_payload_rejections(store: Store, payload: bytes, message: str) -> None:
    run = await store.root()
    request = run.cancellation_request()
    request.record.payload = payload
    failure = await rejects(
        store,
        run,
        store.runtime.RecordRunCancellation,
        request,
        INVALID,
        "CONTRACT_VALIDATION",
        message,
    )
    assert failure.message.startswith(message)
