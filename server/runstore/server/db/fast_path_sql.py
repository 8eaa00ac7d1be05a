"""The fast paths' statements: the common case of AppendRunRecord,
StartRootRun and RecordRunTerminal in one statement that writes only when its
preconditions hold, and otherwise writes nothing (the caller then runs the
full rules)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    LargeBinary,
    Select,
    Text,
    bindparam,
    exists,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from runstore.contract.model import RunStatus, SessionStatus
from runstore.server.db.record_writes import (
    INSERTED_RECORD_COLUMNS,
    active_session,
    next_record_id,
    next_session_position,
)
from runstore.server.db.row_codecs import RUN_COLUMNS
from runstore.server.db.schema import records, run_tombstones, runs, sessions


def _append_if_writable(in_session: bool, row_locks: bool) -> Any:
    """``Database.append_if_writable`` in one statement: inserts the record and
    returns its ID only when ``appendable`` (``tests/core/preconditions.py``)
    holds (each condition below is one of its items;
    ``tests/core/test_fast_path_equivalence.py`` checks they agree); otherwise
    inserts nothing and returns no row, and the caller runs the full rules.

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
    next_id = next_record_id(prior, run_id)
    position: Any = next_session_position(prior, session_id) if in_session else null()
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


def _insert_record_from(source: Any, in_session: bool) -> Any:
    """Inserts the bound record into the run ``source`` returned (a CTE with a
    ``run_id`` column, one row or none) with the next ID of its run and, in a
    session, the next position, and returns the ID (see ``_insert_record``)."""
    prior = records.alias("prior")
    run_id = bindparam("run_id", type_=Text)
    next_id = next_record_id(prior, run_id)
    position: Any = (
        next_session_position(prior, bindparam("session_id", type_=Text)) if in_session else null()
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
        active_session(row_locks),
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
    terminal key, finish time) only when every condition of ``endable``
    (``tests/core/preconditions.py``) holds, returning its ID; each condition
    below is one of that list's items (``tests/core/test_lifecycle_fast_paths.py``
    checks they agree).

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
        conditions.append(active_session(row_locks))
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


def fast_path_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    row_locks = fused = dialect.name == "postgresql"
    return {
        "append_if_writable_in_session": _append_if_writable(True, row_locks),
        "append_if_writable_sessionless": _append_if_writable(False, row_locks),
        "start_if_new": _start_if_new(fused, row_locks),
        "end_if_running_in_session": _end_if_running(True, fused, row_locks),
        "end_if_running_sessionless": _end_if_running(False, fused, row_locks),
    }
