"""Every SQL statement the store runs, built once with SQLAlchemy Core.

Statements are compiled once per dialect into plain SQL text plus the order of
their parameters, and then executed on the driver's own connection (sqlite3,
asyncpg): the hot path pays neither SQLAlchemy's execution layer nor an ORM.
Row decoding into core values lives here too, so both backends share it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    LargeBinary,
    Select,
    Text,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from runstore.contract import lifecycle
from runstore.contract.model import Checkpoint, RunStartOutcome, RunStatus, SessionStatus
from runstore.server.core.model import (
    NANOS_PER_MILLI,
    LifecycleKeys,
    Nanos,
    RecordDraft,
    RunChange,
    RunRecord,
    RunState,
    Session,
)
from runstore.server.db.schema import (
    context_appends,
    context_keys,
    context_transcript,
    context_versions,
    memory_appends,
    memory_events,
    memory_runs,
    records,
    run_tombstones,
    runs,
    session_tombstones,
    sessions,
)

if TYPE_CHECKING:
    from runstore.server.db.batch import BatchStatements
    from runstore.server.db.listings import ListingStatements


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement compiled for one dialect: SQL text and how to bind it.

    Named-parameter dialects (sqlite3) take the parameter mapping as it is;
    positional ones (asyncpg) take a tuple in ``names`` order.
    """

    sql: str
    names: tuple[str, ...]
    """Parameter order for positional dialects; empty for named ones."""
    defaults: Mapping[str, Any]
    """Values of the statement's constants (binds that are not parameters)."""
    _getter: Callable[[Mapping[str, Any]], Any] | None = None

    def args(self, params: Mapping[str, Any]) -> Any:
        """The driver's arguments for ``params``: a mapping or a tuple."""
        merged = {**self.defaults, **params} if self.defaults else params
        if self._getter is None:
            return merged
        values = self._getter(merged)
        return values if len(self.names) > 1 else (values,)


def compile_for(statement: ClauseElement, dialect: Dialect) -> Compiled:
    """Compiles ``statement``; constants keep their values as defaults."""
    compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
    names = tuple(compiled.positiontup or ())
    defaults = {
        compiled.bind_names[bind]: bind.effective_value
        for bind in compiled.binds.values()
        if not bind.required
    }
    getter = operator.itemgetter(*names) if names else None
    return Compiled(str(compiled), names, defaults, getter)


NANOS_PER_SECOND = 1_000_000_000

# --- Columns read back into core values --------------------------------------

SESSION_COLUMNS = (
    sessions.c.session_id,
    sessions.c.status,
    sessions.c.created_at_s,
    sessions.c.created_at_ns,
    sessions.c.ended_at_s,
    sessions.c.ended_at_ns,
)
RUN_COLUMNS = (
    runs.c.run_id,
    runs.c.agent_id,
    runs.c.session_id,
    runs.c.parent_run_id,
    runs.c.started_at_ms,
    runs.c.labels,
    runs.c.start_outcome,
    runs.c.status,
    runs.c.cancellation_reason,
    runs.c.updated_at,
    runs.c.start_key,
    runs.c.parent_link_key,
    runs.c.cancellation_key,
    runs.c.suspension_key,
    runs.c.terminal_key,
    runs.c.checkpoint_id,
    runs.c.checkpoint_data,
)
RECORD_COLUMNS = (
    records.c.record_id,
    records.c.event_key,
    records.c.run_id,
    records.c.agent_id,
    records.c.session_id,
    records.c.turn_id,
    records.c.type,
    records.c.payload,
    records.c.timestamp_ms,
)


_SESSION_STATUS: Mapping[str, SessionStatus] = {status.value: status for status in SessionStatus}
_RUN_STATUS: Mapping[str, RunStatus] = {status.value: status for status in RunStatus}
_START_OUTCOME: Mapping[str, RunStartOutcome] = {
    outcome.value: outcome for outcome in RunStartOutcome
}


@functools.lru_cache(maxsize=4096)
def labels_from_text(text: str) -> Mapping[str, str]:
    """Labels decoded once per distinct text; read-only, so sharing is safe."""
    return MappingProxyType(json.loads(text))


# --- Times: exact over years 1 to 9999 (see schema) ----------------------------


def split_nanos(nanos: Nanos) -> tuple[int, int]:
    """UTC nanoseconds as (seconds, nanos in 0..999,999,999) for two columns."""
    return divmod(nanos, NANOS_PER_SECOND)


def join_nanos(seconds: int, nanos: int) -> Nanos:
    return seconds * NANOS_PER_SECOND + nanos


def to_millis(nanos: Nanos) -> int:
    """A whole-millisecond time (validated, V1/V3) for a ``_ms`` column."""
    return nanos // NANOS_PER_MILLI


def key_digest(idempotency_key: str) -> bytes:
    """What memory appends are keyed by (see ``schema.memory_appends``)."""
    return hashlib.sha256(idempotency_key.encode("utf-8")).digest()


def session_from_row(row: Sequence[Any]) -> Session:
    """A session from ``SESSION_COLUMNS``."""
    ended = join_nanos(row[4], row[5]) if row[4] is not None else None
    return Session(row[0], _SESSION_STATUS[row[1]], join_nanos(row[2], row[3]), ended)


def run_from_row(row: Sequence[Any]) -> RunState:
    return RunState(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4] * NANOS_PER_MILLI,
        labels_from_text(row[5]),
        _START_OUTCOME[row[6]],
        _RUN_STATUS[row[7]],
        row[8],
        row[9],
        LifecycleKeys(row[10], row[11], row[12], row[13], row[14]),
        Checkpoint(row[15], bytes(row[16])) if row[15] is not None else None,
    )


def listed_run_from_row(row: Sequence[Any]) -> RunState:
    """A run read by a listing: every column but the checkpoint's."""
    return run_from_row((*row, None, None))


def record_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        bytes(row[7]),
        row[8] * NANOS_PER_MILLI,
    )


def labels_to_text(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(labels), sort_keys=True, ensure_ascii=False)


def run_params(run: RunState) -> dict[str, Any]:
    checkpoint = run.checkpoint
    return {
        "run_id": run.run_id,
        "agent_id": run.agent_id,
        "session_id": run.session_id,
        "parent_run_id": run.parent_run_id,
        "started_at_ms": to_millis(run.started_at),
        "labels": labels_to_text(run.labels),
        "start_outcome": run.start_outcome.value,
        "status": run.status.value,
        "cancellation_reason": run.cancellation_reason,
        "updated_at": run.updated_at,
        "start_key": run.keys.start,
        "parent_link_key": run.keys.parent_link,
        "cancellation_key": run.keys.cancellation,
        "suspension_key": run.keys.suspension,
        "terminal_key": run.keys.terminal,
        "checkpoint_id": checkpoint.id if checkpoint else None,
        "checkpoint_data": checkpoint.data if checkpoint else None,
    }


def change_params(run_id: str, change: RunChange) -> dict[str, Any]:
    checkpoint = change.checkpoint
    return {
        "run_id": run_id,
        "status": change.status.value if change.status is not None else None,
        "cancellation_reason": change.cancellation_reason,
        "updated_at": change.updated_at,
        "cancellation_key": change.cancellation_key,
        "suspension_key": change.suspension_key,
        "terminal_key": change.terminal_key,
        "checkpoint_id": checkpoint.id if checkpoint else None,
        "checkpoint_data": checkpoint.data if checkpoint else None,
        "finished_at_ms": (
            to_millis(change.finished_at) if change.finished_at is not None else None
        ),
    }


def record_params(record: RecordDraft) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "event_key": record.event_key,
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "turn_id": record.turn_id,
        "type": record.type,
        "payload": record.payload,
        "payload_size": len(record.payload),
        "timestamp_ms": to_millis(record.timestamp) if record.timestamp is not None else None,
    }


# --- Statements ---------------------------------------------------------------


def _bounded_page(page: Select[Any], order: str) -> Select[Any]:
    """Limits ``page`` first, then keeps the rows a page cut needs: those that
    start within ``max_bytes`` of payload, and always the first two (the second
    tells whether more follow a first record larger than the budget).
    Limiting before the window keeps the cost of a page independent of history.
    """
    limited = page.limit(bindparam("limit")).subquery("limited")
    ordering = limited.c[order]
    bytes_before = func.sum(limited.c.payload_size).over(order_by=ordering) - limited.c.payload_size
    windowed = select(
        limited,
        bytes_before.label("bytes_before"),
        func.row_number().over(order_by=ordering).label("row_number"),
    ).subquery("windowed")
    columns = [windowed.c[column.name] for column in page.selected_columns]
    return (
        select(*columns)
        .where(
            or_(
                windowed.c.bytes_before <= bindparam("max_bytes", type_=BigInteger),
                windowed.c.row_number <= literal_column("2"),
            )
        )
        .order_by(windowed.c[order])
    )


def _record_page(*conditions: Any, order: str = "record_id", extra: Sequence[Any] = ()) -> Any:
    page = (
        select(*extra, *RECORD_COLUMNS, records.c.payload_size)
        .where(*conditions)
        .order_by(records.c[order])
    )
    return _bounded_page(page, order)


def _record_target() -> Any:
    """A run with its session and the record under one key: everything a
    record write checks, in one statement (no locks: see ``_lock_run``)."""
    existing = records.alias("existing")
    joined = runs.outerjoin(sessions, sessions.c.session_id == runs.c.session_id).outerjoin(
        existing,
        (existing.c.run_id == runs.c.run_id) & (existing.c.event_key == bindparam("event_key")),
    )
    return (
        select(
            *RUN_COLUMNS,
            *SESSION_COLUMNS[1:],
            *(existing.c[column.name] for column in RECORD_COLUMNS),
        )
        .select_from(joined)
        .where(runs.c.run_id == bindparam("run_id"))
    )


def _lock_run() -> Any:
    """Locks a run in the store's lock order, first its session (a sub-select
    evaluated before any row of the main query is locked), then the run, and
    reads nothing else.

    Locking and reading are separate statements on purpose: under READ
    COMMITTED a ``SELECT ... FOR UPDATE`` that waited for a lock re-reads only
    the locked row, while rows it joins keep the statement's old snapshot. A
    join read under the lock would see the run a concurrent writer just
    closed without the record that writer stored with it. A statement issued
    after the lock is held reads everything as committed.
    """
    session_of_run = (
        select(runs.c.session_id).where(runs.c.run_id == bindparam("run_id")).scalar_subquery()
    )
    locked_session = (
        select(sessions.c.session_id)
        .where(sessions.c.session_id == session_of_run)
        .with_for_update()
        .subquery("locked_session")
    )
    session_locked = select(func.count()).select_from(locked_session).scalar_subquery() >= 0
    return (
        select(runs.c.run_id)
        .where(runs.c.run_id == bindparam("run_id"), session_locked)
        .with_for_update()
    )


def _next_record_id(prior: Any, run_id: Any) -> Any:
    """The next ID of ``run_id``'s records: IDs are dense, so the largest plus one,
    read through the primary key (``prior`` is an alias of ``records``)."""
    return (
        select(func.coalesce(func.max(prior.c.record_id), 0) + literal_column("1"))
        .where(prior.c.run_id == run_id)
        .scalar_subquery()
    )


def _next_session_position(prior: Any, session_id: Any) -> Any:
    """The next position in ``session_id``'s order (D3: the caller holds the
    session's lock), read through the position index."""
    return (
        select(func.coalesce(func.max(prior.c.session_position), 0) + literal_column("1"))
        .where(prior.c.session_id == session_id, prior.c.session_position.is_not(None))
        .scalar_subquery()
    )


INSERTED_RECORD_COLUMNS = (
    "run_id",
    "record_id",
    "event_key",
    "agent_id",
    "session_id",
    "turn_id",
    "type",
    "payload",
    "payload_size",
    "timestamp_ms",
    "session_position",
)
"""The columns an ``INSERT ... SELECT`` of a record fills, in its select's order."""


def _insert_record(in_session: bool) -> Any:
    """Inserts a record with the next ID of its run and, in a session, the next
    position of its session (D3: the caller holds the session's lock), and
    returns the ID. IDs and positions are dense, so the next one is the
    largest plus one, read through the primary key and the position index."""
    prior = records.alias("prior")
    next_id = _next_record_id(prior, bindparam("run_id"))
    values: dict[str, Any] = {
        column.name: bindparam(column.name)
        for column in (*RECORD_COLUMNS, records.c.payload_size)
        if column.name != "record_id"
    }
    values["record_id"] = next_id
    if in_session:
        values["session_position"] = _next_session_position(prior, bindparam("session_id"))
    return insert(records).values(values).returning(records.c.record_id)


def _append_if_writable(in_session: bool, row_locks: bool) -> Any:
    """``Database.append_if_writable`` in one statement: inserts the record and
    returns its ID only when ``core.store.appendable`` holds (each condition
    below is one of its items; ``tests/core/test_fast_path_equivalence.py``
    checks they agree); otherwise inserts nothing and returns no row, and the
    caller runs the full rules.

    With row locks it takes the session's lock, then the run's, like every
    writer. Its ID and position are read in the statement's snapshot: if a
    concurrent writer of the run or session committed while this statement
    waited for a lock, they collide with that writer's and the statement fails
    with a unique violation, which the caller also answers with the full rules.
    """
    prior = records.alias("prior")
    run_id, session_id = bindparam("run_id", type_=Text), bindparam("session_id", type_=Text)
    conditions = [
        runs.c.run_id == run_id,
        runs.c.agent_id == bindparam("agent_id"),
        runs.c.session_id == session_id,
        runs.c.status == RunStatus.RUNNING.value,
        ~exists().where(prior.c.run_id == run_id, prior.c.event_key == bindparam("event_key")),
    ]
    if in_session:
        active: Select[Any] = select(literal_column("1")).where(
            sessions.c.session_id == session_id,
            sessions.c.status == SessionStatus.ACTIVE.value,
        )
        conditions.append(exists(active.with_for_update() if row_locks else active))
    target = select(runs.c.run_id).where(*conditions)
    if row_locks:
        target = target.with_for_update()
    target_rows = target.subquery("target")
    next_id = _next_record_id(prior, run_id)
    position: Any = _next_session_position(prior, session_id) if in_session else null()
    values = [
        target_rows.c.run_id,
        next_id,
        bindparam("event_key", type_=Text),
        bindparam("agent_id", type_=Text),
        session_id,
        bindparam("turn_id", type_=Text),
        bindparam("type", type_=Text),
        bindparam("payload", type_=LargeBinary),
        bindparam("payload_size", type_=Integer),
        bindparam("timestamp_ms", type_=BigInteger),
        position,
    ]
    return (
        insert(records)
        .from_select(INSERTED_RECORD_COLUMNS, select(*values).select_from(target_rows))
        .returning(records.c.record_id)
    )


def _run_change() -> Any:
    def keep(column: str) -> Any:
        return func.coalesce(bindparam(column, type_=runs.c[column].type), runs.c[column])

    return (
        update(runs)
        .where(runs.c.run_id == bindparam("run_id"))
        .values(
            status=keep("status"),
            cancellation_reason=keep("cancellation_reason"),
            updated_at=keep("updated_at"),
            cancellation_key=keep("cancellation_key"),
            suspension_key=keep("suspension_key"),
            terminal_key=keep("terminal_key"),
            checkpoint_id=keep("checkpoint_id"),
            checkpoint_data=keep("checkpoint_data"),
            finished_at_ms=keep("finished_at_ms"),
        )
    )


RUN_ENDING_COLUMNS = (
    runs.c.run_id,
    runs.c.session_id,
    runs.c.parent_run_id,
    runs.c.status,
    runs.c.finished_at_ms,
)

_SESSIONLESS = runs.c.session_id == literal_column("''")
"""Spelled as a literal, not a parameter, so PostgreSQL's generic plans can
use the partial indexes on sessionless runs."""


def _purgeable_sessionless_runs() -> Any:
    """Finished sessionless roots finished before the cut-off, after a keyset
    position, oldest first (only an ending sets ``finished_at_ms``); roots with
    a direct child that is not finished before the cut-off are left out
    (deeper ones the core re-checks)."""
    child = runs.alias("child")
    cut = bindparam("finished_before_ms", type_=BigInteger)
    return (
        select(runs.c.run_id, runs.c.finished_at_ms)
        .where(
            _SESSIONLESS,
            runs.c.parent_run_id == literal_column("''"),
            runs.c.finished_at_ms < cut,
            tuple_(runs.c.finished_at_ms, runs.c.run_id)
            > tuple_(bindparam("after_ms", type_=BigInteger), bindparam("after_run_id")),
            ~exists().where(
                child.c.parent_run_id == runs.c.run_id,
                # Both literal: they imply the children index's predicate.
                child.c.parent_run_id != literal_column("''"),
                child.c.session_id == literal_column("''"),
                or_(child.c.finished_at_ms.is_(None), child.c.finished_at_ms >= cut),
            ),
        )
        .order_by(runs.c.finished_at_ms, runs.c.run_id)
        .limit(bindparam("limit"))
    )


def _insert_if_missing(dialect: Dialect, table: Any, **values: Any) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING in the dialect's own spelling."""
    if dialect.name == "postgresql":
        return postgresql_insert(table).values(**values).on_conflict_do_nothing()
    return sqlite_insert(table).values(**values).on_conflict_do_nothing()


def _active_session(row_locks: bool) -> Any:
    """The condition that the bound session exists and is active, locking it
    first when the backend takes row locks (the store's lock order)."""
    active: Select[Any] = select(literal_column("1")).where(
        sessions.c.session_id == bindparam("session_id", type_=Text),
        sessions.c.status == SessionStatus.ACTIVE.value,
    )
    return exists(active.with_for_update() if row_locks else active)


def _insert_record_from(source: Any, in_session: bool) -> Any:
    """Inserts the bound record into the run ``source`` returned (a CTE with a
    ``run_id`` column, one row or none) with the next ID of its run and, in a
    session, the next position, and returns the ID (see ``_insert_record``)."""
    prior = records.alias("prior")
    run_id = bindparam("run_id", type_=Text)
    next_id = _next_record_id(prior, run_id)
    position: Any = (
        _next_session_position(prior, bindparam("session_id", type_=Text)) if in_session else null()
    )
    values = {
        "run_id": source.c.run_id,
        "record_id": next_id,
        **{
            name: bindparam(name, type_=records.c[name].type)
            for name in (
                "event_key",
                "agent_id",
                "session_id",
                "turn_id",
                "type",
                "payload",
                "payload_size",
                "timestamp_ms",
            )
        },
        "session_position": position,
    }
    return (
        insert(records)
        .from_select(list(values), select(*values.values()).select_from(source))
        .returning(records.c.record_id)
        .add_cte(source)
    )


def _start_if_new(fused: bool, row_locks: bool) -> Any:
    """``Database.start_if_new``: inserts the bound run (``run_params``) only if
    its session is active and no run (nor run tombstone) has its ID, returning
    the run's ID.

    Fused (PostgreSQL), the same statement also inserts the bound started
    record and returns its ID instead: one statement, atomic by itself. A
    concurrent start of the same run makes ``ON CONFLICT`` insert nothing; a
    concurrent writer of the session that committed while this statement
    waited for the session's lock makes its position collide (a unique
    violation), and the caller runs the full rules. Otherwise (SQLite, whose
    single writer runs it inside a transaction) the caller appends the record.
    """
    values = [bindparam(column.name, type_=column.type) for column in RUN_COLUMNS]
    guard = [
        _active_session(row_locks),
        # A run ID retention deleted is never started again (§9.10.2).
        ~exists().where(run_tombstones.c.run_id == bindparam("run_id", type_=Text)),
    ]
    if not fused:
        guard.append(~exists().where(runs.c.run_id == bindparam("run_id", type_=Text)))
    columns = [column.name for column in RUN_COLUMNS]
    source = select(*values).where(*guard)
    if fused:
        new_run = (
            postgresql_insert(runs)
            .from_select(columns, source)
            .on_conflict_do_nothing()
            .returning(runs.c.run_id)
            .cte("new_run")
        )
        return _insert_record_from(new_run, in_session=True)
    return insert(runs).from_select(columns, source).returning(runs.c.run_id)


def _end_if_running(in_session: bool, fused: bool, row_locks: bool) -> Any:
    """``Database.end_if_running``: ends the bound run (status, updated_at,
    terminal key, finish time) only when every condition of ``core.store.endable`` holds,
    returning its ID; each condition below is one of that list's items
    (``tests/core/test_lifecycle_fast_paths.py`` checks they agree).

    The session's lock comes first (the EXISTS is evaluated before the run's
    row is updated), then the run's. Fused (PostgreSQL), the same statement
    inserts the bound terminal record and returns its ID; an ID or position
    taken in the statement's snapshot while a concurrent writer committed
    collides (a unique violation) and the caller runs the full rules.
    """
    prior = records.alias("prior")
    run_id = bindparam("run_id", type_=Text)
    event_key = bindparam("event_key", type_=Text)
    conditions = [
        runs.c.run_id == run_id,
        runs.c.status == RunStatus.RUNNING.value,
        runs.c.terminal_key == "",
        runs.c.agent_id == bindparam("agent_id", type_=Text),
        runs.c.session_id == bindparam("session_id", type_=Text),
        runs.c.labels == bindparam("labels", type_=Text),
        or_(
            bindparam("any_reason", type_=Boolean),
            runs.c.cancellation_reason == bindparam("reason", type_=Text),
            runs.c.cancellation_reason == bindparam("or_reason", type_=Text),
        ),
        ~exists().where(prior.c.run_id == run_id, prior.c.event_key == event_key),
    ]
    if in_session:
        conditions.append(_active_session(row_locks))
    ended = (
        update(runs)
        .where(*conditions)
        .values(
            status=bindparam("new_status", type_=Text),
            updated_at=bindparam("updated_at", type_=BigInteger),
            terminal_key=event_key,
            # The ending record's time: sessionless retention cuts on it (§9.10.2).
            finished_at_ms=bindparam("timestamp_ms", type_=BigInteger),
        )
        .returning(runs.c.run_id)
    )
    if fused:
        return _insert_record_from(ended.cte("ended"), in_session)
    return ended


def _fast_path_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    row_locks = fused = dialect.name == "postgresql"
    return {
        "append_if_writable_in_session": _append_if_writable(True, row_locks),
        "append_if_writable_sessionless": _append_if_writable(False, row_locks),
        "start_if_new": _start_if_new(fused, row_locks),
        "end_if_running_in_session": _end_if_running(True, fused, row_locks),
        "end_if_running_sessionless": _end_if_running(False, fused, row_locks),
    }


def _product_memory_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    def binds(table: Any) -> dict[str, Any]:
        return {column.name: bindparam(column.name) for column in table.columns}

    memory_run = (memory_runs.c.agent_id == bindparam("agent_id")) & (
        memory_runs.c.run_id == bindparam("run_id")
    )
    memory_count = select(memory_runs.c.event_count).where(memory_run)
    context_key = context_keys.c.context_key == bindparam("context_key")
    head = select(context_keys.c.version, context_keys.c.transcript_count, context_keys.c.saved_at)
    return {
        "memory_event_count": memory_count,
        "memory_run_create": _insert_if_missing(
            dialect,
            memory_runs,
            agent_id=bindparam("agent_id"),
            run_id=bindparam("run_id"),
            event_count=0,
        ),
        "memory_run_lock": memory_count.with_for_update(),
        "memory_events": select(
            memory_events.c.type,
            memory_events.c.timestamp_s,
            memory_events.c.timestamp_ns,
            memory_events.c.data,
            memory_events.c.labels,
        )
        .where(
            memory_events.c.agent_id == bindparam("agent_id"),
            memory_events.c.run_id == bindparam("run_id"),
            memory_events.c.position >= bindparam("after"),
        )
        .order_by(memory_events.c.position)
        .limit(bindparam("limit")),
        "insert_memory_event": insert(memory_events).values(binds(memory_events)),
        "grow_memory_run": update(memory_runs)
        .where(memory_run)
        .values(event_count=memory_runs.c.event_count + bindparam("added", type_=BigInteger)),
        "memory_append_request": select(
            memory_appends.c.digest, memory_appends.c.first_position, memory_appends.c.count
        ).where(
            memory_appends.c.agent_id == bindparam("agent_id"),
            memory_appends.c.run_id == bindparam("run_id"),
            memory_appends.c.key_digest == bindparam("key_digest"),
        ),
        "insert_memory_append": insert(memory_appends).values(binds(memory_appends)),
        "delete_memory_events": delete(memory_events).where(
            memory_events.c.agent_id == bindparam("agent_id"),
            memory_events.c.run_id == bindparam("run_id"),
        ),
        "delete_memory_appends": delete(memory_appends).where(
            memory_appends.c.agent_id == bindparam("agent_id"),
            memory_appends.c.run_id == bindparam("run_id"),
        ),
        "delete_memory_run": delete(memory_runs).where(memory_run),
        "context_head": head.where(context_key),
        "context_create": _insert_if_missing(
            dialect,
            context_keys,
            context_key=bindparam("context_key"),
            version=0,
            saved_at=None,
            transcript_count=0,
            written_at=bindparam("written_at"),
        ),
        "context_lock": head.where(context_key).with_for_update(),
        "context_version": select(
            context_versions.c.version, context_versions.c.snapshot, context_versions.c.saved_at
        ).where(
            context_versions.c.context_key == bindparam("context_key"),
            context_versions.c.version == bindparam("version"),
        ),
        "insert_context_version": insert(context_versions).values(binds(context_versions)),
        "set_context_version": update(context_keys)
        .where(context_key)
        .values(
            version=bindparam("version"),
            saved_at=bindparam("saved_at"),
            written_at=bindparam("saved_at"),
        ),
        "prune_context_versions": delete(context_versions).where(
            context_versions.c.context_key == bindparam("context_key"),
            context_versions.c.version < bindparam("keep_from"),
        ),
        "delete_context_versions": delete(context_versions).where(
            context_versions.c.context_key == bindparam("context_key")
        ),
        "delete_context_transcript": delete(context_transcript).where(
            context_transcript.c.context_key == bindparam("context_key")
        ),
        "delete_context_appends": delete(context_appends).where(
            context_appends.c.context_key == bindparam("context_key")
        ),
        "delete_context_key": delete(context_keys).where(context_key),
        "context_transcript": select(context_transcript.c.message)
        .where(
            context_transcript.c.context_key == bindparam("context_key"),
            context_transcript.c.position >= bindparam("after"),
        )
        .order_by(context_transcript.c.position)
        .limit(bindparam("limit")),
        "insert_context_message": insert(context_transcript).values(binds(context_transcript)),
        "grow_context_transcript": update(context_keys)
        .where(context_key)
        .values(
            transcript_count=context_keys.c.transcript_count + bindparam("added", type_=BigInteger),
            written_at=bindparam("written_at"),
        ),
        # --retain-contexts: keys not written since the cut-off, oldest first,
        # locked; a key a writer holds is skipped (it is being written now).
        "stale_contexts": select(context_keys.c.context_key)
        .where(context_keys.c.written_at < bindparam("written_before"))
        .order_by(context_keys.c.written_at, context_keys.c.context_key)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True),
        "context_append_request": select(
            context_appends.c.digest, context_appends.c.first_position, context_appends.c.count
        ).where(
            context_appends.c.context_key == bindparam("context_key"),
            context_appends.c.idempotency_key == bindparam("idempotency_key"),
        ),
        "insert_context_append": insert(context_appends).values(binds(context_appends)),
    }


def _statement_sources() -> dict[str, ClauseElement]:
    session_by_id = select(*SESSION_COLUMNS).where(sessions.c.session_id == bindparam("session_id"))
    run_by_id = select(*RUN_COLUMNS).where(runs.c.run_id == bindparam("run_id"))
    return {
        "session": session_by_id,
        "session_for_update": session_by_id.with_for_update(),
        "session_of_run_for_update": select(sessions.c.session_id)
        .where(
            sessions.c.session_id
            == select(runs.c.session_id)
            .where(runs.c.run_id == bindparam("run_id"))
            .scalar_subquery()
        )
        .with_for_update(),
        "is_tombstoned": select(literal_column("1")).where(
            session_tombstones.c.session_id == bindparam("session_id")
        ),
        "run": run_by_id,
        "run_for_update": run_by_id.with_for_update(),
        "record_by_key": select(*RECORD_COLUMNS).where(
            records.c.run_id == bindparam("run_id"),
            records.c.event_key == bindparam("event_key"),
        ),
        "record_by_id": select(*RECORD_COLUMNS).where(
            records.c.run_id == bindparam("run_id"),
            records.c.record_id == bindparam("record_id"),
        ),
        "run_records": _record_page(
            records.c.run_id == bindparam("run_id"),
            records.c.record_id > bindparam("after"),
        ),
        "session_records": _record_page(
            records.c.session_id == bindparam("session_id"),
            records.c.session_position > bindparam("after"),
            order="session_position",
            extra=(records.c.session_position,),
        ),
        "transcript_records": _record_page(
            records.c.run_id == bindparam("run_id"),
            records.c.record_id > bindparam("after"),
            records.c.record_id <= bindparam("through"),
            # Fixed type names written into the SQL (they contain no quotes).
            records.c.type.in_(
                [literal_column(f"'{t}'") for t in sorted(lifecycle.TRANSCRIPT_TYPES)]
            ),
        ),
        "runs_by_session": select(*RUN_COLUMNS)
        .where(runs.c.session_id == bindparam("session_id"))
        .order_by(runs.c.started_at_ms, runs.c.run_id),
        "session_has_running_runs": select(
            exists().where(
                runs.c.session_id == bindparam("session_id"),
                runs.c.status == RunStatus.RUNNING.value,
            )
        ),
        "purgeable_sessions": select(sessions.c.session_id)
        .where(
            sessions.c.status == SessionStatus.ENDED.value,
            tuple_(sessions.c.ended_at_s, sessions.c.ended_at_ns)
            < tuple_(bindparam("ended_before_s"), bindparam("ended_before_ns")),
            ~exists().where(
                runs.c.session_id == sessions.c.session_id,
                runs.c.status == RunStatus.RUNNING.value,
            ),
        )
        .order_by(sessions.c.ended_at_s, sessions.c.ended_at_ns, sessions.c.session_id)
        .limit(bindparam("limit")),
        "insert_session": insert(sessions).values(
            session_id=bindparam("session_id"),
            status=bindparam("status"),
            created_at_s=bindparam("created_at_s"),
            created_at_ns=bindparam("created_at_ns"),
            ended_at_s=None,
            ended_at_ns=None,
        ),
        "end_session": update(sessions)
        .where(sessions.c.session_id == bindparam("session_id"))
        .values(
            status=SessionStatus.ENDED.value,
            ended_at_s=bindparam("ended_at_s"),
            ended_at_ns=bindparam("ended_at_ns"),
        ),
        "purge_records": delete(records).where(
            records.c.session_id == bindparam("session_id"),
            records.c.session_position.is_not(None),
        ),
        "purge_runs": delete(runs).where(runs.c.session_id == bindparam("session_id")),
        "purge_session": delete(sessions).where(sessions.c.session_id == bindparam("session_id")),
        "insert_tombstone": insert(session_tombstones).values(
            session_id=bindparam("session_id"), purged_at=bindparam("purged_at")
        ),
        "run_tombstoned": select(literal_column("1")).where(
            run_tombstones.c.run_id == bindparam("run_id")
        ),
        "insert_run_tombstone": insert(run_tombstones).values(
            run_id=bindparam("run_id"), purged_at=bindparam("purged_at")
        ),
        "purgeable_sessionless_runs": _purgeable_sessionless_runs(),
        "run_ending_for_update": select(*RUN_ENDING_COLUMNS)
        .where(runs.c.run_id == bindparam("run_id"))
        .with_for_update(),
        "child_run_endings_for_update": select(*RUN_ENDING_COLUMNS)
        .where(
            runs.c.parent_run_id == bindparam("run_id"),
            runs.c.parent_run_id != literal_column("''"),
            _SESSIONLESS,
        )
        .order_by(runs.c.run_id)
        .with_for_update(),
        "delete_run_records": delete(records).where(records.c.run_id == bindparam("run_id")),
        "delete_run": delete(runs).where(runs.c.run_id == bindparam("run_id")),
        "insert_run": insert(runs).values(
            {column.name: bindparam(column.name) for column in RUN_COLUMNS}
        ),
        "change_run": _run_change(),
        "record_target": _record_target(),
        "lock_run": _lock_run(),
        "insert_session_record": _insert_record(in_session=True),
        "insert_sessionless_record": _insert_record(in_session=False),
    }


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement of the store, compiled for one dialect."""

    session: Compiled
    session_for_update: Compiled
    session_of_run_for_update: Compiled
    is_tombstoned: Compiled
    run: Compiled
    run_for_update: Compiled
    record_by_key: Compiled
    record_by_id: Compiled
    run_records: Compiled
    session_records: Compiled
    transcript_records: Compiled
    runs_by_session: Compiled
    session_has_running_runs: Compiled
    purgeable_sessions: Compiled
    insert_session: Compiled
    end_session: Compiled
    purge_records: Compiled
    purge_runs: Compiled
    purge_session: Compiled
    insert_tombstone: Compiled
    run_tombstoned: Compiled
    insert_run_tombstone: Compiled
    purgeable_sessionless_runs: Compiled
    run_ending_for_update: Compiled
    child_run_endings_for_update: Compiled
    delete_run_records: Compiled
    delete_run: Compiled
    insert_run: Compiled
    change_run: Compiled
    record_target: Compiled
    lock_run: Compiled
    insert_session_record: Compiled
    insert_sessionless_record: Compiled
    append_if_writable_in_session: Compiled
    append_if_writable_sessionless: Compiled
    start_if_new: Compiled
    end_if_running_in_session: Compiled
    end_if_running_sessionless: Compiled
    memory_event_count: Compiled
    memory_run_create: Compiled
    memory_run_lock: Compiled
    memory_events: Compiled
    insert_memory_event: Compiled
    grow_memory_run: Compiled
    memory_append_request: Compiled
    insert_memory_append: Compiled
    delete_memory_events: Compiled
    delete_memory_appends: Compiled
    delete_memory_run: Compiled
    context_head: Compiled
    context_create: Compiled
    context_lock: Compiled
    context_version: Compiled
    insert_context_version: Compiled
    set_context_version: Compiled
    prune_context_versions: Compiled
    delete_context_versions: Compiled
    delete_context_transcript: Compiled
    delete_context_appends: Compiled
    delete_context_key: Compiled
    context_transcript: Compiled
    insert_context_message: Compiled
    grow_context_transcript: Compiled
    context_append_request: Compiled
    insert_context_append: Compiled
    stale_contexts: Compiled
    listings: ListingStatements
    """ListSessions and ListRuns, compiled per filter shape on first use."""
    batch: BatchStatements
    """AppendRunRecords, compiled per batch size on first use."""

    @classmethod
    def compile(cls, dialect: Dialect) -> Statements:
        from runstore.server.db.batch import BatchStatements
        from runstore.server.db.listings import ListingStatements

        sources = {
            **_statement_sources(),
            **_fast_path_sources(dialect),
            **_product_memory_sources(dialect),
        }
        compiled = {name: compile_for(stmt, dialect) for name, stmt in sources.items()}
        return cls(**compiled, listings=ListingStatements(dialect), batch=BatchStatements(dialect))
