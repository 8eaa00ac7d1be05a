"""Protobuf messages <-> store core values, one function per type.

Absent messages become ``None`` so that validation can name what is missing.
A timestamp equal to Go's zero time (0001-01-01T00:00:00Z) also counts as
absent: that is what a Go client sends for an unset ``time.Time``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.contract.errors import ValidationError
from runstore.server.core import model, validation
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb

GO_ZERO_TIME_SECONDS: Final = -62135596800
_NANOS_PER_SECOND: Final = 1_000_000_000

SESSION_STATUS_TO_WIRE: Final[Mapping[model.SessionStatus | None, pb.SessionStatus.ValueType]] = {
    None: pb.SESSION_STATUS_UNSPECIFIED,
    model.SessionStatus.ACTIVE: pb.SESSION_STATUS_ACTIVE,
    model.SessionStatus.ENDED: pb.SESSION_STATUS_ENDED,
}
RUN_STATUS_TO_WIRE: Final[Mapping[model.RunStatus, pb.RunStatus.ValueType]] = {
    model.RunStatus.RUNNING: pb.RUN_STATUS_RUNNING,
    model.RunStatus.SUSPENDED: pb.RUN_STATUS_SUSPENDED,
    model.RunStatus.COMPLETED: pb.RUN_STATUS_COMPLETED,
    model.RunStatus.FAILED: pb.RUN_STATUS_FAILED,
    model.RunStatus.CANCELED: pb.RUN_STATUS_CANCELED,
}
RUN_STATUS_FROM_WIRE: Final[Mapping[int, model.RunStatus]] = {
    wire: status for status, wire in RUN_STATUS_TO_WIRE.items()
}
START_OUTCOME_TO_WIRE: Final[Mapping[model.StartOutcome, pb.RunStartOutcome.ValueType]] = {
    model.StartOutcome.PROCEED: pb.RUN_START_OUTCOME_PROCEED,
    model.StartOutcome.STOP: pb.RUN_START_OUTCOME_STOP,
}
REPAIR_OUTCOME_TO_WIRE: Final[Mapping[model.RepairOutcome, pb.RunRepairOutcome.ValueType]] = {
    model.RepairOutcome.STORED: pb.RUN_REPAIR_OUTCOME_STORED,
    model.RepairOutcome.ALREADY_STORED: pb.RUN_REPAIR_OUTCOME_ALREADY_STORED,
    model.RepairOutcome.DIFFERENT_TERMINAL: pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL,
}


# --- Times ------------------------------------------------------------------


def nanos_from_wire(message: Any, name: str, field: str) -> model.Nanos | None:
    """The timestamp field ``name`` of ``message`` in nanoseconds, or None if absent."""
    if not message.HasField(name):
        return None
    stamp: Timestamp = getattr(message, name)
    if stamp.seconds == GO_ZERO_TIME_SECONDS and stamp.nanos == 0:
        return None
    if not 0 <= stamp.nanos < _NANOS_PER_SECOND:
        raise ValidationError(f"{field} is not a valid timestamp (nanos out of range)", field=field)
    return validation.check_time_range(stamp.seconds * _NANOS_PER_SECOND + stamp.nanos, field)


def timestamp_to_wire(nanos: model.Nanos) -> Timestamp:
    seconds, remainder = divmod(nanos, _NANOS_PER_SECOND)
    return Timestamp(seconds=seconds, nanos=remainder)


# --- Commands in ------------------------------------------------------------


def record_from_wire(parent: Any, name: str) -> model.Record | None:
    """The RunRecord field ``name`` of ``parent``; the ID is ignored (§3.7)."""
    if not parent.HasField(name):
        return None
    message: pb.RunRecord = getattr(parent, name)
    return model.Record(
        event_key=message.event_key,
        run_id=message.run_id,
        agent_id=message.agent_id,
        session_id=message.session_id,
        turn_id=message.turn_id,
        type=message.type,
        payload=message.payload,
        timestamp=nanos_from_wire(message, "timestamp", f"{name}.timestamp"),
    )


def run_start_from_wire(request: Any) -> model.RunStart:
    message: pb.RunStart = request.run
    return model.RunStart(
        run_id=message.run_id,
        agent_id=message.agent_id,
        session_id=message.session_id,
        parent_run_id=message.parent_run_id,
        predecessor_run_id=message.predecessor_run_id,
        started_at=nanos_from_wire(message, "started_at", "run.started_at"),
        labels=dict(message.labels),
    )


def root_run_start(request: rs.StartRootRunRequest) -> model.RootRunStart:
    return model.RootRunStart(
        run=run_start_from_wire(request),
        started=record_from_wire(request, "started"),
        canceled=record_from_wire(request, "canceled"),
    )


def child_run_start(request: rs.StartChildRunRequest) -> model.ChildRunStart:
    return model.ChildRunStart(
        run=run_start_from_wire(request),
        parent_linked=record_from_wire(request, "parent_linked"),
        started=record_from_wire(request, "started"),
        canceled=record_from_wire(request, "canceled"),
    )


def one_shot_run_start(request: rs.StartOneShotRunRequest) -> model.OneShotRunStart:
    return model.OneShotRunStart(
        run=run_start_from_wire(request), started=record_from_wire(request, "started")
    )


def one_shot_child_run_start(
    request: rs.StartOneShotChildRunRequest,
) -> model.OneShotChildRunStart:
    return model.OneShotChildRunStart(
        run=run_start_from_wire(request),
        parent_linked=record_from_wire(request, "parent_linked"),
        started=record_from_wire(request, "started"),
    )


def run_cancellation(request: rs.RecordRunCancellationRequest) -> model.RunCancellation:
    return model.RunCancellation(
        run_id=request.run_id, reason=request.reason, record=record_from_wire(request, "record")
    )


def run_suspension(
    request: rs.RecordRunSuspensionRequest | rs.RepairRunSuspensionRequest,
) -> model.RunSuspension:
    suspension = (
        model.Checkpoint(request.suspension.id, request.suspension.data)
        if request.HasField("suspension")
        else None
    )
    return model.RunSuspension(
        run_id=request.run_id, suspension=suspension, record=record_from_wire(request, "record")
    )


def run_terminal(
    request: rs.RecordRunTerminalRequest | rs.RepairRunTerminalRequest,
) -> model.RunTerminal:
    return model.RunTerminal(
        run_id=request.run_id,
        status=RUN_STATUS_FROM_WIRE.get(request.status),
        record=record_from_wire(request, "record"),
    )


def run_statuses_from_wire(statuses: Any) -> set[model.RunStatus] | None:
    """An empty filter lists every run; unknown values match nothing (§9.1.6)."""
    if not statuses:
        return None
    return {RUN_STATUS_FROM_WIRE[value] for value in statuses if value in RUN_STATUS_FROM_WIRE}


# --- Results out ------------------------------------------------------------


def append_result_to_wire(result: model.AppendResult) -> pb.AppendResult:
    return pb.AppendResult(
        id=result.id,
        inserted=result.inserted,
        session_status=SESSION_STATUS_TO_WIRE[result.session_status],
    )


def append_fields(result: model.AppendResult) -> dict[str, Any]:
    """An AppendResult spelled as the fields of a flat response message."""
    return {
        "id": result.id,
        "inserted": result.inserted,
        "session_status": SESSION_STATUS_TO_WIRE[result.session_status],
    }


def session_to_wire(session: model.Session) -> pb.Session:
    message = pb.Session(
        id=session.id,
        status=SESSION_STATUS_TO_WIRE[session.status],
        created_at=timestamp_to_wire(session.created_at),
    )
    if session.ended_at is not None:
        message.ended_at.CopyFrom(timestamp_to_wire(session.ended_at))
    return message


def run_to_wire(run: model.Run) -> pb.RunMeta:
    return pb.RunMeta(
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        parent_run_id=run.parent_run_id,
        started_at=timestamp_to_wire(run.started_at),
        labels=run.labels,
        start_outcome=START_OUTCOME_TO_WIRE[run.start_outcome],
        status=RUN_STATUS_TO_WIRE[run.status],
        cancellation_reason=run.cancellation_reason,
        updated_at=timestamp_to_wire(run.updated_at),
    )


def record_to_wire(record: model.StoredRecord) -> pb.RunRecord:
    return pb.RunRecord(
        id=str(record.id),
        event_key=record.event_key,
        run_id=record.run_id,
        agent_id=record.agent_id,
        session_id=record.session_id,
        turn_id=record.turn_id,
        type=record.type,
        payload=record.payload,
        timestamp=timestamp_to_wire(record.timestamp),
    )
