"""The contract's values <-> protobuf messages: what both sides convert alike.

The enum <-> wire tables, protobuf ``Timestamp`` <-> nanoseconds and
``datetime``, Go's zero time, and the field lists that each side copies
between its own record or run values and the messages. The client
(``runstore.client.convert``) and the server (``runstore.server.convert``)
build their conversions from these, so both read and write the wire the same
way. This is the one module of ``runstore.contract`` that imports protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.contract.model import RunRepairOutcome, RunStartOutcome, RunStatus, SessionStatus
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import types_pb2 as pb

NANOS_PER_SECOND: Final = 1_000_000_000

GO_ZERO_TIME_SECONDS: Final = -62135596800
"""0001-01-01T00:00:00Z, what a Go client sends for an unset ``time.Time``."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _inverse(table: Mapping[Any, int]) -> dict[int, Any]:
    return {wire: value for value, wire in table.items() if value is not None}


SESSION_STATUS_TO_WIRE: Final[Mapping[SessionStatus | None, pb.SessionStatus.ValueType]] = {
    None: pb.SESSION_STATUS_UNSPECIFIED,
    SessionStatus.ACTIVE: pb.SESSION_STATUS_ACTIVE,
    SessionStatus.ENDED: pb.SESSION_STATUS_ENDED,
}
SESSION_STATUS_FROM_WIRE: Final[Mapping[int, SessionStatus]] = _inverse(SESSION_STATUS_TO_WIRE)

RUN_STATUS_TO_WIRE: Final[Mapping[RunStatus | None, pb.RunStatus.ValueType]] = {
    None: pb.RUN_STATUS_UNSPECIFIED,
    RunStatus.RUNNING: pb.RUN_STATUS_RUNNING,
    RunStatus.SUSPENDED: pb.RUN_STATUS_SUSPENDED,
    RunStatus.COMPLETED: pb.RUN_STATUS_COMPLETED,
    RunStatus.FAILED: pb.RUN_STATUS_FAILED,
    RunStatus.CANCELED: pb.RUN_STATUS_CANCELED,
}
RUN_STATUS_FROM_WIRE: Final[Mapping[int, RunStatus]] = _inverse(RUN_STATUS_TO_WIRE)

START_OUTCOME_TO_WIRE: Final[Mapping[RunStartOutcome, pb.RunStartOutcome.ValueType]] = {
    RunStartOutcome.PROCEED: pb.RUN_START_OUTCOME_PROCEED,
    RunStartOutcome.STOP: pb.RUN_START_OUTCOME_STOP,
}
START_OUTCOME_FROM_WIRE: Final[Mapping[int, RunStartOutcome]] = _inverse(START_OUTCOME_TO_WIRE)

REPAIR_OUTCOME_TO_WIRE: Final[Mapping[RunRepairOutcome, pb.RunRepairOutcome.ValueType]] = {
    RunRepairOutcome.STORED: pb.RUN_REPAIR_OUTCOME_STORED,
    RunRepairOutcome.ALREADY_STORED: pb.RUN_REPAIR_OUTCOME_ALREADY_STORED,
    RunRepairOutcome.DIFFERENT_TERMINAL: pb.RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL,
}
REPAIR_OUTCOME_FROM_WIRE: Final[Mapping[int, RunRepairOutcome]] = _inverse(REPAIR_OUTCOME_TO_WIRE)


# --- Times --------------------------------------------------------------------


def is_go_zero_time(stamp: Timestamp) -> bool:
    """Go's zero ``time.Time`` counts as no time at all."""
    seconds: int = stamp.seconds
    return seconds == GO_ZERO_TIME_SECONDS and stamp.nanos == 0


def nanos_of(stamp: Timestamp) -> int:
    """Nanoseconds since the epoch, exactly; range checks are the caller's."""
    nanos: int = stamp.seconds * NANOS_PER_SECOND + stamp.nanos
    return nanos


def timestamp_of_nanos(nanos: int) -> Timestamp:
    seconds, remainder = divmod(nanos, NANOS_PER_SECOND)
    return Timestamp(seconds=seconds, nanos=remainder)


def timestamp_of_datetime(moment: datetime) -> Timestamp:
    """A Timestamp of an aware ``datetime`` (naive values are rejected: the
    contract's times are instants)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamps must be timezone-aware (UTC), got naive {moment!r}")
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return timestamp_of_nanos(micros * 1000)


def datetime_of_timestamp(stamp: Timestamp) -> datetime:
    """A UTC ``datetime``; sub-microsecond digits (full-precision session times)
    are truncated, as ``datetime`` cannot hold them."""
    return _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)


# --- Field-by-field copies ----------------------------------------------------

RECORD_FIELDS: Final = (
    "event_key",
    "run_id",
    "agent_id",
    "session_id",
    "turn_id",
    "type",
    "payload",
)
"""RunRecord fields every side keeps as they are (``id`` and ``timestamp`` differ)."""

RUN_START_FIELDS: Final = (
    "run_id",
    "agent_id",
    "session_id",
    "parent_run_id",
    "predecessor_run_id",
    "seed_end_id",
)
"""RunStart fields kept as they are (``started_at`` and ``labels`` need a conversion)."""

RUN_META_FIELDS: Final = (
    "run_id",
    "agent_id",
    "session_id",
    "parent_run_id",
    "cancellation_reason",
    "seed_end_id",
    "successor_run_id",
)
"""RunMeta fields kept as they are (times, labels and enums need a conversion)."""


def copy_fields(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``names`` read from ``source`` (a message or a value), as keyword arguments."""
    return {name: getattr(source, name) for name in names}


# --- Namespaces (runstore.v1.NamespaceAdmin) ---------------------------------------------

NAMESPACE_STATE_TO_WIRE: Final[Mapping[str, na.NamespaceState.ValueType]] = {
    "active": na.NAMESPACE_STATE_ACTIVE,
    "deleting": na.NAMESPACE_STATE_DELETING,
}
"""A namespace's state (``active``, or ``deleting`` while its data is purged) on the wire."""
NAMESPACE_STATE_FROM_WIRE: Final[Mapping[int, str]] = {
    wire: state for state, wire in NAMESPACE_STATE_TO_WIRE.items()
}

NAMESPACE_SETTINGS: Final[Mapping[str, tuple[str, str]]] = {
    "retain_ended_sessions_s": ("retention", "ended_sessions_seconds"),
    "retain_sessionless_runs_s": ("retention", "sessionless_runs_seconds"),
    "quota_writes_per_s": ("quotas", "writes_per_second"),
    "quota_reads_per_s": ("quotas", "reads_per_second"),
    "quota_watch_streams": ("quotas", "watch_streams"),
    "quota_stored_bytes": ("quotas", "stored_bytes"),
}
"""Each setting of a namespace (its name on both sides) and where the
``Namespace`` message carries it (group message, field)."""
