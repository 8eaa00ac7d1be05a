"""Client values <-> protobuf messages, one function pair per type."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.client import arguments, model
from runstore.contract import wire
from runstore.contract.model import RunFailureSummary, StatusCount
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb

# The tables under their client names (the wire's own names are in ``runstore.contract.wire``).
SESSION_STATUS = wire.SESSION_STATUS_FROM_WIRE
SESSION_STATUS_TO_WIRE = wire.SESSION_STATUS_TO_WIRE
RUN_STATUS = wire.RUN_STATUS_FROM_WIRE
RUN_STATUS_TO_WIRE = wire.RUN_STATUS_TO_WIRE
START_OUTCOME = wire.START_OUTCOME_FROM_WIRE
REPAIR_OUTCOME = wire.REPAIR_OUTCOME_FROM_WIRE


# --- Times --------------------------------------------------------------------


def timestamp(moment: datetime) -> Timestamp:
    """A protobuf Timestamp of an aware ``datetime`` (naive values are rejected)."""
    return wire.timestamp_of_datetime(moment)


def from_timestamp(stamp: Timestamp) -> datetime:
    """A UTC ``datetime``, truncated to microseconds."""
    return wire.datetime_of_timestamp(stamp)


# --- Values -----------------------------------------------------------------------


def run_start(run: model.RunStart) -> pb.RunStart:
    return pb.RunStart(
        **wire.copy_fields(run, wire.RUN_START_FIELDS),
        started_at=timestamp(run.started_at),
        labels=dict(run.labels),
    )


def record(value: model.RunRecord) -> pb.RunRecord:
    arguments.payload("RunRecord.payload", value.payload)
    arguments.moment("RunRecord.timestamp", value.timestamp)
    return pb.RunRecord(
        **wire.copy_fields(value, wire.RECORD_FIELDS),
        timestamp=timestamp(value.timestamp),
    )


def from_record(message: pb.RunRecord) -> model.RunRecord:
    return model.RunRecord(
        id=message.id,
        **wire.copy_fields(message, wire.RECORD_FIELDS),
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
        **wire.copy_fields(message, wire.RUN_META_FIELDS),
        started_at=from_timestamp(message.started_at),
        labels=dict(message.labels),
        start_outcome=START_OUTCOME[message.start_outcome],
        status=RUN_STATUS[message.status],
        updated_at=from_timestamp(message.updated_at),
        failure=(
            RunFailureSummary(
                message.failure.message,
                message.failure.kind,
                message.failure.code,
                message.failure.retryable,
            )
            if message.HasField("failure")
            else None
        ),
        ended_at=from_timestamp(message.ended_at) if message.HasField("ended_at") else None,
    )


def _status_counts(counts: Any, statuses: Mapping[int, Any]) -> list[StatusCount]:
    """A listing's status counts by status value; unknown statuses are left out."""
    return [
        StatusCount(statuses[count.status].value, count.count, count.estimated)
        for count in counts
        if count.status in statuses
    ]


def checkpoint(value: model.Checkpoint) -> pb.Checkpoint:
    return pb.Checkpoint(id=value.id, data=value.data)


def from_checkpoint(message: pb.Checkpoint) -> model.Checkpoint:
    return model.Checkpoint(id=message.id, data=message.data)


def from_page(message: Any) -> model.Page:
    return model.Page(events=from_records(message.events), next_cursor=message.next_cursor)


def from_session_page(message: Any) -> model.SessionPage:
    return model.SessionPage(
        [from_session(session) for session in message.sessions],
        message.next_page_token,
        _status_counts(message.status_counts, SESSION_STATUS),
    )


def from_run_page(message: Any) -> model.RunPage:
    return model.RunPage(
        [from_run_meta(run) for run in message.runs],
        message.next_page_token,
        _status_counts(message.status_counts, RUN_STATUS),
    )


# --- Commands -------------------------------------------------------------------


def _optional_record(value: model.RunRecord | None) -> pb.RunRecord | None:
    """An ended-session record of the command's generation; the other is absent."""
    return record(value) if value is not None else None


def root_run_start(command: model.RootRunStart) -> rs.StartRootRunRequest:
    return rs.StartRootRunRequest(
        run=run_start(command.run),
        started=record(command.started),
        canceled=_optional_record(command.canceled),
        request_digest=command.request_digest,
        cancellation=_optional_record(command.cancellation),
    )


def child_run_start(command: model.ChildRunStart) -> rs.StartChildRunRequest:
    return rs.StartChildRunRequest(
        run=run_start(command.run),
        parent_linked=record(command.parent_linked),
        started=record(command.started),
        canceled=_optional_record(command.canceled),
        request_digest=command.request_digest,
        cancellation=_optional_record(command.cancellation),
    )


def one_shot_run_start(command: model.OneShotRunStart) -> rs.StartOneShotRunRequest:
    return rs.StartOneShotRunRequest(
        run=run_start(command.run),
        started=record(command.started),
        request_digest=command.request_digest,
    )


def one_shot_child_run_start(
    command: model.OneShotChildRunStart,
) -> rs.StartOneShotChildRunRequest:
    return rs.StartOneShotChildRunRequest(
        run=run_start(command.run),
        parent_linked=record(command.parent_linked),
        started=record(command.started),
        request_digest=command.request_digest,
    )


def run_cancellation(command: model.RunCancellation) -> rs.RecordRunCancellationRequest:
    return rs.RecordRunCancellationRequest(
        run_id=command.run_id, reason=command.reason, record=record(command.record)
    )


def run_suspension(command: model.RunSuspension) -> dict[str, Any]:
    """Fields shared by RecordRunSuspensionRequest and RepairRunSuspensionRequest;
    a missing checkpoint is left unset for the server to reject."""
    fields: dict[str, Any] = {"run_id": command.run_id, "record": record(command.record)}
    if command.suspension is not None:
        fields["suspension"] = checkpoint(command.suspension)
    return fields


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
