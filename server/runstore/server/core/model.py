"""The server core's own shapes of the contract's values (§3).

The shared vocabulary (status enums, checkpoints, append results, command
shapes) is ``runstore.contract.model``; the server imports it from there. What
is defined here has another shape on the server, or is the server's alone.
Times are integer nanoseconds since the Unix epoch, UTC (``Nanos``), exact and
able to carry full precision (D7); ``None`` means the caller sent no
timestamp. Caller-supplied records and run starts are drafts whose fields may
be missing, so that validation can name what is missing (V1). Record and start
times are checked to be whole milliseconds by validation, not by these types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from runstore.contract import model as contract
from runstore.contract.model import NO_RECORD, AppendResult, Checkpoint, RunStartOutcome, RunStatus
from runstore.server.core.fast_paths import Precondition

Nanos = int
"""UTC nanoseconds since the Unix epoch."""

NANOS_PER_MILLI = 1_000_000

PageKey = tuple[Nanos, str]
"""The ordering key of a listed row (ListSessions, ListRuns): its time, then its ID."""


# --- Stored state -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Session(contract.Session[Nanos]):
    """A session row (§3.3), its times in nanoseconds."""


@dataclass(frozen=True, slots=True)
class LifecycleKeys:
    """The event key chosen by the first write of each lifecycle slot (§8)."""

    start: str = ""
    parent_link: str = ""
    cancellation: str = ""
    suspension: str = ""
    terminal: str = ""


@dataclass(frozen=True, slots=True)
class RunState(contract.RunMeta[Nanos]):
    """A run row: the wire's RunMeta (§3.5) plus lifecycle keys (§8) and checkpoint (§3.6)."""

    keys: LifecycleKeys = field(default_factory=LifecycleKeys)
    checkpoint: Checkpoint | None = None
    request_digest: bytes = b""
    """The digest its first start bound (§10.6); empty for a seed-era start,
    which is what decides the run's generation (D1)."""
    seed_end_id: str = ""
    """The published seed end the run started from; empty without a seed."""
    successor_run_id: str = ""
    """The first current-generation continuation of this run (§10.2); empty otherwise."""
    failure: contract.RunFailureSummary | None = None
    """A failed run's failure, as its ending record gave it; None otherwise."""
    ended_at: Nanos | None = None
    """The time of the record that ended the run for good (completed, failed or
    canceled); None while it runs or is suspended."""

    @property
    def current(self) -> bool:
        """Whether a current-generation engine start created the run."""
        return bool(self.request_digest)


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
    successor_run_id: str | None = None
    finished_at: Nanos | None = None
    """The ending record's timestamp, when the change ends the run for good."""
    failure: contract.RunFailureSummary | None = None
    """A failed ending's failure (§5.3), stored on the run for listings."""


@dataclass(frozen=True, slots=True)
class RunFinish:
    """What sessionless retention decides a run by (§9.10.2)."""

    run_id: str
    session_id: str
    parent_run_id: str
    status: RunStatus
    finished_at: Nanos | None
    """The timestamp of the record that ended the run; None while it has not."""


# --- Records ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamespaceRetention:
    """An active namespace's retention overrides in seconds (None: the
    server's ``--retain-*`` setting applies), docs/namespaces.md."""

    name: str
    ended_sessions: float | None = None
    sessionless_runs: float | None = None


@dataclass(frozen=True, slots=True)
class RecordDraft:
    """A RunRecord as a caller supplies it (§3.7): no ID yet, maybe no timestamp."""

    event_key: str
    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    type: str
    payload: bytes
    timestamp: Nanos | None
    namespace: str
    """The namespace of the call that made the draft, named where the draft
    is made: a group commit writes each of its rows in its own
    (docs/namespaces.md)."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A RunRecord as stored: the caller's fields plus its run-scoped ID, in nanoseconds."""

    id: int
    event_key: str
    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    type: str
    payload: bytes
    timestamp: Nanos

    @classmethod
    def from_draft(cls, record: RecordDraft, record_id: int) -> RunRecord:
        """``record`` as stored under ``record_id`` (its timestamp is set: V1)."""
        assert record.timestamp is not None
        return cls(
            record_id,
            record.event_key,
            record.run_id,
            record.agent_id,
            record.session_id,
            record.turn_id,
            record.type,
            record.payload,
            record.timestamp,
        )

    def same_as(self, record: RecordDraft) -> bool:
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
    """A RunStart as a caller supplies it (§3.4); missing fields stay empty for V3."""

    run_id: str = ""
    agent_id: str = ""
    session_id: str = ""
    parent_run_id: str = ""
    predecessor_run_id: str = ""
    started_at: Nanos | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    seed_end_id: str = ""


Page: TypeAlias = contract.Page[RunRecord]

RootRunStart: TypeAlias = contract.RootRunStart[RunStart, RecordDraft | None]
ChildRunStart: TypeAlias = contract.ChildRunStart[RunStart, RecordDraft | None]
OneShotRunStart: TypeAlias = contract.OneShotRunStart[RunStart, RecordDraft | None]
OneShotChildRunStart: TypeAlias = contract.OneShotChildRunStart[RunStart, RecordDraft | None]
RunCancellation: TypeAlias = contract.RunCancellation[RecordDraft | None]
RunSuspension: TypeAlias = contract.RunSuspension[RecordDraft | None]
RunTerminal: TypeAlias = contract.RunTerminal[RecordDraft | None]


@dataclass(frozen=True, slots=True)
class RunEnding:
    """RecordRunTerminal's common case as one write (``Database.end_if_running``).

    ``record`` and ``status`` passed every check that does not need the stored
    run; the checks that do are conditions on the run row: it is still running
    with no terminal key, has the record's agent and session, the payload's
    ``labels``, and a cancellation reason in ``reasons`` (None: any reason).
    """

    record: RecordDraft
    status: RunStatus
    updated_at: Nanos
    labels: Mapping[str, str]
    reasons: tuple[str, str] | None
    """The stored cancellation reasons the record agrees with (both may be equal)."""
    failure: contract.RunFailureSummary | None = None
    """A failed ending's failure, stored on the run (``RunChange.failure``)."""


@dataclass(frozen=True, slots=True)
class GuardedChange:
    """RecordRunCancellation's or RecordRunSuspension's common case as one
    write (``Database.change_if_running``).

    ``record`` and ``change`` (exactly what the full rules would write) passed
    every check that does not need the stored run; the checks that do are
    ``preconditions`` (``fast_paths.CANCEL`` or ``SUSPEND``), conditions on the
    run row.
    """

    preconditions: tuple[Precondition, ...]
    record: RecordDraft
    change: RunChange


# --- Results ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunStartResult:
    """Result of every start; fields a start kind does not have stay ``NO_RECORD``."""

    outcome: RunStartOutcome
    run_status: RunStatus
    """The run's status seen in the start's transaction (§3.11)."""
    started: AppendResult
    canceled: AppendResult = NO_RECORD
    parent_record: AppendResult = NO_RECORD
    cancellation: AppendResult = NO_RECORD


# --- Product memory (§12, D5) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredAppend:
    """What an idempotent append stored, so that a retry can repeat its result."""

    digest: bytes
    first_position: int
    count: int


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One memory event; ``data`` is a JSON object kept byte for byte."""

    type: str
    timestamp: Nanos | None
    data: bytes
    labels: Mapping[str, str] = field(default_factory=dict)


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
