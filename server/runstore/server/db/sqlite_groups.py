"""One commit group of the SQLite backend's writer (or one read group of a
reader): the transaction over a sqlite3 connection, the appends a group sends
in one statement, and the run of a group's functions in one transaction with
its single commit. The threads and queues around it are ``db.sqlite``'s."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, TypeVar

from runstore.contract.errors import InternalError, RunstoreError, UnavailableError
from runstore.server import call_scope
from runstore.server.call_scope import ALL_NAMESPACES, Scope
from runstore.server.core.model import RecordDraft
from runstore.server.core.ports import Transaction
from runstore.server.db.append_groups import (
    group_results,
    sqlite_group_append,
    sqlite_group_arguments,
)
from runstore.server.db.compiled import Compiled
from runstore.server.db.statements import Statements
from runstore.server.db.transaction import SqlTransaction

log = logging.getLogger("runstore.server.db.sqlite")  # the backend's log, as before the split

T = TypeVar("T")


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine that never suspends, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coroutine.close()
    raise RuntimeError("a SQLite transaction function awaited something other than the database")


class SqliteTransaction(SqlTransaction):
    """Runs statements on one sqlite3 connection inside BEGIN ... COMMIT; every
    call returns at once, so transaction functions never suspend."""

    def __init__(self, conn: sqlite3.Connection, statements: Statements) -> None:
        super().__init__(statements, ALL_NAMESPACES)  # each job sets its own
        self._conn = conn

    async def _one(self, statement: Compiled, **params: Any) -> Any:
        return self._conn.execute(
            statement.sql, statement.args(self._scoped(statement, params))
        ).fetchone()

    async def _all(self, statement: Compiled, **params: Any) -> list[Any]:
        return self._conn.execute(
            statement.sql, statement.args(self._scoped(statement, params))
        ).fetchall()

    async def _run(self, statement: Compiled, **params: Any) -> None:
        self._conn.execute(statement.sql, statement.args(self._scoped(statement, params)))

    async def _many(self, statement: Compiled, rows: list[dict[str, Any]]) -> None:
        namespace = self._scoped(statement, {})
        self._conn.executemany(
            statement.sql, [statement.args({**row, **namespace}) for row in rows]
        )

    async def append_group(
        self, batches: Sequence[Sequence[RecordDraft]]
    ) -> list[list[int] | None]:
        """``append_groups.sqlite_group_append`` for ``batches`` (not a port method)."""
        statement = sqlite_group_append(sum(len(batch) for batch in batches))
        rows = self._conn.execute(statement, sqlite_group_arguments(batches)).fetchall()
        return group_results(self, batches, rows)


class GroupedAppend:
    """An append's common case as a writer job (``append_if_writable`` or
    ``append_records_if_writable``) that the writer may send in one statement
    with the other appends of its commit group (``_send_appends_together``);
    alone, it is its own statement."""

    __slots__ = ("batch", "single")

    def __init__(self, batch: Sequence[RecordDraft], *, single: bool) -> None:
        self.batch = batch
        self.single = single

    def __call__(self, tx: Transaction) -> Coroutine[Any, Any, Any]:
        assert isinstance(tx, SqlTransaction)
        if self.single:
            return tx.append_if_writable(self.batch[0])
        return tx.append_records_if_writable(self.batch)

    def answer(self, ids: list[int] | None) -> Any:
        """What the job alone would have returned, from its IDs in a group."""
        if ids is None or not self.single:
            return ids
        return ids[0]


_MOST_RECORDS_TOGETHER: Final = 256
"""Most records of one commit group's appends in one statement."""


def _send_appends_together(
    tx: SqliteTransaction,
    functions: list[Callable[[Transaction], Coroutine[Any, Any, Any]]],
    outcomes: list[Outcome],
) -> set[int]:
    """Runs the common-case appends of a commit group in one multi-row
    statement (``append_groups``), the same as PostgreSQL's groups: the jobs
    of one group are concurrent calls, so any order of them is one they could
    have run in. Returns the indexes it answered in ``outcomes``. Appends
    sharing a run and key with an earlier one, and all of them when the
    statement fails on a constraint, are left to run one by one."""
    chosen: dict[int, GroupedAppend] = {}
    keys: set[tuple[str, str, str]] = set()
    records = 0
    for index, fn in enumerate(functions):
        if not isinstance(fn, GroupedAppend):
            continue
        own = {(record.namespace, record.run_id, record.event_key) for record in fn.batch}
        if own & keys or records + len(fn.batch) > _MOST_RECORDS_TOGETHER:
            continue
        chosen[index] = fn
        keys |= own
        records += len(fn.batch)
    if len(chosen) < 2:
        return set()
    try:
        results = drive(tx.append_group([job.batch for job in chosen.values()]))
    except sqlite3.OperationalError:
        raise
    except sqlite3.Error as exc:  # nothing of the statement stays: each runs alone
        log.debug("a group of %d appends runs again alone: %s", len(chosen), exc)
        return set()
    for (index, job), ids in zip(chosen.items(), results, strict=True):
        outcomes[index] = (job.answer(ids), None)
    return set(chosen)


def translate(exc: BaseException) -> BaseException:
    """Contract errors pass through; database trouble is transient (D4)."""
    if isinstance(exc, RunstoreError | call_scope.NamespaceUnset):  # the latter: a bug, named
        return exc
    if isinstance(exc, sqlite3.OperationalError):
        log.warning("sqlite operational error: %s", exc)
        return UnavailableError("database unavailable; retry")
    if isinstance(exc, sqlite3.Error):
        log.error("sqlite error", exc_info=exc)
        return InternalError("database error")
    log.error("unexpected error in a transaction", exc_info=exc)
    return InternalError()


def _rollback(conn: sqlite3.Connection) -> None:
    """Nothing of a failed transaction stays behind, even if COMMIT failed."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("sqlite rollback failed")


Outcome = tuple[Any, BaseException | None]


def run_group(
    conn: sqlite3.Connection,
    tx: SqliteTransaction,
    functions: list[Callable[[Transaction], Coroutine[Any, Any, Any]]],
    scopes: list[Scope],
    begin: str,
) -> list[Outcome]:
    """Runs ``functions`` one after another in one transaction and commits once.

    A function that fails has normally written nothing (the store checks before
    it writes). If it had written, the transaction is rolled back and the group
    runs again without it: transaction functions depend only on the database,
    so the others reach the same results. A database failure undoes the whole
    group and reaches every caller.
    """
    outcomes: list[Outcome] = [(None, None)] * len(functions)
    excluded: set[int] = set()
    try:
        while True:
            tx.touched.clear()
            conn.execute(begin)
            together = _send_appends_together(tx, functions, outcomes)
            for index, fn in enumerate(functions):
                if index in excluded or index in together:
                    continue
                changes = conn.total_changes
                tx.scope = scopes[index]
                outcomes[index] = _run_one(tx, fn)
                if outcomes[index][1] is not None and conn.total_changes != changes:
                    excluded.add(index)
                    break
            else:
                conn.execute("COMMIT")
                return outcomes
            conn.execute("ROLLBACK")
    except BaseException as exc:
        _rollback(conn)
        tx.touched.clear()
        error = translate(exc)
        return [(None, error) for _ in functions]


def _run_one(tx: SqliteTransaction, fn: Any) -> Outcome:
    """One function's result or error; database failures propagate."""
    try:
        return drive(fn(tx)), None
    except sqlite3.Error:
        raise
    except Exception as error:
        return None, translate(error)
