"""The runtime store's statements (sessions, runs, records, retention), built
once with SQLAlchemy Core. Fast paths are ``fast_path_sql``; batches
``batch_sql``; listings ``listings``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Select,
    Text,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.sql import ClauseElement

from runstore.contract import lifecycle
from runstore.contract.model import RunStatus, SessionStatus
from runstore.server.core.paging import TYPE_SLOTS
from runstore.server.db.record_writes import (
    in_namespace,
    namespace_param,
    next_record_id,
    next_session_position,
)
from runstore.server.db.row_codecs import RECORD_COLUMNS, RUN_COLUMNS, SESSION_COLUMNS
from runstore.server.db.schema import (
    namespaces,
    records,
    run_tombstones,
    runs,
    session_tombstones,
    sessions,
)


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
        .where(in_namespace(records), *conditions)
        .order_by(records.c[order])
    )
    return _bounded_page(page, order)


def _record_target() -> Any:
    """A run with its session and the record under one key: everything a
    record write checks, in one statement (no locks: see ``_lock_run``)."""
    existing = records.alias("existing")
    joined = runs.outerjoin(
        sessions,
        (sessions.c.namespace == runs.c.namespace) & (sessions.c.session_id == runs.c.session_id),
    ).outerjoin(
        existing,
        (existing.c.namespace == runs.c.namespace)
        & (existing.c.run_id == runs.c.run_id)
        & (existing.c.event_key == bindparam("event_key")),
    )
    return (
        select(
            *RUN_COLUMNS,
            *SESSION_COLUMNS[1:],
            *(existing.c[column.name] for column in RECORD_COLUMNS),
        )
        .select_from(joined)
        .where(in_namespace(runs), runs.c.run_id == bindparam("run_id"))
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
        select(runs.c.session_id)
        .where(in_namespace(runs), runs.c.run_id == bindparam("run_id"))
        .scalar_subquery()
    )
    locked_session = (
        select(sessions.c.session_id)
        .where(in_namespace(sessions), sessions.c.session_id == session_of_run)
        .with_for_update()
        .subquery("locked_session")
    )
    session_locked = select(func.count()).select_from(locked_session).scalar_subquery() >= 0
    return (
        select(runs.c.run_id)
        .where(in_namespace(runs), runs.c.run_id == bindparam("run_id"), session_locked)
        .with_for_update()
    )


def _insert_record(in_session: bool) -> Any:
    """Inserts a record with the next ID of its run and, in a session, the next
    position of its session (D3: the caller holds the session's lock), and
    returns the ID. IDs and positions are dense, so the next one is the
    largest plus one, read through the primary key and the position index."""
    prior = records.alias("prior")
    next_id = next_record_id(prior, bindparam("run_id"))
    values: dict[str, Any] = {
        column.name: bindparam(column.name)
        for column in (*RECORD_COLUMNS, records.c.payload_size)
        if column.name != "record_id"
    }
    values["namespace"] = namespace_param()
    values["record_id"] = next_id
    if in_session:
        values["session_position"] = next_session_position(prior, bindparam("session_id"))
    return insert(records).values(values).returning(records.c.record_id)


_CHANGED_COLUMNS = (
    "status",
    "cancellation_reason",
    "updated_at",
    "cancellation_key",
    "suspension_key",
    "terminal_key",
    "successor_run_id",
    "checkpoint_id",
    "checkpoint_data",
    "finished_at_ms",
    "failure",
)


def run_change_values() -> dict[str, Any]:
    """The SET clause of a ``RunChange`` (``row_codecs.change_params``): each
    column takes its bound value, or keeps its own where that is NULL. Shared
    by ``change_run`` and the guarded changes of ``fast_path_sql``."""

    def keep(column: str) -> Any:
        return func.coalesce(bindparam(column, type_=runs.c[column].type), runs.c[column])

    return {column: keep(column) for column in _CHANGED_COLUMNS}


def _run_change() -> Any:
    return (
        update(runs)
        .where(in_namespace(runs), runs.c.run_id == bindparam("run_id"))
        .values(run_change_values())
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
            in_namespace(runs),
            _SESSIONLESS,
            runs.c.parent_run_id == literal_column("''"),
            runs.c.finished_at_ms < cut,
            tuple_(runs.c.finished_at_ms, runs.c.run_id)
            > tuple_(bindparam("after_ms", type_=BigInteger), bindparam("after_run_id")),
            ~exists().where(
                child.c.namespace == runs.c.namespace,
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


def runtime_sources() -> dict[str, ClauseElement]:
    session_by_id = select(*SESSION_COLUMNS).where(
        in_namespace(sessions), sessions.c.session_id == bindparam("session_id")
    )
    run_by_id = select(*RUN_COLUMNS).where(in_namespace(runs), runs.c.run_id == bindparam("run_id"))
    return {
        "session": session_by_id,
        "session_for_update": session_by_id.with_for_update(),
        "session_of_run_for_update": select(sessions.c.session_id)
        .where(
            in_namespace(sessions),
            sessions.c.session_id
            == select(runs.c.session_id)
            .where(in_namespace(runs), runs.c.run_id == bindparam("run_id"))
            .scalar_subquery(),
        )
        .with_for_update(),
        "is_tombstoned": select(literal_column("1")).where(
            in_namespace(session_tombstones),
            session_tombstones.c.session_id == bindparam("session_id"),
        ),
        "run": run_by_id,
        "run_for_update": run_by_id.with_for_update(),
        "record_by_key": select(*RECORD_COLUMNS).where(
            in_namespace(records),
            records.c.run_id == bindparam("run_id"),
            records.c.event_key == bindparam("event_key"),
        ),
        "record_by_id": select(*RECORD_COLUMNS).where(
            in_namespace(records),
            records.c.run_id == bindparam("run_id"),
            records.c.record_id == bindparam("record_id"),
        ),
        # The newest record's ID and session position (0: none), through the
        # same index lookups the appends use: what a reader opening a long
        # history at its tail needs first.
        "run_tail": select(
            next_record_id(records.alias("prior"), bindparam("run_id")) - literal_column("1")
        ),
        "session_tail": select(
            next_session_position(records.alias("prior"), bindparam("session_id"))
            - literal_column("1")
        ),
        "run_records": _record_page(
            records.c.run_id == bindparam("run_id"),
            records.c.record_id > bindparam("after"),
        ),
        "typed_run_records": _record_page(
            records.c.run_id == bindparam("run_id"),
            records.c.record_id > bindparam("after"),
            records.c.record_id <= bindparam("through"),
            records.c.type.in_([bindparam(f"type_{i}", type_=Text) for i in range(TYPE_SLOTS)]),
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
        .where(in_namespace(runs), runs.c.session_id == bindparam("session_id"))
        .order_by(runs.c.started_at_ms, runs.c.run_id),
        "session_has_running_runs": select(
            exists().where(
                in_namespace(runs),
                runs.c.session_id == bindparam("session_id"),
                runs.c.status == RunStatus.RUNNING.value,
            )
        ),
        "purgeable_sessions": select(sessions.c.session_id)
        .where(
            in_namespace(sessions),
            sessions.c.status == SessionStatus.ENDED.value,
            tuple_(sessions.c.ended_at_s, sessions.c.ended_at_ns)
            < tuple_(bindparam("ended_before_s"), bindparam("ended_before_ns")),
            ~exists().where(
                runs.c.namespace == sessions.c.namespace,
                runs.c.session_id == sessions.c.session_id,
                runs.c.status == RunStatus.RUNNING.value,
            ),
        )
        .order_by(sessions.c.ended_at_s, sessions.c.ended_at_ns, sessions.c.session_id)
        .limit(bindparam("limit")),
        "insert_session": insert(sessions).values(
            namespace=namespace_param(),
            session_id=bindparam("session_id"),
            status=bindparam("status"),
            created_at_s=bindparam("created_at_s"),
            created_at_ns=bindparam("created_at_ns"),
            ended_at_s=None,
            ended_at_ns=None,
        ),
        "end_session": update(sessions)
        .where(in_namespace(sessions), sessions.c.session_id == bindparam("session_id"))
        .values(
            status=SessionStatus.ENDED.value,
            ended_at_s=bindparam("ended_at_s"),
            ended_at_ns=bindparam("ended_at_ns"),
        ),
        "purge_records": delete(records).where(
            in_namespace(records),
            records.c.session_id == bindparam("session_id"),
            records.c.session_position.is_not(None),
        ),
        "purge_runs": delete(runs).where(
            in_namespace(runs), runs.c.session_id == bindparam("session_id")
        ),
        "purge_session": delete(sessions).where(
            in_namespace(sessions), sessions.c.session_id == bindparam("session_id")
        ),
        "insert_tombstone": insert(session_tombstones).values(
            namespace=namespace_param(),
            session_id=bindparam("session_id"),
            purged_at=bindparam("purged_at"),
        ),
        "run_tombstoned": select(literal_column("1")).where(
            in_namespace(run_tombstones), run_tombstones.c.run_id == bindparam("run_id")
        ),
        "insert_run_tombstone": insert(run_tombstones).values(
            namespace=namespace_param(),
            run_id=bindparam("run_id"),
            purged_at=bindparam("purged_at"),
        ),
        "purgeable_sessionless_runs": _purgeable_sessionless_runs(),
        # Not in one namespace: retention runs per namespace (docs/namespaces.md).
        "namespace_retention": select(
            namespaces.c.name,
            namespaces.c.retain_ended_sessions_s,
            namespaces.c.retain_sessionless_runs_s,
        )
        .where(namespaces.c.state == literal_column("'active'"))
        .order_by(namespaces.c.name),
        "run_ending_for_update": select(*RUN_ENDING_COLUMNS)
        .where(in_namespace(runs), runs.c.run_id == bindparam("run_id"))
        .with_for_update(),
        "child_run_endings_for_update": select(*RUN_ENDING_COLUMNS)
        .where(
            in_namespace(runs),
            runs.c.parent_run_id == bindparam("run_id"),
            runs.c.parent_run_id != literal_column("''"),
            _SESSIONLESS,
        )
        .order_by(runs.c.run_id)
        .with_for_update(),
        "delete_run_records": delete(records).where(
            in_namespace(records), records.c.run_id == bindparam("run_id")
        ),
        "delete_run": delete(runs).where(in_namespace(runs), runs.c.run_id == bindparam("run_id")),
        "insert_run": insert(runs).values(
            {
                "namespace": namespace_param(),
                **{column.name: bindparam(column.name) for column in RUN_COLUMNS},
            }
        ),
        "change_run": _run_change(),
        "record_target": _record_target(),
        "lock_run": _lock_run(),
        "insert_session_record": _insert_record(in_session=True),
        "insert_sessionless_record": _insert_record(in_session=False),
    }
