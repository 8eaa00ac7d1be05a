"""The SQL of AppendRunRecords (docs/contract.md §9.3.1): one read of every key
of a batch and one multi-row insert, whatever the batch's size.

A batch's statements depend on how many records it has, so each size is built
and compiled once per dialect, on first use (at most ``MAX_BATCH_RECORDS``
sizes). The insert takes explicit IDs and positions: the core holds the run's
and session's locks (the order of ``statements._lock_run``), reads the largest
ID and position once, and numbers the batch's records from there in order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.engine import Dialect

from runstore.server.core.model import RecordDraft
from runstore.server.db import statements as sql
from runstore.server.db.schema import records
from runstore.server.db.statements import RECORD_COLUMNS, Compiled, compile_for

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


class BatchStatements:
    """AppendRunRecords' statements for one dialect, compiled per batch size."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._by_keys: dict[int, Compiled] = {}
        self._inserts: dict[int, Compiled] = {}
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
            row = sql.record_params(record)
            row["record_id"] = last_id + index
            row["session_position"] = last_position + index if record.session_id else None
            for name in _INSERTED:
                params[f"{name}_{index - 1}"] = row[name]
        return statement, params
