"""The runtime store's vocabulary, shared by the client and the server core (§3).

Enums whose values are also the stored column values, the small values both
sides pass around unchanged, and the command shapes. Commands and pages are
generic over the record (and run start) type, because each side holds records
in its own shape: the client with UTC ``datetime`` times, the server with exact
nanoseconds and, for commands, optional fields so that validation can name
what a caller left out. Nothing here imports protobuf; ``runstore.contract.wire``
maps these values to and from messages.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar


class SessionStatus(enum.StrEnum):
    """A session is active until it is ended (§3.1)."""

    ACTIVE = "active"
    ENDED = "ended"


class RunStatus(enum.StrEnum):
    """Where a run is: running, suspended at a checkpoint, or ended (§3.1)."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """Everything but running is terminal, suspended included (§3.1)."""
        return self is not RunStatus.RUNNING


TERMINAL_COMMAND_STATUSES: Final = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED}
)
"""The statuses a RecordRunTerminal command may set (§3.10)."""


class RunStartOutcome(enum.StrEnum):
    """What a start tells its worker: ``proceed``, or ``stop`` (the session has
    ended, so the run was stored closed, §10.1)."""

    PROCEED = "proceed"
    STOP = "stop"


class RunRepairOutcome(enum.StrEnum):
    """What a repair command found (§9.5): it stored the missing record, the same
    one was already stored, or a different terminal was."""

    STORED = "stored"
    ALREADY_STORED = "already_stored"
    DIFFERENT_TERMINAL = "different_terminal"


# --- Values -------------------------------------------------------------------

T = TypeVar("T")
"""The time type of a side: ``datetime`` on the client, ``Nanos`` on the server."""


@dataclass(frozen=True, slots=True)
class Session(Generic[T]):
    """A session (§3.3); each side subclasses it with its own time type."""

    id: str
    status: SessionStatus
    created_at: T
    ended_at: T | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A continuation checkpoint (§3.6): opaque bytes, stored byte for byte."""

    id: str
    data: bytes


@dataclass(frozen=True, slots=True)
class RunMeta(Generic[T]):
    """Run metadata (§3.5); each side subclasses it with its own time type."""

    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    started_at: T
    labels: Mapping[str, str]
    start_outcome: RunStartOutcome
    status: RunStatus
    cancellation_reason: str
    updated_at: T


@dataclass(frozen=True, slots=True)
class RunFailureSummary:
    """What triage needs of a failed run's ``failure`` (§5.3), stored on the run."""

    message: str
    kind: str
    code: str = ""
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The outcome of writing one record (§3.9); ``NO_RECORD`` is the zero value."""

    id: str = ""
    inserted: bool = False
    session_status: SessionStatus | None = None


NO_RECORD: Final = AppendResult()
"""The ``AppendResult`` of a record a command did not write (e.g. ``canceled``
of a start that proceeded)."""


@dataclass(frozen=True, slots=True)
class RunRepairResult:
    """The result of a repair (§9.5): what happened, and the run's status after it."""

    outcome: RunRepairOutcome
    status: RunStatus
    record: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """Where an idempotent append put its items (positions count from 0);
    ``inserted`` is False on a replay of the same request (§12, §13)."""

    first_position: int
    count: int
    inserted: bool


# The generic shapes are frozen without slots: Python 3.11 cannot call a
# subscripted alias (``Page[RunRecord](...)``) of a frozen dataclass with slots.

R = TypeVar("R")
"""The record type of a side: the client's ``RunRecord`` or the server's."""

S = TypeVar("S")
"""The run start type of a side."""


@dataclass(frozen=True)
class Page(Generic[R]):
    """One page of records, oldest first; an empty ``next_cursor`` means the end."""

    events: Sequence[R]
    next_cursor: str = ""


Item = TypeVar("Item")
"""The item type of a listing: a side's ``Session`` or ``RunMeta``."""


@dataclass(frozen=True)
class ListPage(Generic[Item]):
    """One page of a listing (§9.8); an empty ``next_page_token`` means the end."""

    items: Sequence[Item]
    next_page_token: str = ""
    status_counts: Sequence[StatusCount] = ()
    """With ``count_statuses``: the matching rows per status (§9.8)."""


@dataclass(frozen=True, slots=True)
class StatusCount:
    """How many rows of a listing have one status, whatever the page (§9.8)."""

    status: str
    """A ``SessionStatus`` or ``RunStatus`` value."""
    count: int
    estimated: bool = False
    """The count stopped at the cap: at least ``count`` rows match."""


@dataclass(frozen=True)
class SessionFilter(Generic[T]):
    """What ListSessions keeps (§9.8.1); empty or None means no restriction."""

    statuses: frozenset[SessionStatus] | None = None
    """None lists every status; an empty set matches nothing."""
    created_after: T | None = None
    """Inclusive lower bound of ``created_at``."""
    created_before: T | None = None
    """Exclusive upper bound of ``created_at``."""
    session_id: str = ""
    """Only this session; not with ``session_id_prefix``."""
    session_id_prefix: str = ""
    """Only sessions whose ID starts with this (never a substring)."""
    newest_first: bool = False
    """Descending order (the newest first) rather than ascending."""


@dataclass(frozen=True)
class RunFilter(Generic[T]):
    """What ListRuns keeps (§9.8.2); empty or None means no restriction."""

    session_id: str = ""
    agent_id: str = ""
    statuses: frozenset[RunStatus] | None = None
    """None lists every status; an empty set matches nothing."""
    started_after: T | None = None
    """Inclusive lower bound of ``started_at``."""
    started_before: T | None = None
    """Exclusive upper bound of ``started_at``."""
    sessionless_only: bool = False
    """Only runs without a session; not together with ``session_id``."""
    run_id: str = ""
    """Only this run; not with ``run_id_prefix``."""
    run_id_prefix: str = ""
    """Only runs whose ID starts with this (never a substring)."""
    agent_id_prefix: str = ""
    """Only runs of agents whose ID starts with this; not with ``agent_id``."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Only runs carrying every one of these labels with this exact value."""
    root_only: bool = False
    """Only runs without a parent; not with ``parent_run_id``."""
    parent_run_id: str = ""
    """Only the children of this run (exact)."""
    newest_first: bool = False
    """Descending order (the newest first) rather than ascending."""


# --- Commands (§3.10) -----------------------------------------------------------


DIGEST_BYTES: Final = 32
"""Length of a current-generation start's ``request_digest`` (§10.6)."""


@dataclass(frozen=True)
class RootRunStart(Generic[S, R]):
    """A root start. Seed-era (``request_digest`` empty) carries ``canceled``,
    the canceled ``run_completed`` written if the session has ended; current
    (a 32-byte digest) carries ``cancellation``, the ``session_ended`` intent
    written then instead (D1, §10.1)."""

    run: S
    started: R
    canceled: R | None = None
    request_digest: bytes = b""
    cancellation: R | None = None


@dataclass(frozen=True)
class ChildRunStart(Generic[S, R]):
    """A child start; the generations as in ``RootRunStart``."""

    run: S
    parent_linked: R
    started: R
    canceled: R | None = None
    request_digest: bytes = b""
    cancellation: R | None = None


@dataclass(frozen=True)
class OneShotRunStart(Generic[S, R]):
    run: S
    started: R
    request_digest: bytes = b""


@dataclass(frozen=True)
class OneShotChildRunStart(Generic[S, R]):
    run: S
    parent_linked: R
    started: R
    request_digest: bytes = b""


@dataclass(frozen=True)
class RunCancellation(Generic[R]):
    run_id: str
    reason: str
    record: R


@dataclass(frozen=True)
class RunSuspension(Generic[R]):
    run_id: str
    suspension: Checkpoint | None
    """Never None in a client command; None on the server when the caller sent none."""
    record: R


@dataclass(frozen=True)
class RunTerminal(Generic[R]):
    run_id: str
    status: RunStatus | None
    """COMPLETED, FAILED or CANCELED; None on the server when the caller sent none."""
    record: R


# --- Start results (§3.11): what each start kind answers on the wire ------------


# ``run_status`` is the run's status observed in the start's own transaction
# (None only from a server that predates it); ``canceled`` is a seed-era stop
# start's record, ``cancellation`` a current one's (§3.11).


@dataclass(frozen=True, slots=True)
class RootRunStartResult:
    """What ``start_root_run`` answers: the outcome, the ``run_started`` record
    and, for a stop, the record that closed the run (§3.11)."""

    outcome: RunStartOutcome
    started: AppendResult
    canceled: AppendResult = NO_RECORD
    run_status: RunStatus | None = None
    cancellation: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class ChildRunStartResult:
    """What ``start_child_run`` answers: as ``RootRunStartResult``, plus the
    ``child_run_linked`` record on the parent (§3.11)."""

    outcome: RunStartOutcome
    parent_record: AppendResult
    started: AppendResult
    canceled: AppendResult = NO_RECORD
    run_status: RunStatus | None = None
    cancellation: AppendResult = NO_RECORD


@dataclass(frozen=True, slots=True)
class OneShotRunStartResult:
    """What a sessionless start answers: its ``run_started`` record (§3.11)."""

    record: AppendResult
    run_status: RunStatus | None = None


@dataclass(frozen=True, slots=True)
class OneShotChildRunStartResult:
    """What ``start_one_shot_child_run`` answers: the parent's link and the
    child's ``run_started`` record (§3.11)."""

    parent_record: AppendResult
    started: AppendResult
    run_status: RunStatus | None = None
