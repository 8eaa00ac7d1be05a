"""Typed values of the runtime store contract for Python callers (§3).

Immutable dataclasses; times are timezone-aware ``datetime`` in UTC, payloads
and checkpoint data ``bytes``, labels ``dict[str, str]``. No caller needs the
generated protobuf classes; ``runstore.client.convert`` maps both ways.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


class SessionStatus(enum.StrEnum):
    ACTIVE = "active"
    ENDED = "ended"


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """Everything but running is terminal, suspended included (§3.1)."""
        return self is not RunStatus.RUNNING


class RunStartOutcome(enum.StrEnum):
    PROCEED = "proceed"
    STOP = "stop"


class RunRepairOutcome(enum.StrEnum):
    STORED = "stored"
    ALREADY_STORED = "already_stored"
    DIFFERENT_TERMINAL = "different_terminal"


@dataclass(frozen=True, slots=True)
class Session:
    """A session (§3.3)."""

    id: str
    status: SessionStatus
    created_at: datetime
    ended_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RunStart:
    """The immutable identity of a run, supplied by a start command (§3.4)."""

    run_id: str
    agent_id: str
    started_at: datetime
    """Whole milliseconds, UTC."""
    session_id: str = ""
    """Required for root and child starts; empty for one-shot starts."""
    parent_run_id: str = ""
    """Required for child starts."""
    predecessor_run_id: str = ""
    """The suspended run this start continues (§10.2)."""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One immutable run record (§3.7). ``id`` is assigned by the store."""

    event_key: str
    run_id: str
    agent_id: str
    type: str
    payload: bytes
    timestamp: datetime
    """Whole milliseconds, UTC."""
    session_id: str = ""
    turn_id: str = ""
    id: str = ""


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The outcome of writing one record (§3.9). All empty: no such record."""

    id: str = ""
    inserted: bool = False
    session_status: SessionStatus | None = None


NO_RECORD = AppendResult()


@dataclass(frozen=True, slots=True)
class RunMeta:
    """Run metadata (§3.5)."""

    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    started_at: datetime
    labels: Mapping[str, str]
    start_outcome: RunStartOutcome
    status: RunStatus
    cancellation_reason: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A continuation checkpoint (§3.6): opaque bytes, stored byte for byte."""

    id: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Page:
    """One page of records, oldest first; empty ``next_cursor`` means the end."""

    events: tuple[RunRecord, ...]
    next_cursor: str = ""


# --- Commands (§3.10) -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RootRunStart:
    run: RunStart
    started: RunRecord
    canceled: RunRecord
    """The ended-session record; always required (see ``records.ended_session_record``)."""


@dataclass(frozen=True, slots=True)
class ChildRunStart:
    run: RunStart
    parent_linked: RunRecord
    started: RunRecord
    canceled: RunRecord


@dataclass(frozen=True, slots=True)
class OneShotRunStart:
    run: RunStart
    started: RunRecord


@dataclass(frozen=True, slots=True)
class OneShotChildRunStart:
    run: RunStart
    parent_linked: RunRecord
    started: RunRecord


@dataclass(frozen=True, slots=True)
class RunCancellation:
    run_id: str
    reason: str
    record: RunRecord


@dataclass(frozen=True, slots=True)
class RunSuspension:
    run_id: str
    suspension: Checkpoint
    record: RunRecord


@dataclass(frozen=True, slots=True)
class RunTerminal:
    run_id: str
    status: RunStatus
    """COMPLETED, FAILED or CANCELED."""
    record: RunRecord


# --- Results (§3.11) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RootRunStartResult:
    outcome: RunStartOutcome
    started: AppendResult
    canceled: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class ChildRunStartResult:
    outcome: RunStartOutcome
    parent_record: AppendResult
    started: AppendResult
    canceled: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class OneShotRunStartResult:
    record: AppendResult


@dataclass(frozen=True, slots=True)
class OneShotChildRunStartResult:
    parent_record: AppendResult
    started: AppendResult


@dataclass(frozen=True, slots=True)
class RunRepairResult:
    outcome: RunRepairOutcome
    status: RunStatus
    record: AppendResult = NO_RECORD
