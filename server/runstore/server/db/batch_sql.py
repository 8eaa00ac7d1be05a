"""The SQL of AppendRunRecords (docs/contract.md §9.3.1): one read of every key
of a batch and one multi-row insert, whatever the batch's size.

A batch's statements depend on how many records it has, so each size is built
and compiled once per dialect, on first use (at most ``MAX_BATCH_RECORDS``
sizes). The insert takes explicit IDs and positions: the core holds the run's
and session's locks (the order of ``runtime_sql._lock_run``), reads the next
ID and position once, and numbers the batch's records from there in order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    LargeBinary,
    Text,
    bindparam,
    insert,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.engine import Dialect

from runstore.server.core.fast_paths import APPEND
from runstore.server.core.model import RecordDraft
from runstore.server.db import row_codecs
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.fast_path_sql import run_guard
from runstore.server.db.record_writes import (
    INSERTED_RECORD_COLUMNS,
    in_namespace,
    inserted_record,
    namespace_param,
    next_record_id,
    next_session_position,
)
from runstore.server.db.row_codecs import RECORD_COLUMNS
from runstore.server.db.schema import records, runs


def _by_keys(count: int) -> Any:
    keys: list[Any] = [bindparam(f"event_key_{index}") for index in range(count)]
    return select(*RECORD_COLUMNS).where(
        in_namespace(records),
        records.c.run_id == bindparam("run_id"),
        records.c.event_key.in_(keys),
    )


def _next_numbers() -> Any:
    """The run's next record ID and the session's next position, through the
    primary key and the position index."""
    return select(
        next_record_id(records, bindparam("run_id")),
        next_session_position(records, bindparam("session_id")),
    )


def _insert(count: int) -> Any:
    rows: list[dict[str, Any]] = [
        {
            name: namespace_param() if name == "namespace" else bindparam(f"{name}_{index}")
            for name in INSERTED_RECORD_COLUMNS
        }
        for index in range(count)
    ]
    return insert(records).values(rows)


_PER_RECORD = ("event_key", "turn_id", "type", "payload", "payload_size", "timestamp_ms")
"""What may differ between the records of a batch the fast path writes."""
_PER_RECORD_TYPES = {
    "event_key": Text,
    "turn_id": Text,
    "type": Text,
    "payload": LargeBinary,
    "payload_size": Integer,
    "timestamp_ms": BigInteger,
}


def _batch_row(index: int) -> Any:
    """One record of a batch as a row of bound values, numbered from 0."""
    values: list[Any] = [literal_column(str(index), Integer).label("ordinal")]
    for name in _PER_RECORD:
        values.append(bindparam(f"{name}_{index}", type_=_PER_RECORD_TYPES[name]).label(name))
    return select(*values)


def _append_if_writable(count: int, in_session: bool, row_locks: bool) -> Any:
    """``Database.append_records_if_writable`` in one statement, the batch
    form of ``fast_path_sql._append_if_writable``: inserts every record and
    returns their IDs only when ``fast_paths.APPEND`` holds for each (the same
    guard, over every key of the batch), numbered in order from the run's next
    ID and the session's next position; otherwise inserts nothing and returns
    no row. The caller has checked that the records have one agent and session
    and distinct keys (``core.batch_rules.one_owner_distinct_keys``).

    Locks, snapshot and unique violations as in the single statement: a
    concurrent writer that committed while this one waited collides with it,
    and the caller answers with the full rules.
    """
    run_id, session_id = bindparam("run_id", type_=Text), bindparam("session_id", type_=Text)
    keys: list[Any] = [bindparam(f"event_key_{i}", type_=Text) for i in range(count)]
    target = select(runs.c.run_id).where(*run_guard(APPEND, keys, in_session, row_locks))
    if row_locks:
        target = target.with_for_update()
    target_rows = target.subquery("target")
    first, *rest = (_batch_row(index) for index in range(count))
    batch_rows = (first.union_all(*rest) if rest else first).subquery("batch")
    position: Any = null()
    if in_session:
        position = (
            next_session_position(records.alias("last_positions"), session_id)
            + batch_rows.c.ordinal
        )
    values = inserted_record(
        run_id=target_rows.c.run_id,
        record_id=next_record_id(records.alias("last_ids"), run_id) + batch_rows.c.ordinal,
        session_position=position,
        **{name: batch_rows.c[name] for name in _PER_RECORD},
    )
    source = select(*values).select_from(target_rows.join(batch_rows, true()))
    return (
        insert(records).from_select(INSERTED_RECORD_COLUMNS, source).returning(records.c.record_id)
    )


class RecordBatchStatements:
    """AppendRunRecords' statements for one dialect, compiled per batch size."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._by_keys: dict[int, Compiled] = {}
        self._inserts: dict[int, Compiled] = {}
        self._fast: dict[tuple[int, bool], Compiled] = {}
        self.next_numbers = compile_for(_next_numbers(), dialect)
        """Parameters ``run_id`` and ``session_id`` ("" for a sessionless run)."""

    def by_keys(self, run_id: str, event_keys: list[str]) -> tuple[Compiled, dict[str, Any]]:
        """The run's records under ``event_keys``."""
        count = len(event_keys)
        statement = self._by_keys.get(count)
        if statement is None:
            statement = self._by_keys[count] = compile_for(_by_keys(count), self._dialect)
        params: dict[str, Any] = {f"event_key_{i}": key for i, key in enumerate(event_keys)}
        params["run_id"] = run_id
        return statement, params

    def insert(
        self, batch: list[RecordDraft], first_id: int, first_position: int
    ) -> tuple[Compiled, dict[str, Any]]:
        """Inserts ``batch`` with IDs from ``first_id`` and, for a session's
        run, positions from ``first_position``, in order."""
        count = len(batch)
        statement = self._inserts.get(count)
        if statement is None:
            statement = self._inserts[count] = compile_for(_insert(count), self._dialect)
        params: dict[str, Any] = {}
        for index, record in enumerate(batch):
            row = row_codecs.record_params(record)
            row["record_id"] = first_id + index
            row["session_position"] = first_position + index if record.session_id else None
            for name in INSERTED_RECORD_COLUMNS[1:]:  # the namespace is the call's
                params[f"{name}_{index}"] = row[name]
        return statement, params

    def append_if_writable(self, batch: list[RecordDraft]) -> tuple[Compiled, dict[str, Any]]:
        """The batch fast path's statement for ``batch`` (one owner, distinct keys)."""
        first = batch[0]
        shape = (len(batch), bool(first.session_id))
        statement = self._fast.get(shape)
        if statement is None:
            row_locks = self._dialect.name == "postgresql"
            statement = compile_for(_append_if_writable(*shape, row_locks), self._dialect)
            self._fast[shape] = statement
        params: dict[str, Any] = {
            "run_id": first.run_id,
            "agent_id": first.agent_id,
            "session_id": first.session_id,
        }
        for index, record in enumerate(batch):
            row = row_codecs.record_params(record)
            for name in _PER_RECORD:
                params[f"{name}_{index}"] = row[name]
        return statement, params
