"""Database figures and spans around a backend, only when the operator asked for them.

``measured`` returns the backend itself when metrics and tracing are off, so
they cost a call nothing then. Otherwise every transaction is timed into
``runstore_db_transaction_seconds{backend,kind}`` and, with a tracer, runs in
a child span of the call's span; records appended and sessions, runs and
context keys purged are counted once their transaction committed (a SQLite
batch that runs a function again counts only the run that committed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from runstore.server.core.model import GuardedChange, RecordDraft, RunEnding, RunState
from runstore.server.core.ports import Database, Transaction
from runstore.server.db.transaction import SqlTransaction
from runstore.server.metrics import DbFigures

T = TypeVar("T")

_SYSTEMS = {"sqlite": "sqlite", "postgres": "postgresql"}


class MeasuredDatabase:
    """A ``Database`` that times, counts and traces the backend it wraps."""

    def __init__(
        self, inner: Database, backend: str, figures: DbFigures | None, tracer: Any | None
    ) -> None:
        self.inner = inner
        self._backend = backend
        self._figures = figures
        self._tracer = tracer

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        counts = _Counts()
        result = await self._measured("write", lambda: self.inner.write(counts.wrap(fn)))
        if self._figures is not None:
            self._figures.committed(
                counts.appended, counts.purged, counts.runs_purged, counts.contexts_purged
            )
        return result

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        return await self._measured("read", lambda: self.inner.read(fn))

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        figures = self._figures
        if self._tracer is None and figures is not None:
            # The hot path, timed inline: no closure, no extra coroutines.
            started = time.perf_counter()
            try:
                record_id = await self.inner.append_if_writable(record)
            finally:
                figures.transaction("append", time.perf_counter() - started)
        else:
            record_id = await self._measured(
                "append", lambda: self.inner.append_if_writable(record)
            )
        if record_id is not None and figures is not None:
            figures.committed(1, 0)
        return record_id

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        record_id = await self._measured("write", lambda: self.inner.start_if_new(run, started))
        if record_id is not None and self._figures is not None:
            self._figures.committed(1, 0)
        return record_id

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        ids = await self._measured(
            "write", lambda: self.inner.start_child_if_new(run, link, started)
        )
        if ids is not None and self._figures is not None:
            self._figures.committed(2, 0)
        return ids

    async def end_if_running(self, ending: RunEnding) -> int | None:
        record_id = await self._measured("write", lambda: self.inner.end_if_running(ending))
        if record_id is not None and self._figures is not None:
            self._figures.committed(1, 0)
        return record_id

    async def change_if_running(self, change: GuardedChange) -> int | None:
        record_id = await self._measured("write", lambda: self.inner.change_if_running(change))
        if record_id is not None and self._figures is not None:
            self._figures.committed(1, 0)
        return record_id

    async def append_records_if_writable(self, batch: Sequence[RecordDraft]) -> list[int] | None:
        figures = self._figures
        if self._tracer is None and figures is not None:
            started = time.perf_counter()
            try:
                ids = await self.inner.append_records_if_writable(batch)
            finally:
                figures.transaction("append", time.perf_counter() - started)
        else:
            ids = await self._measured(
                "append", lambda: self.inner.append_records_if_writable(batch)
            )
        if ids is not None and figures is not None:
            figures.committed(len(ids), 0)
        return ids

    async def _measured(self, kind: str, operation: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._tracer is None:
            return await self._timed(kind, operation)
        with self._tracer.start_as_current_span(
            f"db.{kind}", attributes={"db.system": _SYSTEMS.get(self._backend, self._backend)}
        ):
            return await self._timed(kind, operation)

    async def _timed(self, kind: str, operation: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._figures is None:
            return await operation()
        started = time.perf_counter()
        try:
            return await operation()
        finally:
            self._figures.transaction(kind, time.perf_counter() - started)


class _Counts:
    """Records appended, sessions, runs and context keys purged by the last run
    of one transaction function."""

    __slots__ = ("appended", "contexts_purged", "purged", "runs_purged")

    def __init__(self) -> None:
        self.appended = 0
        self.purged = 0
        self.runs_purged = 0
        self.contexts_purged = 0

    def wrap(
        self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]
    ) -> Callable[[Transaction], Coroutine[Any, Any, T]]:
        async def counted(tx: Transaction) -> T:
            if not isinstance(tx, SqlTransaction):
                return await fn(tx)
            before = (tx.records_appended, tx.sessions_purged, tx.runs_purged, tx.contexts_purged)
            result = await fn(tx)
            self.appended = tx.records_appended - before[0]
            self.purged = tx.sessions_purged - before[1]
            self.runs_purged = tx.runs_purged - before[2]
            self.contexts_purged = tx.contexts_purged - before[3]
            return result

        return counted


def measured(db: Database, backend: str, figures: DbFigures | None, tracer: Any | None) -> Database:
    """``db`` timed, counted and traced, or ``db`` itself when both are off."""
    if figures is None and tracer is None:
        return db
    return MeasuredDatabase(db, backend, figures, tracer)
