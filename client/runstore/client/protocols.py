"""The Store and SessionAdmin protocols: the contract's methods in Python (§2).

``Store`` is what an agent worker needs (the worker-facing methods);
``SessionAdmin`` is the host's. ``RemoteStore`` and ``RemoteSessionAdmin``
implement them over gRPC; an in-process implementation may implement the same
protocols, so worker code does not care where the store lives.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Protocol

from runstore.client.model import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    ChildRunStartResult,
    OneShotChildRunStart,
    OneShotChildRunStartResult,
    OneShotRunStart,
    OneShotRunStartResult,
    Page,
    PreparationOperation,
    RootRunStart,
    RootRunStartResult,
    RunCancellation,
    RunMeta,
    RunPreparation,
    RunRecord,
    RunRepairResult,
    RunSeed,
    RunStatus,
    RunSuspension,
    RunTerminal,
    SeedAppend,
    SeedDeclaration,
    SeedPage,
    SeedPublication,
    Session,
    SessionStatus,
)


class Store(Protocol):
    """The worker-facing runtime store (Profile S with repairs and transcript
    reads). ``RemoteStore`` also implements ``SeedStore``."""

    async def load_session_status(self, session_id: str) -> SessionStatus: ...

    async def start_root_run(self, command: RootRunStart) -> RootRunStartResult: ...

    async def start_child_run(self, command: ChildRunStart) -> ChildRunStartResult: ...

    async def start_one_shot_run(self, command: OneShotRunStart) -> OneShotRunStartResult: ...

    async def start_one_shot_child_run(
        self, command: OneShotChildRunStart
    ) -> OneShotChildRunStartResult: ...

    async def append_run_record(self, record: RunRecord) -> AppendResult: ...

    async def append_run_records(self, records: Sequence[RunRecord]) -> list[AppendResult]:
        """Several records of one run at once, all or none (§9.3.1)."""
        ...

    async def record_run_cancellation(self, command: RunCancellation) -> AppendResult: ...

    async def record_run_suspension(self, command: RunSuspension) -> AppendResult: ...

    async def record_run_terminal(self, command: RunTerminal) -> AppendResult: ...

    async def repair_run_suspension(self, command: RunSuspension) -> RunRepairResult: ...

    async def repair_run_terminal(self, command: RunTerminal) -> RunRepairResult: ...

    async def load_run(self, run_id: str) -> RunMeta: ...

    async def load_run_suspension(self, run_id: str) -> Checkpoint: ...

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page: ...

    async def list_session_run_records(self, session_id: str, cursor: str, limit: int) -> Page: ...

    async def list_run_transcript_records(
        self, run_id: str, through_record_id: str, after_record_id: str, limit: int
    ) -> Page: ...


class SeedStore(Protocol):
    """Seeds and preparations of goa-ai's current contract (§9.7)."""

    async def start_synchronous_run(self, command: OneShotRunStart) -> OneShotRunStartResult:
        """§9.2.5: a callback's start attaching the run's published seed."""
        ...

    async def begin_run_seed(self, declaration: SeedDeclaration) -> RunSeed: ...

    async def append_run_seed(self, command: SeedAppend) -> str:
        """The record's ID."""
        ...

    async def publish_run_seed(self, publication: SeedPublication) -> None: ...

    async def find_run_preparation(self, operation: PreparationOperation) -> RunPreparation | None:
        """The accepted preparation; None when nothing is published."""
        ...

    async def settle_run_preparation(
        self, operation: PreparationOperation, attempt_id: str
    ) -> RunPreparation | None:
        """The accepted preparation; None when the attempt is now abandoned."""
        ...

    async def load_run_seed(self, run_id: str, end_id: str) -> RunSeed: ...

    async def list_run_seed_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage: ...

    async def list_run_preparation_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage: ...


class SessionAdmin(Protocol):
    """The host's session administration (§9.1, D6)."""

    async def create_session(self, session_id: str, created_at: datetime) -> Session: ...

    async def load_session(self, session_id: str) -> Session: ...

    async def end_session(self, session_id: str, ended_at: datetime) -> Session: ...

    async def purge_session(self, session_id: str) -> None: ...

    async def list_runs_by_session(
        self, session_id: str, statuses: Collection[RunStatus] = ()
    ) -> list[RunMeta]: ...
