"""Client values <-> protobuf messages, one function pair per type."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.client import model
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

SESSION_STATUS: Final[Mapping[int, model.SessionStatus]] = {
    pb.SESSION_STATUS_ACTIVE: model.SessionStatus.ACTIVE,
    pb.SESSION_STATUS_ENDED: model.SessionStatus.ENDED,
}
RUN_STATUS: Final[Mapping[int, model.RunStatus]] = {
    pb.RUN_STATUS_RUNNING: model.RunStatus.RUNNING,
    pb.RUN_STATUS_SUSPENDED: model.RunStatus.SUSPENDED,
    pb.RUN_STATUS_COMPLETED: model.RunStatus.COMPLETED,
    pb.RUN_STATUS_FAILED: model.RunStatus.FAILED,
    pb.RUN_STATUS_CANCELED: model.RunStatus.CANCELED,
}
RUN_STATUS_TO_WIRE: Final[Mapping[model.RunStatus, pb.RunStatus.ValueType]] = {
    model.RunStatus.RUNNING: pb.RUN_STATUS_RUNNING,
    model.RunStatus.SUSPENDED: pb.RUN_STATUS_SUSPENDED,
    model.RunStatus.COMPLETED: pb.RUN_STATUS_COMPLETED,
    model.RunStatus.FAILED: pb.RUN_STATUS_FAILED,
    model.RunStatus.CANCELED: pb.RUN_STATUS_CANCELED,
}
START_OUTCOME: Final[Mapping[int, model.RunStartOutcome]] = {
    pb.RUN_START_OUTCOME_PROCEED: model.RunStartOutcome.PROCEED,
    pb.RUN_START_OUTCOME_STOP: model.RunStartOutcome.STOP,
}
REPAIR_OUTCOME: Final[Mapping[int, model.RunRepairOutcome]] = {
    pb.RUN_REPAIR_OUTCOME_STORED: model.RunRepairOutcome.STORED,
    pb.RUN_REPAIR_OUTCOME_ALREADY_STORED: model.RunRepairOutcome.ALREADY_STORED,
    pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL: model.RunRepairOutcome.DIFFERENT_TERMINAL,
}


# --- Times --------------------------------------------------------------------


def timestamp(moment: datetime) -> Timestamp:
    """A protobuf Timestamp of an aware ``datetime`` (naive values are rejected:
    the contract's times are instants)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamps must be timezone-aware (UTC), got naive {moment!r}")
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    seconds, remainder = divmod(micros, 1_000_000)
    return Timestamp(seconds=seconds, nanos=remainder * 1000)


def from_timestamp(stamp: Timestamp) -> datetime:
    """A UTC ``datetime``; sub-microsecond digits (full-precision session times)
    are truncated, as ``datetime`` cannot hold them."""
    return _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)


# --- Values -----------------------------------------------------------------------


def run_start(run: model.RunStart) -> pb.RunStart:
    return pb.RunStart(
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        parent_run_id=run.parent_run_id,
        predecessor_run_id=run.predecessor_run_id,
        started_at=timestamp(run.started_at),
        labels=dict(run.labels),
    )


def record(value: model.RunRecord) -> pb.RunRecord:
    return pb.RunRecord(
        event_key=value.event_key,
        run_id=value.run_id,
        agent_id=value.agent_id,
        session_id=value.session_id,
        turn_id=value.turn_id,
        type=value.type,
        payload=value.payload,
        timestamp=timestamp(value.timestamp),
    )


def from_record(message: pb.RunRecord) -> model.RunRecord:
    return model.RunRecord(
        id=message.id,
        event_key=message.event_key,
        run_id=message.run_id,
        agent_id=message.agent_id,
        session_id=message.session_id,
        turn_id=message.turn_id,
        type=message.type,
        payload=message.payload,
        timestamp=from_timestamp(message.timestamp),
    )


def from_records(messages: Iterable[pb.RunRecord]) -> tuple[model.RunRecord, ...]:
    return tuple(from_record(message) for message in messages)


def from_append_result(message: Any) -> model.AppendResult:
    """Works for AppendResult messages and the flat append responses alike."""
    return model.AppendResult(
        id=message.id,
        inserted=message.inserted,
        session_status=SESSION_STATUS.get(message.session_status),
    )


def from_session(message: pb.Session) -> model.Session:
    return model.Session(
        id=message.id,
        status=SESSION_STATUS[message.status],
        created_at=from_timestamp(message.created_at),
        ended_at=from_timestamp(message.ended_at) if message.HasField("ended_at") else None,
    )


def from_run_meta(message: pb.RunMeta) -> model.RunMeta:
    return model.RunMeta(
        run_id=message.run_id,
        agent_id=message.agent_id,
        session_id=message.session_id,
        parent_run_id=message.parent_run_id,
        started_at=from_timestamp(message.started_at),
        labels=dict(message.labels),
        start_outcome=START_OUTCOME[message.start_outcome],
        status=RUN_STATUS[message.status],
        cancellation_reason=message.cancellation_reason,
        updated_at=from_timestamp(message.updated_at),
    )


def checkpoint(value: model.Checkpoint) -> pb.Checkpoint:
    return pb.Checkpoint(id=value.id, data=value.data)


def from_checkpoint(message: pb.Checkpoint) -> model.Checkpoint:
    return model.Checkpoint(id=message.id, data=message.data)


def from_page(message: Any) -> model.Page:
    return model.Page(events=from_records(message.events), next_cursor=message.next_cursor)


# --- Commands -------------------------------------------------------------------


def root_run_start(command: model.RootRunStart) -> rs.StartRootRunRequest:
    return rs.StartRootRunRequest(
        run=run_start(command.run),
        started=record(command.started),
        canceled=record(command.canceled),
    )


def child_run_start(command: model.ChildRunStart) -> rs.StartChildRunRequest:
    return rs.StartChildRunRequest(
        run=run_start(command.run),
        parent_linked=record(command.parent_linked),
        started=record(command.started),
        canceled=record(command.canceled),
    )


def one_shot_run_start(command: model.OneShotRunStart) -> rs.StartOneShotRunRequest:
    return rs.StartOneShotRunRequest(run=run_start(command.run), started=record(command.started))


def one_shot_child_run_start(
    command: model.OneShotChildRunStart,
) -> rs.StartOneShotChildRunRequest:
    return rs.StartOneShotChildRunRequest(
        run=run_start(command.run),
        parent_linked=record(command.parent_linked),
        started=record(command.started),
    )


def run_cancellation(command: model.RunCancellation) -> rs.RecordRunCancellationRequest:
    return rs.RecordRunCancellationRequest(
        run_id=command.run_id, reason=command.reason, record=record(command.record)
    )


def run_suspension(command: model.RunSuspension) -> dict[str, Any]:
    """Fields shared by RecordRunSuspensionRequest and RepairRunSuspensionRequest."""
    return {
        "run_id": command.run_id,
        "suspension": checkpoint(command.suspension),
        "record": record(command.record),
    }


def run_terminal(command: model.RunTerminal) -> dict[str, Any]:
    """Fields shared by RecordRunTerminalRequest and RepairRunTerminalRequest."""
    return {
        "run_id": command.run_id,
        "status": RUN_STATUS_TO_WIRE[command.status],
        "record": record(command.record),
    }


def from_repair(message: Any) -> model.RunRepairResult:
    return model.RunRepairResult(
        outcome=REPAIR_OUTCOME[message.outcome],
        status=RUN_STATUS[message.status],
        record=from_append_result(message.record),
    )
