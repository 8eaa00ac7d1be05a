"""Protobuf messages <-> store core values, one function per type.

Absent messages become ``None`` so that validation can name what is missing.
A timestamp equal to Go's zero time (0001-01-01T00:00:00Z) also counts as
absent: that is what a Go client sends for an unset ``time.Time``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.contract import model as vocab
from runstore.contract import wire
from runstore.contract.errors import ReadArgumentError, ValidationError
from runstore.contract.wire import (
    RUN_STATUS_FROM_WIRE,
    RUN_STATUS_TO_WIRE,
    SESSION_STATUS_TO_WIRE,
    START_OUTCOME_TO_WIRE,
)
from runstore.server import call_scope
from runstore.server.core import context_shape as shape
from runstore.server.core import model, validation
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb

# --- Times ------------------------------------------------------------------


def nanos_from_wire(message: Any, name: str, field: str) -> model.Nanos | None:
    """The timestamp field ``name`` of ``message`` in nanoseconds, or None if absent."""
    if not message.HasField(name):
        return None
    stamp: Timestamp = getattr(message, name)
    if wire.is_go_zero_time(stamp):
        return None
    if not 0 <= stamp.nanos < wire.NANOS_PER_SECOND:
        raise ValidationError(f"{field} is not a valid timestamp (nanos out of range)", field=field)
    return validation.check_time_range(wire.nanos_of(stamp), field)


timestamp_to_wire = wire.timestamp_of_nanos


# --- Commands in ------------------------------------------------------------


def record_from_wire(parent: Any, name: str) -> model.RecordDraft | None:
    """The RunRecord field ``name`` of ``parent``; the ID is ignored (§3.7)."""
    if not parent.HasField(name):
        return None
    message: pb.RunRecord = getattr(parent, name)
    return _record_draft(message, name, None)


def records_from_wire(messages: Iterable[pb.RunRecord], name: str) -> list[model.RecordDraft]:
    """The repeated RunRecord field ``name``, each named ``name[i]`` in errors."""
    return [_record_draft(message, name, i) for i, message in enumerate(messages)]


def _record_draft(message: pb.RunRecord, name: str, index: int | None) -> model.RecordDraft:
    return model.RecordDraft(
        **wire.copy_fields(message, wire.RECORD_FIELDS),
        timestamp=_record_timestamp(message, name, index),
        namespace=call_scope.namespace(),  # the call's: raises outside one
    )


def _record_timestamp(message: pb.RunRecord, name: str, index: int | None) -> model.Nanos | None:
    """``nanos_from_wire`` of the record's timestamp; the record's field name
    (``name`` or ``name[index]``) is made only for an error."""
    if not message.HasField("timestamp"):
        return None
    stamp = message.timestamp
    if wire.is_go_zero_time(stamp):
        return None
    if 0 <= stamp.nanos < wire.NANOS_PER_SECOND:
        nanos = wire.nanos_of(stamp)
        if validation.MIN_NANOS <= nanos <= validation.MAX_NANOS:
            return nanos
    where = name if index is None else f"{name}[{index}]"
    return nanos_from_wire(message, "timestamp", f"{where}.timestamp")  # raises, naming it


def run_start_from_wire(request: Any) -> model.RunStart:
    message: pb.RunStart = request.run
    return model.RunStart(
        **wire.copy_fields(message, wire.RUN_START_FIELDS),
        started_at=nanos_from_wire(message, "started_at", "run.started_at"),
        labels=dict(message.labels),
    )


def root_run_start(request: rs.StartRootRunRequest) -> model.RootRunStart:
    return model.RootRunStart(
        run=run_start_from_wire(request),
        started=record_from_wire(request, "started"),
        canceled=record_from_wire(request, "canceled"),
        request_digest=request.request_digest,
        cancellation=record_from_wire(request, "cancellation"),
    )


def child_run_start(request: rs.StartChildRunRequest) -> model.ChildRunStart:
    return model.ChildRunStart(
        run=run_start_from_wire(request),
        parent_linked=record_from_wire(request, "parent_linked"),
        started=record_from_wire(request, "started"),
        canceled=record_from_wire(request, "canceled"),
        request_digest=request.request_digest,
        cancellation=record_from_wire(request, "cancellation"),
    )


def one_shot_run_start(request: rs.StartOneShotRunRequest) -> model.OneShotRunStart:
    return model.OneShotRunStart(
        run=run_start_from_wire(request),
        started=record_from_wire(request, "started"),
        request_digest=request.request_digest,
    )


def synchronous_run_start(request: sd.StartSynchronousRunRequest) -> model.OneShotRunStart:
    """§9.2.5: the command of StartOneShotRun (its seed end is ``run.seed_end_id``)."""
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
        request_digest=request.request_digest,
    )


def run_cancellation(request: rs.RecordRunCancellationRequest) -> model.RunCancellation:
    return model.RunCancellation(
        run_id=request.run_id, reason=request.reason, record=record_from_wire(request, "record")
    )


def run_suspension(
    request: rs.RecordRunSuspensionRequest | rs.RepairRunSuspensionRequest,
) -> model.RunSuspension:
    suspension = (
        vocab.Checkpoint(request.suspension.id, request.suspension.data)
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


def run_statuses_from_wire(statuses: Any) -> set[vocab.RunStatus] | None:
    """An empty filter lists every run; unknown values match nothing (§9.1.6)."""
    if not statuses:
        return None
    return {RUN_STATUS_FROM_WIRE[value] for value in statuses if value in RUN_STATUS_FROM_WIRE}


def _statuses_from_wire(statuses: Any, table: Any) -> frozenset[Any] | None:
    """An empty filter keeps every status; unknown values match nothing."""
    if not statuses:
        return None
    return frozenset(table[value] for value in statuses if value in table)


def newest_first_from_wire(order: int) -> bool:
    """A listing's ``order``: unspecified is the oldest first (§9.8)."""
    if order not in (
        sa.LIST_ORDER_UNSPECIFIED,
        sa.LIST_ORDER_OLDEST_FIRST,
        sa.LIST_ORDER_NEWEST_FIRST,
    ):
        raise ReadArgumentError(f"order {order} is not a ListOrder", field="order")
    return order == sa.LIST_ORDER_NEWEST_FIRST


def session_filter_from_wire(request: Any) -> vocab.SessionFilter[model.Nanos]:
    """The filters of a ListSessionsRequest."""
    return vocab.SessionFilter(
        statuses=_statuses_from_wire(request.statuses, wire.SESSION_STATUS_FROM_WIRE),
        created_after=nanos_from_wire(request, "created_after", "created_after"),
        created_before=nanos_from_wire(request, "created_before", "created_before"),
        session_id=request.session_id,
        session_id_prefix=request.session_id_prefix,
        newest_first=newest_first_from_wire(request.order),
    )


def run_filter_from_wire(request: Any) -> vocab.RunFilter[model.Nanos]:
    """The filters of a ListRunsRequest."""
    return vocab.RunFilter(
        session_id=request.session_id,
        agent_id=request.agent_id,
        statuses=_statuses_from_wire(request.statuses, RUN_STATUS_FROM_WIRE),
        started_after=nanos_from_wire(request, "started_after", "started_after"),
        started_before=nanos_from_wire(request, "started_before", "started_before"),
        sessionless_only=request.sessionless_only,
        run_id=request.run_id,
        run_id_prefix=request.run_id_prefix,
        agent_id_prefix=request.agent_id_prefix,
        labels=dict(request.labels),
        root_only=request.root_only,
        parent_run_id=request.parent_run_id,
        newest_first=newest_first_from_wire(request.order),
    )


# --- Results out ------------------------------------------------------------


def append_result_to_wire(result: vocab.AppendResult) -> pb.AppendResult:
    return pb.AppendResult(
        id=result.id,
        inserted=result.inserted,
        session_status=SESSION_STATUS_TO_WIRE[result.session_status],
    )


def append_fields(result: vocab.AppendResult) -> dict[str, Any]:
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


def run_to_wire(run: model.RunState) -> pb.RunMeta:
    message = pb.RunMeta(
        **wire.copy_fields(run, wire.RUN_META_FIELDS),
        started_at=timestamp_to_wire(run.started_at),
        labels=run.labels,
        start_outcome=START_OUTCOME_TO_WIRE[run.start_outcome],
        status=RUN_STATUS_TO_WIRE[run.status],
        updated_at=timestamp_to_wire(run.updated_at),
    )
    if run.failure is not None:
        failure = run.failure
        message.failure.CopyFrom(
            pb.RunFailure(
                message=failure.message,
                kind=failure.kind,
                code=failure.code,
                retryable=failure.retryable,
            )
        )
    if run.ended_at is not None:
        message.ended_at.CopyFrom(timestamp_to_wire(run.ended_at))
        message.duration.FromNanoseconds(max(run.ended_at - run.started_at, 0))
    return message


def session_counts_to_wire(counts: Iterable[vocab.StatusCount]) -> list[sa.SessionStatusCount]:
    return [
        sa.SessionStatusCount(
            status=SESSION_STATUS_TO_WIRE[vocab.SessionStatus(count.status)],
            count=count.count,
            estimated=count.estimated,
        )
        for count in counts
    ]


def run_counts_to_wire(counts: Iterable[vocab.StatusCount]) -> list[sa.RunStatusCount]:
    return [
        sa.RunStatusCount(
            status=RUN_STATUS_TO_WIRE[vocab.RunStatus(count.status)],
            count=count.count,
            estimated=count.estimated,
        )
        for count in counts
    ]


def record_to_wire(record: model.RunRecord) -> pb.RunRecord:
    return pb.RunRecord(
        id=str(record.id),
        **wire.copy_fields(record, wire.RECORD_FIELDS),
        timestamp=timestamp_to_wire(record.timestamp),
    )


# --- Context store: what the shape rules read, with the bytes kept ----------


def _content_block_from_wire(block: ctx.ContentBlock) -> shape.ContentBlock:
    kind = block.WhichOneof("block")
    value: shape.BlockValue | None = None
    if kind == "image":
        value = shape.ImageBlock(block.image.format, bool(block.image.data or block.image.url))
    elif kind == "document":
        document = block.document
        sources = (document.data, document.text, document.chunks, document.uri)
        value = shape.DocumentBlock(
            document.name, sum(1 for source in sources if source), tuple(document.chunks)
        )
    elif kind == "tool_use":
        value = shape.ToolUseBlock(block.tool_use.id, block.tool_use.name, block.tool_use.input)
    elif kind == "tool_result":
        value = shape.ToolResultBlock(block.tool_result.tool_use_id, block.tool_result.content)
    elif kind == "citations":
        value = shape.CitationsBlock(
            tuple(
                citation.location.kind if citation.HasField("location") else None
                for citation in block.citations.citations
            )
        )
    return shape.ContentBlock(block.type, kind, value)


def context_message_from_wire(message: ctx.ContextMessage) -> shape.ContextMessage:
    return shape.ContextMessage(
        type=message.type,
        meta=message.meta,
        content=tuple(_content_block_from_wire(block) for block in message.content),
        wire=message.SerializeToString(deterministic=True),
    )


def context_snapshot_from_wire(snapshot: ctx.ContextSnapshot) -> shape.ContextSnapshot:
    return shape.ContextSnapshot(
        messages=tuple(context_message_from_wire(message) for message in snapshot.messages),
        wire=snapshot.SerializeToString(deterministic=True),
    )
