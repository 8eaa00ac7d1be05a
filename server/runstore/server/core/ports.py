"""What the store core needs from a database, and nothing more.

The core states the contract's rules once; a database backend (SQLite,
PostgreSQL) implements these two protocols. One call of ``Database.write`` is
one transaction: everything the function reads and writes commits together or
not at all (§7). A backend may run the function more than once when the
database reports a serialisation failure, so transaction functions must not
touch anything but their transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol, TypeVar

from runstore.contract.model import RunFilter, RunStatus, SessionFilter, SessionStatus
from runstore.server.core.model import (
    ContextHead,
    ContextVersion,
    GuardedChange,
    MemoryEvent,
    NamespaceRetention,
    Nanos,
    PageKey,
    RecordDraft,
    RunChange,
    RunEnding,
    RunFinish,
    RunRecord,
    RunState,
    Session,
    StoredAppend,
)
from runstore.server.core.namespace_model import NamespaceTransaction
from runstore.server.core.seed_model import SeedTransaction

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


@dataclass(frozen=True, slots=True)
class RecordTarget:
    """Everything writing a record to a run depends on, read in one go."""

    run: RunState | None
    """The run, or None when it does not exist."""
    session: SessionLookup
    """The run's session (None for a sessionless run)."""
    existing: RunRecord | None
    """The run's record under the event key, if any."""


class Counted(NamedTuple):
    """A listing's count of one status (``Transaction.count_runs``)."""

    matched: int
    """Rows that matched among those read."""
    complete: bool
    """Every row of the status was read: ``matched`` is exact, not a lower bound."""


class Transaction(NamespaceTransaction, SeedTransaction, Protocol):
    """Named operations inside one database transaction.

    ``for_update=True`` asks a backend with row locks to lock the row until the
    transaction ends, so that checks and writes see one consistent state across
    server replicas; a backend that serialises writers (SQLite) may ignore it.
    """

    async def session(self, session_id: str, *, for_update: bool = False) -> SessionLookup: ...

    async def run(self, run_id: str, *, for_update: bool = False) -> RunState | None: ...

    async def record_target(
        self, run_id: str, event_key: str, *, for_update: bool = False
    ) -> RecordTarget:
        """The run, its session and the record under ``event_key``; with
        ``for_update`` the session and the run are locked (in that order)."""
        ...

    async def record_by_key(self, run_id: str, event_key: str) -> RunRecord | None: ...

    async def record_by_id(self, run_id: str, record_id: int) -> RunRecord | None: ...

    async def records_by_keys(self, run_id: str, event_keys: Sequence[str]) -> dict[str, RunRecord]:
        """The run's records under any of ``event_keys`` (distinct), by key."""
        ...

    async def run_tail(self, run_id: str) -> int:
        """The ID of the run's newest record (IDs are dense: its record count)."""
        ...

    async def session_tail(self, session_id: str) -> int:
        """The session position of its newest record (0: none)."""
        ...

    async def run_records(
        self, run_id: str, after: int, limit: int, max_bytes: int
    ) -> list[RunRecord]:
        """A run's records with ID greater than ``after``, in ID order.

        Fetch bound, not a page rule: at most ``limit`` records, and none after
        the first whose payload brings the running total above ``max_bytes``
        (so a page of large records never loads more than it could return).
        """
        ...

    async def typed_run_records(
        self,
        run_id: str,
        after: int,
        through: int,
        types: Sequence[str],
        limit: int,
        max_bytes: int,
    ) -> list[RunRecord]:
        """The run's records of one of ``types`` (exactly ``paging.TYPE_SLOTS`` names,
        repeats allowed) with ``after < ID <= through``, bounded like
        ``run_records``."""
        ...

    async def session_records(
        self, session_id: str, after: int, limit: int, max_bytes: int
    ) -> list[tuple[int, RunRecord]]:
        """(position, record) pairs after position ``after`` in session order
        (D3), bounded like ``run_records``."""
        ...

    async def transcript_records(
        self, run_id: str, after: int, through: int, limit: int, max_bytes: int
    ) -> list[RunRecord]:
        """Transcript records with ``after < ID <= through``, bounded like
        ``run_records``."""
        ...

    async def runs_by_session(self, session_id: str) -> list[RunState]:
        """Every run of the session, ordered by started_at, then run_id."""
        ...

    async def session_has_running_runs(self, session_id: str) -> bool: ...

    async def purgeable_sessions(self, ended_before: Nanos, limit: int) -> list[str]:
        """Ended before ``ended_before``, no running run; oldest ended first."""
        ...

    async def namespace_retention(self) -> list[NamespaceRetention]:
        """Every active namespace (whatever the transaction's) with its
        retention overrides, by name."""
        ...

    async def run_purged(self, run_id: str) -> bool:
        """Whether retention deleted a sessionless run with this ID (a tombstone)."""
        ...

    async def purgeable_sessionless_runs(
        self, finished_before: Nanos, after: tuple[Nanos, str] | None, limit: int
    ) -> list[tuple[str, Nanos]]:
        """(run_id, finished_at) of finished sessionless root runs finished before
        ``finished_before`` whose direct children all did too, after the keyset
        position ``after``, oldest first. A hint: the core re-checks under locks."""
        ...

    async def lock_run_ending(self, run_id: str) -> RunFinish | None: ...

    async def lock_child_run_endings(self, run_id: str) -> list[RunFinish]:
        """The run's sessionless children, each locked (after their parent)."""
        ...

    async def purge_sessionless_run(self, run_id: str, purged_at: Nanos) -> None:
        """Deletes the run and its records and leaves a run tombstone."""
        ...

    async def list_sessions(
        self, query: SessionFilter[Nanos], after: PageKey | None, limit: int
    ) -> list[Session]:
        """At most ``limit`` live sessions matching ``query`` with (created_at,
        session_id) after ``after`` in the query's order (ascending, or
        descending when ``newest_first``), in that order."""
        ...

    async def count_sessions(
        self, query: SessionFilter[Nanos], cap: int
    ) -> dict[SessionStatus, Counted]:
        """How many live sessions match ``query`` per status, reading at most
        ``cap`` rows of each (statuses with none may be missing)."""
        ...

    async def list_runs(
        self, query: RunFilter[Nanos], after: PageKey | None, limit: int
    ) -> list[RunState]:
        """At most ``limit`` runs matching ``query`` with (started_at, run_id)
        after ``after`` in the query's order, in that order; without their
        checkpoints."""
        ...

    async def count_runs(self, query: RunFilter[Nanos], cap: int) -> dict[RunStatus, Counted]:
        """How many runs match ``query`` per status, reading at most ``cap``
        rows of each (statuses with none may be missing)."""
        ...

    async def insert_session(self, session: Session) -> None: ...

    async def end_session(self, session_id: str, ended_at: Nanos) -> None: ...

    async def purge_session(self, session_id: str, purged_at: Nanos) -> None:
        """Deletes the session with its runs and records and leaves a tombstone."""
        ...

    async def insert_run(self, run: RunState) -> None: ...

    async def change_run(self, run_id: str, change: RunChange) -> None: ...

    async def append_record(self, record: RecordDraft) -> int:
        """Stores ``record`` with its run's next ID and, when the record belongs
        to a session, the session's next position (D3). Returns the ID."""
        ...

    async def append_records(self, records: Sequence[RecordDraft]) -> list[int]:
        """``append_record`` for each of ``records`` (all of one run, with the
        run's lock held, each checked new) in order, as one write. Returns the IDs."""
        ...

    # --- Memory store (§12) ------------------------------------------------------

    async def memory_event_count(self, agent_id: str, run_id: str) -> int:
        """Events stored for (agent, run); 0 for an unknown run."""
        ...

    async def delete_memory_run(self, agent_id: str, run_id: str) -> bool:
        """Deletes the run's events and appends under its lock; False if unknown."""
        ...

    async def memory_events(
        self, agent_id: str, run_id: str, after: int, limit: int
    ) -> list[MemoryEvent]:
        """At most ``limit`` events from position ``after`` (0-based), in order."""
        ...

    async def lock_memory_run(self, agent_id: str, run_id: str) -> int:
        """Creates the run's history if needed, locks it, returns its length."""
        ...

    async def append_memory_events(
        self, agent_id: str, run_id: str, first_position: int, events: list[MemoryEvent]
    ) -> None:
        """Stores ``events`` at consecutive positions from ``first_position``."""
        ...

    async def memory_append_request(
        self, agent_id: str, run_id: str, idempotency_key: str
    ) -> StoredAppend | None: ...

    async def remember_memory_append(
        self, agent_id: str, run_id: str, idempotency_key: str, stored: StoredAppend
    ) -> None: ...

    # --- Context store (D5) ------------------------------------------------------

    async def context_head(self, key: str) -> ContextHead | None: ...

    async def lock_context(self, key: str, now: Nanos) -> ContextHead:
        """Creates the key if needed (version 0, written ``now``), locks it,
        returns its head."""
        ...

    async def context_version(self, key: str, version: int) -> ContextVersion | None: ...

    async def save_context_version(self, key: str, version: ContextVersion, keep_from: int) -> None:
        """Stores ``version`` as current and drops versions older than ``keep_from``."""
        ...

    async def delete_context(self, key: str) -> bool:
        """Removes the key's versions, transcript and requests; False if unknown."""
        ...

    async def context_transcript(self, key: str, after: int, limit: int) -> list[bytes]: ...

    async def append_context_transcript(
        self, key: str, first_position: int, messages: list[bytes], now: Nanos
    ) -> None: ...

    async def purge_stale_contexts(self, written_before: Nanos, limit: int) -> int:
        """Deletes up to ``limit`` keys not written since ``written_before``
        (oldest first), skipping any a writer holds; returns how many."""
        ...

    async def context_append_request(
        self, key: str, idempotency_key: str
    ) -> StoredAppend | None: ...

    async def remember_context_append(
        self, key: str, idempotency_key: str, stored: StoredAppend
    ) -> None: ...


class Database(Protocol):
    """Runs transaction functions; the one seam between the core and storage."""

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        """Runs ``fn`` in a read-write transaction and commits it."""
        ...

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        """AppendRunRecord's common case (§9.3) as one atomic write.

        Stores ``record`` and returns its ID exactly when every precondition
        of ``fast_paths.APPEND`` holds for the state the write finds;
        otherwise writes nothing and returns None, also when it lost a race,
        and the core applies the full rules. A backend may run it without
        BEGIN and COMMIT, and needs to take the same locks as
        ``Transaction.record_target(for_update=True)``.
        """
        ...

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        """StartRootRun's and StartOneShotRun's common case (§9.2.1, §9.2.3) as
        one atomic write: a first seed-era start without predecessor, in an
        active session or without one.

        Stores ``run`` (a new running run) and its ``started`` record and
        returns the record's ID exactly when every precondition of
        ``fast_paths.START`` (``ONE_SHOT_START`` for a sessionless run) holds
        for the state the write finds; otherwise writes nothing and returns
        None, also when it lost a race, and the core applies the full rules.
        Takes the session's lock.
        """
        ...

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        """StartChildRun's and StartOneShotChildRun's common case (§9.2.2,
        §9.2.4) as one atomic write: a first seed-era start without
        predecessor of a child of a running parent, in an active session or
        without one.

        Stores ``run`` (a new running run), ``link`` on the parent and the
        run's ``started`` record, and returns the link's and the started
        record's IDs exactly when every precondition of
        ``fast_paths.CHILD_START`` (``ONE_SHOT_CHILD_START`` for a sessionless
        run) holds for the state the write finds; otherwise writes nothing
        and returns None, also when it lost a race, and the core applies the
        full rules. Takes the session's lock, then the parent's.
        """
        ...

    async def end_if_running(self, ending: RunEnding) -> int | None:
        """RecordRunTerminal's common case (§9.4.3) as one atomic write.

        Stores ``ending.record``, sets the run's terminal status, and returns
        the record's ID exactly when every precondition of ``fast_paths.END``
        holds for the state the write finds; otherwise writes nothing and
        returns None (also after a lost race), and the core applies the full
        rules. Takes the same locks as ``Transaction.record_target(for_update=True)``.
        """
        ...

    async def change_if_running(self, change: GuardedChange) -> int | None:
        """RecordRunCancellation's and RecordRunSuspension's common case
        (§9.4.1, §9.4.2) as one atomic write.

        Stores ``change.record``, applies ``change.change`` to its run, and
        returns the record's ID exactly when every precondition of
        ``change.preconditions`` (``fast_paths.CANCEL`` or ``SUSPEND``) holds
        for the state the write finds; otherwise writes nothing and returns
        None (also after a lost race), and the core applies the full rules.
        Locks as ``end_if_running``.
        """
        ...

    async def append_records_if_writable(self, batch: Sequence[RecordDraft]) -> list[int] | None:
        """AppendRunRecords' common case (§9.3.1) as one atomic write.

        ``batch`` is one run's records with one agent and session and distinct
        keys (``batch_rules.one_owner_distinct_keys``). Stores them all with
        the run's next IDs in order and returns the IDs exactly when
        ``fast_paths.APPEND`` holds for every record in the state the
        write finds; otherwise writes nothing and returns None, and the core
        applies the full rules. Locks as ``append_if_writable``.
        """
        ...

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        """Runs ``fn`` in a read-only transaction (one consistent snapshot)."""
        ...


class Wakeups(Protocol):
    """Hints for watchers that records of a session or run may have committed.

    A hint, never data: a watcher always re-reads from its own cursor, so a
    lost or spurious wake-up costs a delay or a read, never a record. Keys are
    ``session_key`` and ``run_key``. Every method runs on the server's loop.
    """

    def subscribe(self, key: str) -> AbstractContextManager[asyncio.Event]:
        """An event set by every wake-up of ``key`` while the context is open;
        the watcher clears it before each read, so none is missed."""
        ...

    def wake_all(self) -> None:
        """Sets every subscribed event (shutdown: watchers look at once)."""
        ...

    async def durable(self) -> None:
        """Returns once every commit a read that has already finished could see
        is durable (SQLite FULL: its WAL is synced). Immediate elsewhere."""
        ...


def session_key(namespace: str, session_id: str) -> str:
    """The wake-up key of a session's records in ``namespace`` (a namespace
    name has no ``:``, so keys of two namespaces never meet)."""
    return f"s:{namespace}:{session_id}"


def run_key(namespace: str, run_id: str) -> str:
    """The wake-up key of a run's records in ``namespace``."""
    return f"r:{namespace}:{run_id}"
