"""The fast paths' statements: the common case of AppendRunRecord, the
starts, RecordRunCancellation, RecordRunSuspension and RecordRunTerminal
in one statement that writes only when the
preconditions of ``core.fast_paths`` hold, and otherwise writes nothing (the
caller then runs the full rules). Each statement's guard is built from its
list there, one SQL condition per precondition (``run_guard``,
``start_guard``); AppendRunRecords' statement (``batch_sql``) uses the same.

With row locks a statement takes the session's lock, then the run's, like
every writer. Its IDs and positions are read in the statement's snapshot: if a
concurrent writer of the run or session committed while the statement waited
for a lock, they collide with that writer's and the statement fails with a
unique violation, which the caller also answers with the full rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    LargeBinary,
    Text,
    and_,
    bindparam,
    exists,
    insert,
    literal_column,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from runstore.contract.model import RunStatus
from runstore.server.core.fast_paths import (
    APPEND,
    CANCEL,
    CHILD_START,
    END,
    ONE_SHOT_CHILD_START,
    ONE_SHOT_START,
    START,
    SUSPEND,
    Precondition,
)
from runstore.server.db.record_writes import (
    INSERTED_RECORD_COLUMNS,
    active_session,
    in_namespace,
    inserted_record,
    namespace_param,
    next_record_id,
    next_session_position,
)
from runstore.server.db.row_codecs import RUN_COLUMNS
from runstore.server.db.runtime_sql import run_change_values
from runstore.server.db.schema import records, run_tombstones, runs


def run_guard(
    preconditions: Sequence[Precondition],
    event_keys: Sequence[Any],
    in_session: bool,
    row_locks: bool,
) -> list[ColumnElement[bool]]:
    """The bound run's row (``runs``, by ``run_id``) where ``preconditions``
    hold, one condition each, in their order: those of a record of the run
    under one of ``event_keys`` (one bound key, or a batch's), with the bound
    ``agent_id``, ``session_id`` and, for an ending, ``labels`` and reasons
    (``any_reason``, or ``reason`` / ``or_reason``), for a suspension the
    bound ``checkpoint_id`` and ``checkpoint_data``. A sessionless run
    (``in_session`` false) has no session to check."""
    run_id = bindparam("run_id", type_=Text)
    conditions: list[ColumnElement[bool]] = [in_namespace(runs), runs.c.run_id == run_id]
    for precondition in preconditions:
        match precondition:
            case Precondition.RUN_RUNNING:
                conditions.append(runs.c.status == RunStatus.RUNNING.value)
            case Precondition.NO_TERMINAL_KEY:
                conditions.append(runs.c.terminal_key == "")
            case Precondition.NO_CANCELLATION:
                conditions.append(runs.c.cancellation_key == "")
                conditions.append(runs.c.cancellation_reason == "")
            case Precondition.NO_SUSPENSION_KEY:
                conditions.append(runs.c.suspension_key == "")
            case Precondition.SAME_CHECKPOINT:
                conditions.append(
                    or_(
                        runs.c.checkpoint_id.is_(None),
                        and_(
                            runs.c.checkpoint_id == bindparam("checkpoint_id", type_=Text),
                            runs.c.checkpoint_data
                            == bindparam("checkpoint_data", type_=LargeBinary),
                        ),
                    )
                )
            case Precondition.SAME_OWNER:
                conditions.append(runs.c.agent_id == bindparam("agent_id", type_=Text))
                conditions.append(runs.c.session_id == bindparam("session_id", type_=Text))
            case Precondition.SAME_LABELS:
                conditions.append(runs.c.labels == bindparam("labels", type_=Text))
            case Precondition.SAME_REASON:
                conditions.append(
                    or_(
                        bindparam("any_reason", type_=Boolean),
                        runs.c.cancellation_reason == bindparam("reason", type_=Text),
                        runs.c.cancellation_reason == bindparam("or_reason", type_=Text),
                    )
                )
            case Precondition.KEY_FREE:
                prior = records.alias("prior")
                key = (
                    prior.c.event_key == event_keys[0]
                    if len(event_keys) == 1
                    else prior.c.event_key.in_(event_keys)
                )
                conditions.append(
                    ~exists().where(in_namespace(prior), prior.c.run_id == run_id, key)
                )
            case Precondition.SESSION_ACTIVE:
                if in_session:
                    conditions.append(active_session(row_locks))
            case _:
                raise ValueError(f"not a condition on a run: {precondition}")
    return conditions


def start_guard(
    preconditions: Sequence[Precondition], row_locks: bool, fused: bool, parent: Any = None
) -> list[Any]:
    """The conditions under which the bound new run is inserted, one per
    precondition in their order. Fused, no run having the ID is the
    insert's own ``ON CONFLICT DO NOTHING`` (atomic against a concurrent start
    of the same run), so it adds no condition. A child's start states its
    parent's on ``parent`` (an alias of ``runs``, the caller's row of the bound
    ``parent_run_id``), whose link has the bound ``link_agent_id`` and
    ``link_event_key``."""
    run_id = bindparam("run_id", type_=Text)
    conditions: list[Any] = []
    for precondition in preconditions:
        match precondition:
            case Precondition.PARENT_RUNNING:
                conditions.append(parent.c.status == RunStatus.RUNNING.value)
            case Precondition.PARENT_OWNER:
                conditions.append(parent.c.agent_id == bindparam("link_agent_id", type_=Text))
                conditions.append(parent.c.session_id == bindparam("session_id", type_=Text))
            case Precondition.LINK_KEY_FREE:
                prior = records.alias("prior_link")
                conditions.append(
                    ~exists().where(
                        in_namespace(prior),
                        prior.c.run_id == bindparam("parent_run_id", type_=Text),
                        prior.c.event_key == bindparam("link_event_key", type_=Text),
                    )
                )
            case Precondition.SESSION_ACTIVE:
                conditions.append(active_session(row_locks))
            case Precondition.RUN_NOT_PURGED:
                conditions.append(
                    ~exists().where(in_namespace(run_tombstones), run_tombstones.c.run_id == run_id)
                )
            case Precondition.RUN_ID_FREE:
                if not fused:
                    conditions.append(~exists().where(in_namespace(runs), runs.c.run_id == run_id))
            case _:
                raise ValueError(f"not a condition on a new run: {precondition}")
    return conditions


def _append_if_writable(in_session: bool, row_locks: bool) -> Any:
    """``Database.append_if_writable`` in one statement: inserts the bound
    record (``row_codecs.record_params``) with the next ID of its run and, in a
    session, the next position of its session, and returns its ID, only when
    ``fast_paths.APPEND`` holds; otherwise inserts nothing and returns no row.
    """
    target = select(runs.c.run_id).where(
        *run_guard(APPEND, [bindparam("event_key", type_=Text)], in_session, row_locks)
    )
    if row_locks:
        target = target.with_for_update()
    return _insert_record_into(target.subquery("target"), in_session)


def _insert_record_into(source: Any, in_session: bool) -> Any:
    """Inserts the bound record into the run ``source`` selects (a ``run_id``
    column, one row or none) with the next ID of its run and, in a session,
    the next position of its session, and returns the ID."""
    prior = records.alias("prior")
    values = inserted_record(
        run_id=source.c.run_id,
        record_id=next_record_id(prior, bindparam("run_id", type_=Text)),
        session_position=(
            next_session_position(prior, bindparam("session_id", type_=Text))
            if in_session
            else null()
        ),
    )
    return (
        insert(records)
        .from_select(INSERTED_RECORD_COLUMNS, select(*values).select_from(source))
        .returning(records.c.record_id)
    )


def _start_if_new(
    preconditions: Sequence[Precondition], in_session: bool, fused: bool, row_locks: bool
) -> Any:
    """``Database.start_if_new``: inserts the bound run (``run_params``) only
    when ``preconditions`` hold (``fast_paths.START`` in a session,
    ``ONE_SHOT_START`` without one), returning the run's ID.

    Fused (PostgreSQL), the same statement also inserts the bound started
    record and returns its ID instead: one statement, atomic by itself.
    Otherwise (SQLite, whose single writer runs it inside a transaction) the
    caller appends the record.
    """
    values = [
        namespace_param(),
        *(bindparam(column.name, type_=column.type) for column in RUN_COLUMNS),
    ]
    columns = ["namespace", *(column.name for column in RUN_COLUMNS)]
    source = select(*values).where(*start_guard(preconditions, row_locks, fused))
    if fused:
        new_run = (
            postgresql_insert(runs)
            .from_select(columns, source)
            .on_conflict_do_nothing()
            .returning(runs.c.run_id)
            .cte("new_run")
        )
        return _insert_record_into(new_run, in_session).add_cte(new_run)
    return insert(runs).from_select(columns, source).returning(runs.c.run_id)


LINK_FIELDS = (
    "event_key",
    "agent_id",
    "turn_id",
    "type",
    "payload",
    "payload_size",
    "timestamp_ms",
)
"""What a child start's parent link binds under ``link_<field>``: its run and
session are the child's ``parent_run_id`` and ``session_id``."""


def _start_child_if_new(
    preconditions: Sequence[Precondition], in_session: bool, fused: bool, row_locks: bool
) -> Any:
    """``Database.start_child_if_new``: inserts the bound run (``run_params``)
    only when ``preconditions`` hold (``fast_paths.CHILD_START`` in a session,
    ``ONE_SHOT_CHILD_START`` without one), returning the run's ID.

    The session's lock comes first (its EXISTS is decided before the parent's
    row is locked), then the parent's, as in the full rules. Fused
    (PostgreSQL), the same statement also inserts the bound link on the parent
    (``link_`` parameters, ``LINK_FIELDS``), in a session at its next position
    with the started record right after it, and returns both IDs. Otherwise
    (SQLite) the caller appends the two records.
    """
    parent = runs.alias("parent")
    target = select(parent.c.run_id).where(
        # The write is anchored on the parent's row: no parent, no row to insert from.
        in_namespace(parent),
        parent.c.run_id == bindparam("parent_run_id", type_=Text),
        *start_guard(preconditions, row_locks, fused, parent),
    )
    if row_locks:
        target = target.with_for_update()
    parent_target = target.subquery("parent_target")
    values = [
        namespace_param(),
        *(bindparam(column.name, type_=column.type) for column in RUN_COLUMNS),
    ]
    columns = ["namespace", *(column.name for column in RUN_COLUMNS)]
    source = select(*values).select_from(parent_target)
    if not fused:
        return insert(runs).from_select(columns, source).returning(runs.c.run_id)
    new_run = (
        postgresql_insert(runs)
        .from_select(columns, source)
        .on_conflict_do_nothing()
        .returning(runs.c.parent_run_id)
        .cte("new_run")
    )
    prior = records.alias("prior")
    link_values = inserted_record(
        run_id=new_run.c.parent_run_id,
        record_id=next_record_id(prior, bindparam("parent_run_id", type_=Text)),
        session_position=(
            next_session_position(prior, bindparam("session_id", type_=Text))
            if in_session
            else null()
        ),
        **{name: bindparam(f"link_{name}", type_=records.c[name].type) for name in LINK_FIELDS},
    )
    link = (
        insert(records)
        .from_select(INSERTED_RECORD_COLUMNS, select(*link_values).select_from(new_run))
        .returning(records.c.record_id, records.c.session_position)
        .cte("link")
    )
    started_values = inserted_record(
        record_id=next_record_id(prior, bindparam("run_id", type_=Text)),
        session_position=(link.c.session_position + literal_column("1") if in_session else null()),
    )
    started = (
        insert(records)
        .from_select(INSERTED_RECORD_COLUMNS, select(*started_values).select_from(link))
        .returning(records.c.record_id)
        .cte("started")
    )
    return select(link.c.record_id, started.c.record_id).select_from(link.join(started, true()))


def _end_if_running(in_session: bool, fused: bool, row_locks: bool) -> Any:
    """``Database.end_if_running``: ends the bound run (status, updated_at,
    terminal key, finish time) only when ``fast_paths.END`` holds, returning
    its ID. The session's lock comes first (the EXISTS is evaluated before the
    run's row is updated), then the run's. Fused (PostgreSQL), the same
    statement inserts the bound terminal record and returns its ID.
    """
    event_key = bindparam("event_key", type_=Text)
    ended = (
        update(runs)
        .where(*run_guard(END, [event_key], in_session, row_locks))
        .values(
            status=bindparam("new_status", type_=Text),
            updated_at=bindparam("updated_at", type_=BigInteger),
            terminal_key=event_key,
            # The ending record's time: sessionless retention cuts on it (§9.10.2).
            finished_at_ms=bindparam("timestamp_ms", type_=BigInteger),
            # A failed ending's failure, for listings (schema.runs.failure).
            failure=bindparam("failure", type_=Text),
        )
        .returning(runs.c.run_id)
    )
    if fused:
        ended_rows = ended.cte("ended")
        return _insert_record_into(ended_rows, in_session).add_cte(ended_rows)
    return ended


def _change_if_running(
    preconditions: Sequence[Precondition], in_session: bool, fused: bool, row_locks: bool
) -> Any:
    """``Database.change_if_running``: applies the bound ``RunChange``
    (``row_codecs.change_params``, as ``change_run`` does) to the bound run only
    when ``preconditions`` (``fast_paths.CANCEL`` or ``SUSPEND``) hold,
    returning its ID. Locks as ``_end_if_running``; fused (PostgreSQL), the
    same statement inserts the bound record and returns its ID.
    """
    changed = (
        update(runs)
        .where(
            *run_guard(preconditions, [bindparam("event_key", type_=Text)], in_session, row_locks)
        )
        .values(run_change_values())
        .returning(runs.c.run_id)
    )
    if fused:
        changed_rows = changed.cte("changed")
        return _insert_record_into(changed_rows, in_session).add_cte(changed_rows)
    return changed


CHANGES = {"cancel": CANCEL, "suspend": SUSPEND}
"""The guarded run changes (``Database.change_if_running``) by name, each with
its list of preconditions."""


def change_if_running_name(preconditions: Sequence[Precondition], in_session: bool) -> str:
    """The compiled statement (``Statements.guarded_changes``) of a guarded change."""
    name = next(name for name, listed in CHANGES.items() if tuple(listed) == tuple(preconditions))
    return f"{name}_if_running_{'in_session' if in_session else 'sessionless'}"


def fast_path_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    row_locks = fused = dialect.name == "postgresql"
    return {
        "append_if_writable_in_session": _append_if_writable(True, row_locks),
        "append_if_writable_sessionless": _append_if_writable(False, row_locks),
        "start_if_new": _start_if_new(START, True, fused, row_locks),
        "start_one_shot_if_new": _start_if_new(ONE_SHOT_START, False, fused, row_locks),
        "start_child_if_new": _start_child_if_new(CHILD_START, True, fused, row_locks),
        "start_one_shot_child_if_new": _start_child_if_new(
            ONE_SHOT_CHILD_START, False, fused, row_locks
        ),
        "end_if_running_in_session": _end_if_running(True, fused, row_locks),
        "end_if_running_sessionless": _end_if_running(False, fused, row_locks),
    }


def guarded_change_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    """``_change_if_running`` of each of ``CHANGES``, in and out of a session."""
    row_locks = fused = dialect.name == "postgresql"
    return {
        change_if_running_name(preconditions, in_session): _change_if_running(
            preconditions, in_session, fused, row_locks
        )
        for preconditions in CHANGES.values()
        for in_session in (True, False)
    }
