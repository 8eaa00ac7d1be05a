"""Core values as columns and statement parameters, and rows back as core
values, shared by both backends."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from runstore.contract.model import (
    Checkpoint,
    RunFailureSummary,
    RunStartOutcome,
    RunStatus,
    SessionStatus,
)
from runstore.server.core.model import (
    NANOS_PER_MILLI,
    LifecycleKeys,
    Nanos,
    RecordDraft,
    RunChange,
    RunRecord,
    RunState,
    Session,
)
from runstore.server.db.schema import records, runs, sessions

NANOS_PER_SECOND = 1_000_000_000

# --- Columns read back into core values --------------------------------------

SESSION_COLUMNS = (
    sessions.c.session_id,
    sessions.c.status,
    sessions.c.created_at_s,
    sessions.c.created_at_ns,
    sessions.c.ended_at_s,
    sessions.c.ended_at_ns,
)
RUN_COLUMNS = (
    runs.c.run_id,
    runs.c.agent_id,
    runs.c.session_id,
    runs.c.parent_run_id,
    runs.c.started_at_ms,
    runs.c.labels,
    runs.c.start_outcome,
    runs.c.status,
    runs.c.cancellation_reason,
    runs.c.updated_at,
    runs.c.start_key,
    runs.c.parent_link_key,
    runs.c.cancellation_key,
    runs.c.suspension_key,
    runs.c.terminal_key,
    runs.c.request_digest,
    runs.c.successor_run_id,
    runs.c.seed_end_id,
    runs.c.finished_at_ms,
    runs.c.failure,
    runs.c.checkpoint_id,
    runs.c.checkpoint_data,
)
RECORD_COLUMNS = (
    records.c.record_id,
    records.c.event_key,
    records.c.run_id,
    records.c.agent_id,
    records.c.session_id,
    records.c.turn_id,
    records.c.type,
    records.c.payload,
    records.c.timestamp_ms,
)


_SESSION_STATUS: Mapping[str, SessionStatus] = {status.value: status for status in SessionStatus}
_RUN_STATUS: Mapping[str, RunStatus] = {status.value: status for status in RunStatus}
_START_OUTCOME: Mapping[str, RunStartOutcome] = {
    outcome.value: outcome for outcome in RunStartOutcome
}


@functools.lru_cache(maxsize=4096)
def labels_from_text(text: str) -> Mapping[str, str]:
    """Labels decoded once per distinct text; read-only, so sharing is safe."""
    return MappingProxyType(json.loads(text))


# --- Times: exact over years 1 to 9999 (see schema) ----------------------------


def split_nanos(nanos: Nanos) -> tuple[int, int]:
    """UTC nanoseconds as (seconds, nanos in 0..999,999,999) for two columns."""
    return divmod(nanos, NANOS_PER_SECOND)


def join_nanos(seconds: int, nanos: int) -> Nanos:
    return seconds * NANOS_PER_SECOND + nanos


def to_millis(nanos: Nanos) -> int:
    """A whole-millisecond time (validated, V1/V3) for a ``_ms`` column."""
    return nanos // NANOS_PER_MILLI


def key_digest(idempotency_key: str) -> bytes:
    """What memory appends are keyed by (see ``schema.memory_appends``)."""
    return hashlib.sha256(idempotency_key.encode("utf-8")).digest()


def session_from_row(row: Sequence[Any]) -> Session:
    """A session from ``SESSION_COLUMNS``."""
    ended = join_nanos(row[4], row[5]) if row[4] is not None else None
    return Session(row[0], _SESSION_STATUS[row[1]], join_nanos(row[2], row[3]), ended)


def run_from_row(row: Sequence[Any]) -> RunState:
    return RunState(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4] * NANOS_PER_MILLI,
        labels_from_text(row[5]),
        _START_OUTCOME[row[6]],
        _RUN_STATUS[row[7]],
        row[8],
        row[9],
        seed_end_id=row[17] or "",
        successor_run_id=row[16] or "",
        keys=LifecycleKeys(row[10], row[11], row[12], row[13], row[14]),
        ended_at=row[18] * NANOS_PER_MILLI if row[18] is not None else None,
        failure=failure_from_text(row[19]) if row[19] is not None else None,
        checkpoint=Checkpoint(row[20], bytes(row[21])) if row[20] is not None else None,
        # NULL (a seed-era run) reads as empty; a stored digest is kept as it
        # is, whatever its length, so that the start's checks can see it corrupt.
        request_digest=bytes(row[15]) if row[15] is not None else b"",
    )


def listed_run_from_row(row: Sequence[Any]) -> RunState:
    """A run read by a listing: every column but the checkpoint's."""
    return run_from_row((*row, None, None))


def failure_from_text(text: str) -> RunFailureSummary:
    """A stored failure (see ``schema.runs.failure``)."""
    data = json.loads(text)
    return RunFailureSummary(
        str(data.get("message", "")),
        str(data.get("kind", "")),
        str(data.get("code", "")),
        bool(data.get("retryable", False)),
    )


def failure_to_text(failure: RunFailureSummary | None) -> str | None:
    if failure is None:
        return None
    return json.dumps(
        {
            "message": failure.message,
            "kind": failure.kind,
            "code": failure.code,
            "retryable": failure.retryable,
        },
        ensure_ascii=False,
    )


def record_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        bytes(row[7]),
        row[8] * NANOS_PER_MILLI,
    )


def labels_to_text(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(labels), sort_keys=True, ensure_ascii=False)


def run_params(run: RunState) -> dict[str, Any]:
    checkpoint = run.checkpoint
    return {
        "run_id": run.run_id,
        "agent_id": run.agent_id,
        "session_id": run.session_id,
        "parent_run_id": run.parent_run_id,
        "started_at_ms": to_millis(run.started_at),
        "labels": labels_to_text(run.labels),
        "start_outcome": run.start_outcome.value,
        "status": run.status.value,
        "cancellation_reason": run.cancellation_reason,
        "updated_at": run.updated_at,
        "start_key": run.keys.start,
        "parent_link_key": run.keys.parent_link,
        "cancellation_key": run.keys.cancellation,
        "suspension_key": run.keys.suspension,
        "terminal_key": run.keys.terminal,
        "request_digest": run.request_digest or None,
        "successor_run_id": run.successor_run_id or None,
        "seed_end_id": run.seed_end_id or None,
        "finished_at_ms": to_millis(run.ended_at) if run.ended_at is not None else None,
        "failure": failure_to_text(run.failure),
        "checkpoint_id": checkpoint.id if checkpoint else None,
        "checkpoint_data": checkpoint.data if checkpoint else None,
    }


def change_params(run_id: str, change: RunChange) -> dict[str, Any]:
    checkpoint = change.checkpoint
    return {
        "run_id": run_id,
        "status": change.status.value if change.status is not None else None,
        "cancellation_reason": change.cancellation_reason,
        "updated_at": change.updated_at,
        "cancellation_key": change.cancellation_key,
        "suspension_key": change.suspension_key,
        "terminal_key": change.terminal_key,
        "successor_run_id": change.successor_run_id,
        "checkpoint_id": checkpoint.id if checkpoint else None,
        "checkpoint_data": checkpoint.data if checkpoint else None,
        "finished_at_ms": (
            to_millis(change.finished_at) if change.finished_at is not None else None
        ),
        "failure": failure_to_text(change.failure),
    }


def record_params(record: RecordDraft) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "event_key": record.event_key,
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "turn_id": record.turn_id,
        "type": record.type,
        "payload": record.payload,
        "payload_size": len(record.payload),
        "timestamp_ms": to_millis(record.timestamp) if record.timestamp is not None else None,
    }
