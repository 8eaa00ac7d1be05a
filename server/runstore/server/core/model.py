"""Values the store core works with: commands in, results out (§3).

Times are integer nanoseconds since the Unix epoch, UTC (``Nanos``): exact,
cheap to compare, and able to carry full precision (D7). ``None`` means the
caller sent no timestamp. Record and start times are checked to be whole
milliseconds by validation, not by these types.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

Nanos = int
"""UTC nanoseconds since the Unix epoch."""

NANOS_PER_MILLI = 1_000_000


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


TERMINAL_COMMAND_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED})


class StartOutcome(enum.StrEnum):
    PROCEED = "proceed"
    STOP = "stop"


class RepairOutcome(enum.StrEnum):
    STORED = "stored"
    ALREADY_STORED = "already_stored"
    DIFFERENT_TERMINAL = "different_terminal"


# --- Stored state -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Session:
    """A session row (§3.3)."""

    id: str
    status: SessionStatus
    created_at: Nanos
    ended_at: Nanos | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A continuation checkpoint (§3.6)."""

    id: str
    data: bytes


@dataclass(frozen=True, slots=True)
class LifecycleKeys:
    """The event key chosen by the first write of each lifecycle slot (§8)."""

    start: str = ""
    parent_link: str = ""
    cancellation: str = ""
    suspension: str = ""
    terminal: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    """A run row: metadata (§3.5), lifecycle keys (§8) and checkpoint (§3.6)."""

    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    started_at: Nanos
    labels: Mapping[str, str]
    start_outcome: StartOutcome
    status: RunStatus
    cancellation_reason: str
    updated_at: Nanos
    keys: LifecycleKeys = field(default_factory=LifecycleKeys)
    checkpoint: Checkpoint | None = None


@dataclass(frozen=True, slots=True)
class RunChange:
    """A lifecycle change to one run; ``None`` fields stay as they are."""

    status: RunStatus | None = None
    cancellation_reason: str | None = None
    updated_at: Nanos | None = None
    cancellation_key: str | None = None
    suspension_key: str | None = None
    terminal_key: str | None = None
    checkpoint: Checkpoint | None = None


# --- Records ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """A record as a caller supplies it (§3.7); the store assigns the ID."""

    event_key: str
    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    type: str
    payload: bytes
    timestamp: Nanos | None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as stored: the caller's fields plus its run-scoped ID."""

    id: int
    event_key: str
    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    type: str
    payload: bytes
    timestamp: Nanos

    def same_as(self, record: Record) -> bool:
        """Exact-retry identity: every field but the ID is equal (§6.1)."""
        return (
            self.event_key == record.event_key
            and self.run_id == record.run_id
            and self.agent_id == record.agent_id
            and self.session_id == record.session_id
            and self.turn_id == record.turn_id
            and self.type == record.type
            and self.timestamp == record.timestamp
            and self.payload == record.payload
        )


# --- Commands ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunStart:
    """The immutable identity of a run (§3.4)."""

    run_id: str = ""
    agent_id: str = ""
    session_id: str = ""
    parent_run_id: str = ""
    predecessor_run_id: str = ""
    started_at: Nanos | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RootRunStart:
    run: RunStart
    started: Record | None
    canceled: Record | None


@dataclass(frozen=True, slots=True)
class ChildRunStart:
    run: RunStart
    parent_linked: Record | None
    started: Record | None
    canceled: Record | None


@dataclass(frozen=True, slots=True)
class OneShotRunStart:
    run: RunStart
    started: Record | None


@dataclass(frozen=True, slots=True)
class OneShotChildRunStart:
    run: RunStart
    parent_linked: Record | None
    started: Record | None


@dataclass(frozen=True, slots=True)
class RunCancellation:
    run_id: str
    reason: str
    record: Record | None


@dataclass(frozen=True, slots=True)
class RunSuspension:
    run_id: str
    suspension: Checkpoint | None
    record: Record | None


@dataclass(frozen=True, slots=True)
class RunTerminal:
    run_id: str
    status: RunStatus | None
    record: Record | None


# --- Results ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The outcome of writing one record (§3.9); ``NO_RECORD`` is the zero value."""

    id: str = ""
    inserted: bool = False
    session_status: SessionStatus | None = None


NO_RECORD = AppendResult()


@dataclass(frozen=True, slots=True)
class RunStartResult:
    """Result of every start; fields a start kind does not have stay ``NO_RECORD``."""

    outcome: StartOutcome
    started: AppendResult
    canceled: AppendResult = NO_RECORD
    parent_record: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class RepairResult:
    outcome: RepairOutcome
    status: RunStatus
    record: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class Page:
    events: list[StoredRecord]
    next_cursor: str = ""


# --- Product memory (§12, D5) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One memory event; ``data`` is a JSON object kept byte for byte."""

    type: str
    timestamp: Nanos | None
    data: bytes
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredAppend:
    """What an idempotent append stored, so that a retry can repeat its result."""

    digest: bytes
    first_position: int
    count: int


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """Where an append put its items (positions count from 0)."""

    first_position: int
    count: int
    inserted: bool


@dataclass(frozen=True, slots=True)
class ContextHead:
    """A context key's current snapshot version (0: none yet) and transcript length."""

    version: int
    transcript_count: int
    saved_at: Nanos | None = None


@dataclass(frozen=True, slots=True)
class ContextVersion:
    """One kept snapshot: the serialised ``ContextSnapshot``, stored byte for byte."""

    version: int
    snapshot: bytes
    saved_at: Nanos
