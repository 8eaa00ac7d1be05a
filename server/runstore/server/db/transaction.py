"""The store's named database operations, written once as SQL for every backend.

A backend subclasses ``SqlTransaction`` and supplies three primitives over its
driver's connection; statements come compiled for its dialect
(``statements.Statements``) and rows are decoded by ``row_codecs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runstore.contract.model import RunFilter, RunStatus, SessionFilter, SessionStatus
from runstore.server.call_scope import Scope
from runstore.server.core.model import (
    NANOS_PER_MILLI,
    GuardedChange,
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
)
from runstore.server.core.ports import (
    PURGED,
    Counted,
    RecordTarget,
    SessionLookup,
    Transaction,
    run_key,
    session_key,
)
from runstore.server.db import row_codecs
from runstore.server.db.compiled import Compiled
from runstore.server.db.fast_path_sql import LINK_FIELDS, change_if_running_name
from runstore.server.db.memory_context_ops import MemoryContextOperations
from runstore.server.db.namespace_sql import NamespaceOperations, NamespaceStatements
from runstore.server.db.seed_sql import SeedOperations, SeedStatements
from runstore.server.db.statements import Statements

_RUN_WIDTH = len(row_codecs.RUN_COLUMNS)
_SESSION_END = _RUN_WIDTH + len(row_codecs.SESSION_COLUMNS) - 1
"""Where a record target's session columns (all but the id) end."""


_MIN_BIGINT = -(2**63)


def _run_finish(row: Any) -> RunFinish:
    finished_ms = row[4]
    return RunFinish(
        run_id=str(row[0]),
        session_id=str(row[1]),
        parent_run_id=str(row[2]),
        status=RunStatus(row[3]),
        finished_at=int(finished_ms) * NANOS_PER_MILLI if finished_ms is not None else None,
    )


class SqlTransaction(NamespaceOperations, SeedOperations, MemoryContextOperations, Transaction):
    """Every named operation of ``Transaction`` as SQL, over three primitives
    each backend provides (``_one``, ``_all``, ``_run``)."""

    row_locks: bool = False
    """Whether the backend takes row locks (``FOR UPDATE``); SQLite serialises
    writers instead and skips the lock-only statements."""

    writes_in_one_statement: bool = False
    """Whether the fast paths of lifecycle commands (``start_if_new``,
    ``start_child_if_new``, ``end_if_running``, ``change_if_running``) write
    the run and its records in one statement (PostgreSQL's data-modifying
    CTEs) or in several inside the caller's transaction (SQLite)."""

    records_appended: int = 0
    """Run records this connection's transactions inserted (``db.measured``
    counts the difference a committed transaction made)."""
    sessions_purged: int = 0
    """Sessions this connection's transactions purged, likewise."""
    runs_purged: int = 0
    """Sessionless runs retention deleted, likewise."""
    contexts_purged: int = 0
    """Context keys retention deleted, likewise."""

    def __init__(self, statements: Statements, scope: Scope) -> None:
        self._sql = statements
        self.scope = scope
        """What its statements act on: the scope (``call_scope``) of the call
        that submitted the work, read on the event loop by the backend.
        SQLite's worker threads set it per job."""
        self.touched: set[str] = set()
        """Wake-up keys (``core.ports.session_key``/``run_key``) of what this
        transaction wrote; the backend wakes watchers after the commit."""

    @property
    def _namespace_sql(self) -> NamespaceStatements:
        return self._sql.namespaces

    @property
    def _seed_sql(self) -> SeedStatements:
        return self._sql.seeds

    def _touch(self, run_id: str, session_id: str) -> None:
        self.touched.add(run_key(self.namespace, run_id))
        if session_id:
            self.touched.add(session_key(self.namespace, session_id))

    async def append_requests(
        self, batches: Sequence[Sequence[RecordDraft]]
    ) -> list[list[int] | None]:
        """The common cases of several appends (``db.append_groups``): each
        one's IDs, or None where it wrote nothing. Several go in one statement
        (``append_group``); one alone in its own, simpler one."""
        if len(batches) > 1:
            return await self.append_group(batches)
        # Alone: its own statement, in its own namespace (a group's task may
        # run in another call's context).
        self.namespace = batches[0][0].namespace
        if len(batch := batches[0]) > 1:
            return [await self.append_records_if_writable(batch)]
        record_id = await self.append_if_writable(batch[0])
        return [None if record_id is None else [record_id]]

    async def append_group(
        self, batches: Sequence[Sequence[RecordDraft]]
    ) -> list[list[int] | None]:
        """Several appends' common cases in one statement (``append_groups``)."""
        raise NotImplementedError

    def count_appended(self, record: RecordDraft, count: int) -> None:
        """``count`` records of ``record``'s run written outside the named
        operations (``append_groups``): counted, and its watchers woken at
        commit (in the record's own namespace: a group mixes namespaces)."""
        self.touched.add(run_key(record.namespace, record.run_id))
        if record.session_id:
            self.touched.add(session_key(record.namespace, record.session_id))
        self.records_appended += count

    async def session(self, session_id: str, *, for_update: bool = False) -> SessionLookup:
        statement = self._sql.session_for_update if for_update else self._sql.session
        row = await self._one(statement, session_id=session_id)
        if row is not None:
            return row_codecs.session_from_row(row)
        if await self._one(self._sql.is_tombstoned, session_id=session_id) is not None:
            return PURGED
        return None

    async def run(self, run_id: str, *, for_update: bool = False) -> RunState | None:
        if for_update and self.row_locks:
            # Lock order: the run's session first (a no-op for sessionless runs).
            await self._run(self._sql.session_of_run_for_update, run_id=run_id)
        statement = self._sql.run_for_update if for_update else self._sql.run
        row = await self._one(statement, run_id=run_id)
        return row_codecs.run_from_row(row) if row is not None else None

    async def record_target(
        self, run_id: str, event_key: str, *, for_update: bool = False
    ) -> RecordTarget:
        if for_update and self.row_locks:
            # Lock first, then read in a new statement (see runtime_sql._lock_run).
            await self._run(self._sql.lock_run, run_id=run_id)
        row = await self._one(self._sql.record_target, run_id=run_id, event_key=event_key)
        if row is None:
            return RecordTarget(None, None, None)
        run = row_codecs.run_from_row(row[:_RUN_WIDTH])
        session: SessionLookup = None
        if run.session_id:
            if row[_RUN_WIDTH] is not None:
                session = row_codecs.session_from_row(
                    (run.session_id, *row[_RUN_WIDTH:_SESSION_END])
                )
            else:
                session = await self.session(run.session_id)
        existing_row = row[_SESSION_END:]
        existing = row_codecs.record_from_row(existing_row) if existing_row[0] is not None else None
        return RecordTarget(run, session, existing)

    async def record_by_key(self, run_id: str, event_key: str) -> RunRecord | None:
        row = await self._one(self._sql.record_by_key, run_id=run_id, event_key=event_key)
        return row_codecs.record_from_row(row) if row is not None else None

    async def record_by_id(self, run_id: str, record_id: int) -> RunRecord | None:
        row = await self._one(self._sql.record_by_id, run_id=run_id, record_id=record_id)
        return row_codecs.record_from_row(row) if row is not None else None

    async def run_tail(self, run_id: str) -> int:
        row = await self._one(self._sql.run_tail, run_id=run_id)
        return int(row[0])

    async def session_tail(self, session_id: str) -> int:
        row = await self._one(self._sql.session_tail, session_id=session_id)
        return int(row[0])

    async def run_records(
        self, run_id: str, after: int, limit: int, max_bytes: int
    ) -> list[RunRecord]:
        rows = await self._all(
            self._sql.run_records, run_id=run_id, after=after, limit=limit, max_bytes=max_bytes
        )
        return [row_codecs.record_from_row(row) for row in rows]

    async def typed_run_records(
        self,
        run_id: str,
        after: int,
        through: int,
        types: Sequence[str],
        limit: int,
        max_bytes: int,
    ) -> list[RunRecord]:
        rows = await self._all(
            self._sql.typed_run_records,
            run_id=run_id,
            after=after,
            through=through,
            limit=limit,
            max_bytes=max_bytes,
            **{f"type_{i}": name for i, name in enumerate(types)},
        )
        return [row_codecs.record_from_row(row) for row in rows]

    async def session_records(
        self, session_id: str, after: int, limit: int, max_bytes: int
    ) -> list[tuple[int, RunRecord]]:
        rows = await self._all(
            self._sql.session_records,
            session_id=session_id,
            after=after,
            limit=limit,
            max_bytes=max_bytes,
        )
        return [(row[0], row_codecs.record_from_row(row[1:])) for row in rows]

    async def transcript_records(
        self, run_id: str, after: int, through: int, limit: int, max_bytes: int
    ) -> list[RunRecord]:
        rows = await self._all(
            self._sql.transcript_records,
            run_id=run_id,
            after=after,
            through=through,
            limit=limit,
            max_bytes=max_bytes,
        )
        return [row_codecs.record_from_row(row) for row in rows]

    async def runs_by_session(self, session_id: str) -> list[RunState]:
        rows = await self._all(self._sql.runs_by_session, session_id=session_id)
        return [row_codecs.run_from_row(row) for row in rows]

    async def list_sessions(
        self, query: SessionFilter[Nanos], after: PageKey | None, limit: int
    ) -> list[Session]:
        statement, params = self._sql.listings.sessions(query, after, limit)
        return [row_codecs.session_from_row(row) for row in await self._all(statement, **params)]

    async def list_runs(
        self, query: RunFilter[Nanos], after: PageKey | None, limit: int
    ) -> list[RunState]:
        statement, params = self._sql.listings.runs(query, after, limit)
        return [row_codecs.listed_run_from_row(row) for row in await self._all(statement, **params)]

    async def count_sessions(
        self, query: SessionFilter[Nanos], cap: int
    ) -> dict[SessionStatus, Counted]:
        statement, params = self._sql.listings.session_counts(query, cap)
        rows = await self._all(statement, **params)
        return {SessionStatus(row[0]): Counted(int(row[1]), int(row[2]) < cap) for row in rows}

    async def count_runs(self, query: RunFilter[Nanos], cap: int) -> dict[RunStatus, Counted]:
        statement, params = self._sql.listings.run_counts(query, cap)
        rows = await self._all(statement, **params)
        return {RunStatus(row[0]): Counted(int(row[1]), int(row[2]) < cap) for row in rows}

    async def session_has_running_runs(self, session_id: str) -> bool:
        row = await self._one(self._sql.session_has_running_runs, session_id=session_id)
        return bool(row[0])

    async def purgeable_sessions(self, ended_before: Nanos, limit: int) -> list[str]:
        seconds, nanos = row_codecs.split_nanos(ended_before)
        rows = await self._all(
            self._sql.purgeable_sessions,
            ended_before_s=seconds,
            ended_before_ns=nanos,
            limit=limit,
        )
        return [str(row[0]) for row in rows]

    async def namespace_retention(self) -> list[NamespaceRetention]:
        rows = await self._all(self._sql.namespace_retention)
        return [
            NamespaceRetention(
                str(row[0]),
                None if row[1] is None else float(row[1]),
                None if row[2] is None else float(row[2]),
            )
            for row in rows
        ]

    async def run_purged(self, run_id: str) -> bool:
        return await self._one(self._sql.run_tombstoned, run_id=run_id) is not None

    async def purgeable_sessionless_runs(
        self, finished_before: Nanos, after: tuple[Nanos, str] | None, limit: int
    ) -> list[tuple[str, Nanos]]:
        # Exact in whole milliseconds: finished_at < cut-off <=> ms < ceil(cut-off).
        after_ms, after_run_id = (
            (row_codecs.to_millis(after[0]), after[1]) if after is not None else (_MIN_BIGINT, "")
        )
        rows = await self._all(
            self._sql.purgeable_sessionless_runs,
            finished_before_ms=-(-finished_before // NANOS_PER_MILLI),
            after_ms=after_ms,
            after_run_id=after_run_id,
            limit=limit,
        )
        return [(str(row[0]), int(row[1]) * NANOS_PER_MILLI) for row in rows]

    async def lock_run_ending(self, run_id: str) -> RunFinish | None:
        row = await self._one(self._sql.run_ending_for_update, run_id=run_id)
        return _run_finish(row) if row is not None else None

    async def lock_child_run_endings(self, run_id: str) -> list[RunFinish]:
        rows = await self._all(self._sql.child_run_endings_for_update, run_id=run_id)
        return [_run_finish(row) for row in rows]

    async def purge_sessionless_run(self, run_id: str, purged_at: Nanos) -> None:
        await self._run(self._sql.delete_run_records, run_id=run_id)
        await self._run(self._sql.delete_run, run_id=run_id)
        await self.delete_run_seeds(run_id)
        await self._run(self._sql.insert_run_tombstone, run_id=run_id, purged_at=purged_at)
        self.touched.add(run_key(self.namespace, run_id))
        self.runs_purged += 1

    async def insert_session(self, session: Session) -> None:
        seconds, nanos = row_codecs.split_nanos(session.created_at)
        await self._run(
            self._sql.insert_session,
            session_id=session.id,
            status=session.status.value,
            created_at_s=seconds,
            created_at_ns=nanos,
        )

    async def end_session(self, session_id: str, ended_at: Nanos) -> None:
        seconds, nanos = row_codecs.split_nanos(ended_at)
        await self._run(
            self._sql.end_session,
            session_id=session_id,
            ended_at_s=seconds,
            ended_at_ns=nanos,
        )

    async def purge_session(self, session_id: str, purged_at: Nanos) -> None:
        await self._run(self._sql.purge_records, session_id=session_id)
        await self._run(self._sql.purge_runs, session_id=session_id)
        await self._run(self._sql.purge_session, session_id=session_id)
        await self.delete_session_seeds(session_id)
        await self._run(self._sql.insert_tombstone, session_id=session_id, purged_at=purged_at)
        self.touched.add(session_key(self.namespace, session_id))
        self.sessions_purged += 1

    async def insert_run(self, run: RunState) -> None:
        await self._run(self._sql.insert_run, **row_codecs.run_params(run))

    async def change_run(self, run_id: str, change: RunChange) -> None:
        await self._run(self._sql.change_run, **row_codecs.change_params(run_id, change))

    async def _one_unless_conflict(self, statement: Compiled, **params: Any) -> Any:
        """``_one``, or None when the statement hit a unique constraint."""
        return await self._one(statement, **params)

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        """The statement behind ``Database.append_if_writable`` (not a port method)."""
        statement = (
            self._sql.append_if_writable_in_session
            if record.session_id
            else self._sql.append_if_writable_sessionless
        )
        row = await self._one_unless_conflict(statement, **row_codecs.record_params(record))
        if row is None:
            return None
        self._touch(record.run_id, record.session_id)
        self.records_appended += 1
        return int(row[0])

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        """The statements behind ``Database.start_if_new`` (not a port method)."""
        params = {**row_codecs.record_params(started), **row_codecs.run_params(run)}
        statement = self._sql.start_if_new if run.session_id else self._sql.start_one_shot_if_new
        if not self.writes_in_one_statement:
            if await self._one(statement, **params) is None:
                return None
            return await self.append_record(started)
        row = await self._one_unless_conflict(statement, **params)
        return self._appended(started, row)

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        """The statements behind ``Database.start_child_if_new`` (not a port method)."""
        params = {
            **row_codecs.record_params(started),
            **row_codecs.run_params(run),
            **{
                f"link_{name}": value
                for name, value in row_codecs.record_params(link).items()
                if name in LINK_FIELDS
            },
        }
        statement = (
            self._sql.start_child_if_new
            if run.session_id
            else self._sql.start_one_shot_child_if_new
        )
        if not self.writes_in_one_statement:
            if await self._one(statement, **params) is None:
                return None
            return await self.append_record(link), await self.append_record(started)
        row = await self._one_unless_conflict(statement, **params)
        if row is None:
            return None
        self._appended(link, row)
        self._appended(started, row)
        return int(row[0]), int(row[1])

    async def end_if_running(self, ending: RunEnding) -> int | None:
        """The statements behind ``Database.end_if_running`` (not a port method)."""
        record = ending.record
        statement = (
            self._sql.end_if_running_in_session
            if record.session_id
            else self._sql.end_if_running_sessionless
        )
        reasons = ending.reasons
        row = await self._one_unless_conflict(
            statement,
            **row_codecs.record_params(record),
            labels=row_codecs.labels_to_text(ending.labels),
            failure=row_codecs.failure_to_text(ending.failure),
            any_reason=reasons is None,
            reason=reasons[0] if reasons is not None else "",
            or_reason=reasons[1] if reasons is not None else "",
            new_status=ending.status.value,
            updated_at=ending.updated_at,
        )
        if row is None or self.writes_in_one_statement:
            return self._appended(record, row)
        return await self.append_record(record)

    async def change_if_running(self, guarded: GuardedChange) -> int | None:
        """The statements behind ``Database.change_if_running`` (not a port method)."""
        record = guarded.record
        statement = self._sql.guarded_changes[
            change_if_running_name(guarded.preconditions, bool(record.session_id))
        ]
        params = {
            **row_codecs.change_params(record.run_id, guarded.change),
            **row_codecs.record_params(record),
        }
        row = await self._one_unless_conflict(statement, **params)
        if row is None or self.writes_in_one_statement:
            return self._appended(record, row)
        return await self.append_record(record)

    def _appended(self, record: RecordDraft, row: Any) -> int | None:
        """The ID a one-statement write returned, counted; None when it wrote nothing."""
        if row is None:
            return None
        self._touch(record.run_id, record.session_id)
        self.records_appended += 1
        return int(row[0])

    async def records_by_keys(self, run_id: str, event_keys: Sequence[str]) -> dict[str, RunRecord]:
        statement, params = self._sql.record_batches.by_keys(run_id, list(event_keys))
        rows = await self._all(statement, **params)
        return {found.event_key: found for found in map(row_codecs.record_from_row, rows)}

    async def append_records(self, records: Sequence[RecordDraft]) -> list[int]:
        """One statement for the next ID and position, one multi-row insert."""
        first = records[0]
        first_id, first_position = await self._one(
            self._sql.record_batches.next_numbers, run_id=first.run_id, session_id=first.session_id
        )
        statement, params = self._sql.record_batches.insert(list(records), first_id, first_position)
        await self._run(statement, **params)
        self._touch(first.run_id, first.session_id)
        self.records_appended += len(records)
        return [first_id + index for index in range(len(records))]

    async def _all_unless_conflict(self, statement: Compiled, **params: Any) -> list[Any]:
        """``_all``, or no rows when the statement hit a unique constraint."""
        return await self._all(statement, **params)

    async def append_records_if_writable(self, batch: Sequence[RecordDraft]) -> list[int] | None:
        """The statement behind ``Database.append_records_if_writable`` (not a port method)."""
        statement, params = self._sql.record_batches.append_if_writable(list(batch))
        rows = await self._all_unless_conflict(statement, **params)
        if len(rows) != len(batch):
            return None  # nothing was inserted: the conditions hold for all rows or none
        first = batch[0]
        self._touch(first.run_id, first.session_id)
        self.records_appended += len(batch)
        return sorted(int(row[0]) for row in rows)

    async def append_record(self, record: RecordDraft) -> int:
        statement = (
            self._sql.insert_session_record
            if record.session_id
            else self._sql.insert_sessionless_record
        )
        row = await self._one(statement, **row_codecs.record_params(record))
        self._touch(record.run_id, record.session_id)
        self.records_appended += 1
        return int(row[0])
