"""What the store core needs from a database, and nothing more.

The core states the contract's rules once; a database backend (SQLite,
PostgreSQL) implements these two protocols. One call of ``Database.write`` is
one transaction: everything the function reads and writes commits together or
not at all (§7). A backend may run the function more than once when the
database reports a serialisation failure, so transaction functions must not
touch anything but their transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol, TypeVar

from runstore.server.core.model import (
    Nanos,
    Record,
    Run,
    RunChange,
    Session,
    StoredRecord,
)

T = TypeVar("T")


class _Purged:
    """The type of ``PURGED``."""

    _instance: _Purged | None = None

    def __new__(cls) -> _Purged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "PURGED"


PURGED: Final = _Purged()
"""A session lookup found a tombstone (§10.4)."""

SessionLookup = Session | _Purged | None


class Transaction(Protocol):
    """Named operations inside one database transaction.

    ``for_update=True`` asks a backend with row locks to lock the row until the
    transaction ends, so that checks and writes see one consistent state across
    server replicas; a backend that serialises writers (SQLite) may ignore it.
    """

    async def session(self, session_id: str, *, for_update: bool = False) -> SessionLookup: ...

    async def run(self, run_id: str, *, for_update: bool = False) -> Run | None: ...

    async def record_by_key(self, run_id: str, event_key: str) -> StoredRecord | None: ...

    async def record_by_id(self, run_id: str, record_id: int) -> StoredRecord | None: ...

    async def run_records(
        self, run_id: str, after: int, limit: int, max_bytes: int
    ) -> list[StoredRecord]:
        """A run's records with ID greater than ``after``, in ID order.

        Fetch bound, not a page rule: at most ``limit`` records, and none after
        the first whose payload brings the running total above ``max_bytes``
        (so a page of large records never loads more than it could return).
        """
        ...

    async def session_records(
        self, session_id: str, after: int, limit: int, max_bytes: int
    ) -> list[tuple[int, StoredRecord]]:
        """(position, record) pairs after position ``after`` in session order
        (D3), bounded like ``run_records``."""
        ...

    async def transcript_records(
        self, run_id: str, after: int, through: int, limit: int, max_bytes: int
    ) -> list[StoredRecord]:
        """Transcript records with ``after < ID <= through``, bounded like
        ``run_records``."""
        ...

    async def runs_by_session(self, session_id: str) -> list[Run]:
        """Every run of the session, ordered by started_at, then run_id."""
        ...

    async def session_has_running_runs(self, session_id: str) -> bool: ...

    async def insert_session(self, session: Session) -> None: ...

    async def end_session(self, session_id: str, ended_at: Nanos) -> None: ...

    async def purge_session(self, session_id: str, purged_at: Nanos) -> None:
        """Deletes the session with its runs and records and leaves a tombstone."""
        ...

    async def insert_run(self, run: Run) -> None: ...

    async def change_run(self, run_id: str, change: RunChange) -> None: ...

    async def append_record(self, record: Record) -> int:
        """Stores ``record`` with its run's next ID and, when the record belongs
        to a session, the session's next position (D3). Returns the ID."""
        ...


class Database(Protocol):
    """Runs transaction functions; the one seam between the core and storage."""

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        """Runs ``fn`` in a read-write transaction and commits it."""
        ...

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        """Runs ``fn`` in a read-only transaction (one consistent snapshot)."""
        ...
