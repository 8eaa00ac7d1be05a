"""The SQL of AppendRunRecords (docs/contract.md §9.3.1): one read of every key
of a batch and one multi-row insert, whatever the batch's size.

A batch's statements depend on how many records it has, so each size is built
and compiled once per dialect, on first use (at most ``MAX_BATCH_RECORDS``
sizes). The insert takes explicit IDs and positions: the core holds the run's
and session's locks (the order of ``runtime_sql._lock_run``), reads the largest
ID and position once, and numbers the batch's records from there in order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    LargeBinary,
    Select,
    Text,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.engine import Dialect

from runstore.contract.model import RunStatus, SessionStatus
from runstore.server.core.model import RecordDraft
from runstore.server.db import row_codecs
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.record_writes import INSERTED_RECORD_COLUMNS
from runstore.server.db.row_codecs import RECORD_COLUMNS
from runstore.server.db.schema import records, runs, sessions

_INSERTED = (*(column.name for column in RECORD_COLUMNS), "payload_size", "session_position")
"""The columns a batch insert sets, in its parameters' order."""


def _by_keys(count: int) -> Any:
    keys: list[Any] = [bindparam(f"event_key_{index}") for index in range(count)]
    return select(*RECORD_COLUMNS).where(
        records.c.run_id == bindparam("run_id"), records.c.event_key.in_(keys)
    )


def _last_numbers() -> Any:
    """The run's largest record ID and the session's largest position (0 when
    none), through the primary key and the position index."""
    last_id = (
        select(func.coalesce(func.max(records.c.record_id), 0))
        .where(records.c.run_id == bindparam("run_id"))
        .scalar_subquery()
    )
    last_position = (
        select(func.coalesce(func.max(records.c.session_position), 0))
        .where(
            records.c.session_id == bindparam("session_id"),
            records.c.session_position.is_not(None),
        )
        .scalar_subquery()
    )
    return select(last_id, last_position)


def _insert(count: int) -> Any:
    rows: list[dict[str, Any]] = [
        {name: bindparam(f"{name}_{index}") for name in _INSERTED} for index in range(count)
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
    """One record of a batch as a row of bound values, numbered from 1."""
    values: list[Any] = [literal_column(str(index + 1), Integer).label("ordinal")]
    for name in _PER_RECORD:
        values.append(bindparam(f"{name}_{index}", type_=_PER_RECORD_TYPES[name]).label(name))
    return select(*values)


def _append_if_writable(count: int, in_session: bool, row_locks: bool) -> Any:
    """``Database.append_records_if_writable`` in one statement, the batch
    form of ``fast_path_sql._append_if_writable``: inserts every record and
    returns their IDs only when AppendRunRecord's fast-path preconditions hold
    for each (``appendable`` in ``tests/core/preconditions.py``; each
    condition below is one of its items, for every key of the batch;
    ``tests/core/test_batch_equivalence.py`` checks they agree), otherwise
    inserts nothing and returns no row. The caller has checked that the
    records have one agent and session and distinct keys
    (``core.batch_rules.one_owner_distinct_keys``).

    Locks, snapshot and unique violations as in the single statement: a
    concurrent writer that committed while this one waited collides with it,
    and the caller answers with the full rules.
    """
    prior = records.alias("prior")
    run_id, session_id = bindparam("run_id", type_=Text), bindparam("session_id", type_=Text)
    keys: list[Any] = [bindparam(f"event_key_{i}", type_=Text) for i in range(count)]
    conditions = [
        runs.c.run_id == run_id,
        runs.c.agent_id == bindparam("agent_id", type_=Text),
        runs.c.session_id == session_id,
        runs.c.status == RunStatus.RUNNING.value,
        ~exists().where(prior.c.run_id == run_id, prior.c.event_key.in_(keys)),
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
    first, *rest = (_batch_row(index) for index in range(count))
    batch_rows = (first.union_all(*rest) if rest else first).subquery("batch")
    last_ids = records.alias("last_ids")
    last_id = (
        select(func.coalesce(func.max(last_ids.c.record_id), 0))
        .where(last_ids.c.run_id == run_id)
        .scalar_subquery()
    )
    position: Any = null()
    if in_session:
        last_positions = records.alias("last_positions")
        position = (
            select(func.coalesce(func.max(last_positions.c.session_position), 0))
            .where(
                last_positions.c.session_id == session_id,
                last_positions.c.session_position.is_not(None),
            )
            .scalar_subquery()
            + batch_rows.c.ordinal
        )
    values = [
        target_rows.c.run_id,
        last_id + batch_rows.c.ordinal,
        batch_rows.c.event_key,
        bindparam("agent_id", type_=Text),
        session_id,
        batch_rows.c.turn_id,
        batch_rows.c.type,
        batch_rows.c.payload,
        batch_rows.c.payload_size,
        batch_rows.c.timestamp_ms,
        position,
    ]
    source = select(*values).select_from(target_rows.join(batch_rows, true()))
    return (
        insert(records).from_select(INSERTED_RECORD_COLUMNS, source).returning(records.c.record_id)
    )


class BatchStatements:
    """AppendRunRecords' statements for one dialect, compiled per batch size."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._by_keys: dict[int, Compiled] = {}
        self._inserts: dict[int, Compiled] = {}
        self._fast: dict[tuple[int, bool], Compiled] = {}
        self.last_numbers = compile_for(_last_numbers(), dialect)
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
        self, batch: list[RecordDraft], last_id: int, last_position: int
    ) -> tuple[Compiled, dict[str, Any]]:
        """Inserts ``batch`` with IDs after ``last_id`` and, for a session's run,
        positions after ``last_position``, in order."""
        count = len(batch)
        statement = self._inserts.get(count)
        if statement is None:
            statement = self._inserts[count] = compile_for(_insert(count), self._dialect)
        params: dict[str, Any] = {}
        for index, record in enumerate(batch, start=1):
            row = row_codecs.record_params(record)
            row["record_id"] = last_id + index
            row["session_position"] = last_position + index if record.session_id else None
            for name in _INSERTED:
                params[f"{name}_{index - 1}"] = row[name]
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
