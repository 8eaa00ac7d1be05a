"""What every statement that writes a record shares: the next ID of its run,
the next position of its session, the columns of an ``INSERT ... SELECT`` of a
record, the condition that its session is active, and the namespace every
statement reads and writes in (``in_namespace``, docs/namespaces.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    Text,
    bindparam,
    exists,
    func,
    literal_column,
    select,
)

from runstore.contract.model import SessionStatus
from runstore.server.db.schema import records, sessions


def namespace_param() -> BindParameter[str]:
    """The call's namespace, bound as ``namespace`` in every statement:
    ``SqlTransaction`` adds it to every statement's parameters, taken from
    ``call_scope`` on the event loop when the call's work was submitted."""
    return bindparam("namespace", type_=Text)


def in_namespace(table: Any) -> ColumnElement[bool]:
    """``table``'s rows of the call's namespace (``table`` may be an alias)."""
    condition: ColumnElement[bool] = table.c.namespace == namespace_param()
    return condition


def next_record_id(prior: Any, run_id: Any) -> Any:
    """The next ID of ``run_id``'s records: IDs are dense, so the largest plus one,
    read through the primary key (``prior`` is an alias of ``records``)."""
    return (
        select(func.coalesce(func.max(prior.c.record_id), 0) + literal_column("1"))
        .where(in_namespace(prior), prior.c.run_id == run_id)
        .scalar_subquery()
    )


def next_session_position(prior: Any, session_id: Any) -> Any:
    """The next position in ``session_id``'s order (D3: the caller holds the
    session's lock), read through the position index."""
    return (
        select(func.coalesce(func.max(prior.c.session_position), 0) + literal_column("1"))
        .where(
            in_namespace(prior),
            prior.c.session_id == session_id,
            prior.c.session_position.is_not(None),
        )
        .scalar_subquery()
    )


INSERTED_RECORD_COLUMNS = (
    "namespace",
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


def inserted_record(**given: Any) -> list[Any]:
    """The select list of an ``INSERT ... SELECT`` of a record: the ``given``
    values, and each other column of ``INSERTED_RECORD_COLUMNS`` bound under
    its own name, in that order."""
    return [
        given[name] if name in given else bindparam(name, type_=records.c[name].type)
        for name in INSERTED_RECORD_COLUMNS
    ]


def active_session(row_locks: bool) -> Any:
    """The condition that the bound session exists and is active, locking it
    first when the backend takes row locks (the store's lock order)."""
    active: Select[Any] = select(literal_column("1")).where(
        in_namespace(sessions),
        sessions.c.session_id == bindparam("session_id", type_=Text),
        sessions.c.status == SessionStatus.ACTIVE.value,
    )
    return exists(active.with_for_update() if row_locks else active)
