"""Seeds and preparations as the store keeps them, and the transaction
operations on them (docs/contract.md §9.7). Kept apart from ``ports`` like the
namespaces' (``namespace_model``); ``ports.Transaction`` includes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from runstore.contract.seeds import PreparationOperation, SeedDeclaration, SeedRecord
from runstore.server.core.model import Nanos

OPEN: Final = "open"
PUBLISHED: Final = "published"
ABANDONED: Final = "abandoned"
"""An attempt's states: uploading, accepted for its run, closed for ever."""


@dataclass(frozen=True, slots=True)
class SeedOperationRow:
    """A run ID's one original operation, and its accepted attempt if any."""

    operation: PreparationOperation
    published_attempt_id: str | None


@dataclass(frozen=True, slots=True)
class SeedAttemptRow:
    """One attempt: its declaration (``kind`` None when a settlement created
    it before any BeginRunSeed), resolved source end, state and positions."""

    declaration: SeedDeclaration
    source_end: str | None
    state: str
    end_id: int
    seed_end_id: int
    prepared_bytes: int
    has_source: bool
    literal_open: bool
    created_at: Nanos


@dataclass(frozen=True, slots=True)
class StoredSeedRecord:
    """A stored record (its ID and previous ID filled in) and its JSON size."""

    record: SeedRecord
    json_size: int


class SeedTransaction(Protocol):
    """Named operations on seeds inside one database transaction. Every
    mutation of a run's seeds first takes ``lock_seed_operation`` of its run."""

    async def lock_seed_operation(
        self, run_id: str, record: PreparationOperation | None, now: Nanos
    ) -> SeedOperationRow | None:
        """The run's operation, locked until the transaction ends. With
        ``record``, first records it when the run has none (as of ``now``)."""
        ...

    async def seed_operation(self, run_id: str) -> SeedOperationRow | None: ...

    async def seed_attempt(
        self, run_id: str, attempt_id: str, operation: SeedOperationRow | None = None
    ) -> SeedAttemptRow | None:
        """The attempt, its declaration completed from the run's operation:
        ``operation`` when the caller already holds it (not read again)."""
        ...

    async def insert_seed_attempt(self, attempt: SeedAttemptRow) -> None: ...

    async def update_seed_attempt(self, attempt: SeedAttemptRow) -> None:
        """Stores the attempt's state, positions and flags (its identity stays)."""
        ...

    async def publish_seed(self, run_id: str, attempt_id: str) -> None:
        """Marks the attempt published and accepted for its run."""
        ...

    async def seed_record_by_key(
        self, run_id: str, attempt_id: str, key: str
    ) -> StoredSeedRecord | None: ...

    async def insert_seed_record(
        self, run_id: str, attempt_id: str, stored: StoredSeedRecord
    ) -> None: ...

    async def seed_record_sizes(
        self, run_id: str, attempt_id: str, after: int, through: int, limit: int
    ) -> list[int]:
        """JSON sizes of the records with ``after < ID <= through``, in ID
        order, at most ``limit`` (without reading their bytes)."""
        ...

    async def seed_records(
        self, run_id: str, attempt_id: str, after: int, through: int
    ) -> list[StoredSeedRecord]:
        """The records with ``after < ID <= through``, in ID order."""
        ...

    async def delete_session_seeds(self, session_id: str) -> None:
        """Every seed operation, attempt and record of the session's runs."""
        ...

    async def expired_seed_attempts(
        self, created_before: Nanos, limit: int
    ) -> list[tuple[str, str]]:
        """(run_id, attempt_id) of at most ``limit`` open or abandoned attempts
        begun before ``created_before``, oldest first. A hint: the core
        re-checks each under its operation's lock."""
        ...

    async def delete_seed_attempt(self, run_id: str, attempt_id: str) -> None:
        """The attempt and its records; its operation too when it has no other
        attempt and no publication."""
        ...

    async def synchronous_run(self, run_id: str) -> str | None:
        """The seed end of a run StartSynchronousRun created; None for any
        other run ID (§9.2.5)."""
        ...

    async def insert_synchronous_run(self, run_id: str, seed_end_id: str) -> None: ...
