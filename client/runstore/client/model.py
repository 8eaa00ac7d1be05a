"""Typed values of the runtime store contract for Python callers (§3).

Immutable dataclasses; times are timezone-aware ``datetime`` in UTC, payloads
and checkpoint data ``bytes``, labels ``dict[str, str]``. No caller needs the
generated protobuf classes; ``runstore.client.convert`` maps both ways.

The vocabulary the server shares (status enums, ``Checkpoint``,
``AppendResult``, the command shapes) is ``runstore.contract.model``,
re-exported here with the commands and ``Page`` bound to the client's
``RunStart`` and ``RunRecord``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runstore.contract import model as contract
from runstore.contract.model import (
    NO_RECORD,
    AppendResult,
    Checkpoint,
    ChildRunStartResult,
    OneShotChildRunStartResult,
    OneShotRunStartResult,
    RootRunStartResult,
    RunFailureSummary,
    RunRepairOutcome,
    RunRepairResult,
    RunStartOutcome,
    RunStatus,
    SessionStatus,
    StatusCount,
)
from runstore.contract.seeds import (
    HistoryPrefix,
    LiteralPart,
    PreparationOperation,
    RenderedPrompt,
    RunPreparation,
    RunSeed,
    SeedAppend,
    SeedDeclaration,
    SeedKind,
    SeedPage,
    SeedPublication,
    SeedRecord,
)

__all__ = [
    "NO_RECORD",
    "AppendResult",
    "Checkpoint",
    "ChildRunStart",
    "ChildRunStartResult",
    "HistoryPrefix",
    "LiteralPart",
    "OneShotChildRunStart",
    "OneShotChildRunStartResult",
    "OneShotRunStart",
    "OneShotRunStartResult",
    "Page",
    "PreparationOperation",
    "RenderedPrompt",
    "RootRunStart",
    "RootRunStartResult",
    "RunCancellation",
    "RunFailureSummary",
    "RunMeta",
    "RunPage",
    "RunPreparation",
    "RunRecord",
    "RunRepairOutcome",
    "RunRepairResult",
    "RunSeed",
    "RunStart",
    "RunStartOutcome",
    "RunStatus",
    "RunSuspension",
    "RunTerminal",
    "SeedAppend",
    "SeedDeclaration",
    "SeedKind",
    "SeedPage",
    "SeedPublication",
    "SeedRecord",
    "Session",
    "SessionPage",
    "SessionStatus",
    "StatusCount",
]


@dataclass(frozen=True, slots=True)
class Session(contract.Session[datetime]):
    """A session (§3.3), its times as UTC ``datetime``."""


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
    seed_end_id: str = ""
    """The published seed's history end a current-generation or synchronous
    start attaches (§9.7.9); empty for a seed-era start."""


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
class RunMeta(contract.RunMeta[datetime]):
    """Run metadata (§3.5), its times as UTC ``datetime``."""

    seed_end_id: str = ""
    """The published seed end the run started from; empty without a seed."""
    successor_run_id: str = ""
    """The first current-generation continuation of this run (§10.2); empty otherwise."""
    failure: RunFailureSummary | None = None
    """A failed run's failure (message, kind, code, retryable); None otherwise."""
    ended_at: datetime | None = None
    """When the record that ended the run for good was written (completed,
    failed or canceled); None while it runs or is suspended."""

    @property
    def duration(self) -> timedelta | None:
        """From its start to the record that ended it; None until it ends."""
        return None if self.ended_at is None else self.ended_at - self.started_at


class Page(contract.Page[RunRecord]):
    """One page of records, oldest first; an empty ``next_cursor`` means the end."""


class SessionPage(contract.ListPage[Session]):
    """One page of ListSessions: ``items`` and ``next_page_token``."""


class RunPage(contract.ListPage[RunMeta]):
    """One page of ListRuns: ``items`` and ``next_page_token``."""


# --- Commands (§3.10): the shared shapes bound to the client's values ------------


class RootRunStart(contract.RootRunStart[RunStart, RunRecord]):
    """StartRootRun: the run, its ``run_started`` and its ended-session record."""


class ChildRunStart(contract.ChildRunStart[RunStart, RunRecord]):
    """StartChildRun: also the parent's ``child_run_linked`` record."""


class OneShotRunStart(contract.OneShotRunStart[RunStart, RunRecord]):
    """StartOneShotRun: a sessionless run and its ``run_started``."""


class OneShotChildRunStart(contract.OneShotChildRunStart[RunStart, RunRecord]):
    """StartOneShotChildRun: a sessionless child and the parent's link."""


class RunCancellation(contract.RunCancellation[RunRecord]):
    """RecordRunCancellation: the reason and its ``runtime.cancellation_intent``."""


class RunSuspension(contract.RunSuspension[RunRecord]):
    """RecordRunSuspension (and its repair): the checkpoint and ``run_suspended``."""


class RunTerminal(contract.RunTerminal[RunRecord]):
    """RecordRunTerminal (and its repair): the status and ``run_completed``."""


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """One retention batch: the IDs this call purged and whether more matched."""

    purged_ids: tuple[str, ...]
    more: bool
