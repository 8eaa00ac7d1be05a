"""The SQL of ListSessions and ListRuns (§9.8): keyset pages over indexes.

A listing's filters are optional, so its statement depends on which are given
(its *shape*); each shape is built and compiled once per dialect, on first use.
Every shape reads an index whose leading columns are the equality filters and
whose next columns are the order, so a page reads about ``limit`` index
entries at any depth and any table size:

* ``(time, id)`` with no equality filter;
* ``(session_id | agent_id | status, time, id)`` for one of them;
* ``(session_id | agent_id, status, time, id)`` for either with statuses.

Several statuses are read as one ordered, limited branch per status, merged:
an ``IN`` list would make the database sort every matching row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Integer, Select, bindparam, select, tuple_, union_all
from sqlalchemy.engine import Dialect

from runstore.contract.model import RunFilter, SessionFilter
from runstore.server.core.model import NANOS_PER_MILLI, Nanos, PageKey
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.record_writes import in_namespace
from runstore.server.db.row_codecs import RUN_COLUMNS, SESSION_COLUMNS, split_nanos
from runstore.server.db.schema import runs, sessions

LISTED_RUN_COLUMNS = RUN_COLUMNS[: RUN_COLUMNS.index(runs.c.checkpoint_id)]
"""A run's columns without its checkpoint, which a listing never returns."""


@dataclass(frozen=True, slots=True)
class _Shape:
    """Which optional parts a listing statement has."""

    after: bool
    lower: bool
    upper: bool
    statuses: int
    session: bool = False
    agent: bool = False


def _binds(name: str, count: int) -> list[Any]:
    return [bindparam(f"{name}_{i}") for i in range(count)]


def _at_least(columns: Sequence[Any], name: str) -> ColumnElement[bool]:
    if len(columns) == 1:
        return columns[0] >= bindparam(f"{name}_0")  # type: ignore[no-any-return]
    return tuple_(*columns) >= tuple_(*_binds(name, len(columns)))


def _below(columns: Sequence[Any], name: str) -> ColumnElement[bool]:
    if len(columns) == 1:
        return columns[0] < bindparam(f"{name}_0")  # type: ignore[no-any-return]
    return tuple_(*columns) < tuple_(*_binds(name, len(columns)))


def _keyset_page(
    columns: Sequence[Any],
    time: Sequence[Any],
    row_id: Any,
    status: Any,
    shape: _Shape,
    conditions: list[ColumnElement[bool]],
) -> Select[Any]:
    """``time`` is the time's columns (seconds and nanoseconds, or milliseconds)."""
    if shape.after:
        conditions.append(
            tuple_(*time, row_id) > tuple_(*_binds("at", len(time)), bindparam("last_id"))
        )
    if shape.lower:
        conditions.append(_at_least(time, "lower"))
    if shape.upper:
        conditions.append(_below(time, "upper"))
    limit = bindparam("limit", type_=Integer)

    def branch(*extra: ColumnElement[bool]) -> Select[Any]:
        return select(*columns).where(*conditions, *extra).order_by(*time, row_id).limit(limit)

    if shape.statuses == 0:
        return branch()
    if shape.statuses == 1:
        return branch(status == bindparam("status_0"))
    parts = [
        select(branch(status == bindparam(f"status_{i}")).subquery(f"branch_{i}"))
        for i in range(shape.statuses)
    ]
    merged = union_all(*parts).subquery("merged")
    order = [merged.c[column.name] for column in (*time, row_id)]
    return select(merged).order_by(*order).limit(limit)


def _sessions_statement(shape: _Shape) -> Select[Any]:
    return _keyset_page(
        SESSION_COLUMNS,
        (sessions.c.created_at_s, sessions.c.created_at_ns),
        sessions.c.session_id,
        sessions.c.status,
        shape,
        [in_namespace(sessions)],
    )


def _runs_statement(shape: _Shape) -> Select[Any]:
    conditions: list[ColumnElement[bool]] = [in_namespace(runs)]
    if shape.session:
        conditions.append(runs.c.session_id == bindparam("session_id"))
    if shape.agent:
        conditions.append(runs.c.agent_id == bindparam("agent_id"))
    return _keyset_page(
        LISTED_RUN_COLUMNS, (runs.c.started_at_ms,), runs.c.run_id, runs.c.status, shape, conditions
    )


def _session_time(nanos: Nanos) -> tuple[int, ...]:
    """A session time as its two columns (exact)."""
    return split_nanos(nanos)


def _run_time(nanos: Nanos) -> tuple[int, ...]:
    """A bound on start times (whole milliseconds) as the first millisecond not
    before it, so ``>=`` and ``<`` keep their meaning."""
    return (-(-nanos // NANOS_PER_MILLI),)


def _bounds(
    after: PageKey | None,
    lower: Nanos | None,
    upper: Nanos | None,
    statuses: Any,
    limit: int,
    columns_of: Any,
) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit}
    for name, at in (("at", after[0] if after else None), ("lower", lower), ("upper", upper)):
        if at is not None:
            params.update({f"{name}_{i}": value for i, value in enumerate(columns_of(at))})
    if after is not None:
        params["last_id"] = after[1]
    for i, status in enumerate(sorted(s.value for s in statuses or ())):
        params[f"status_{i}"] = status
    return params


class ListingStatements:
    """Listing statements for one dialect, compiled per shape on first use."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._sessions: dict[_Shape, Compiled] = {}
        self._runs: dict[_Shape, Compiled] = {}

    def sessions(
        self, query: SessionFilter[Nanos], after: PageKey | None, limit: int
    ) -> tuple[Compiled, dict[str, Any]]:
        """The statement and parameters of one ListSessions page."""
        shape = _Shape(
            after is not None,
            query.created_after is not None,
            query.created_before is not None,
            len(query.statuses or ()),
        )
        if shape not in self._sessions:
            self._sessions[shape] = compile_for(_sessions_statement(shape), self._dialect)
        params = _bounds(
            after, query.created_after, query.created_before, query.statuses, limit, _session_time
        )
        return self._sessions[shape], params

    def runs(
        self, query: RunFilter[Nanos], after: PageKey | None, limit: int
    ) -> tuple[Compiled, dict[str, Any]]:
        """The statement and parameters of one ListRuns page; a sessionless
        run's ``session_id`` is ``''``, so ``sessionless_only`` is that value."""
        session_id = "" if query.sessionless_only else query.session_id
        shape = _Shape(
            after is not None,
            query.started_after is not None,
            query.started_before is not None,
            len(query.statuses or ()),
            session=bool(session_id) or query.sessionless_only,
            agent=bool(query.agent_id),
        )
        if shape not in self._runs:
            self._runs[shape] = compile_for(_runs_statement(shape), self._dialect)
        params = _bounds(
            after, query.started_after, query.started_before, query.statuses, limit, _run_time
        )
        if shape.session:
            params["session_id"] = session_id
        if shape.agent:
            params["agent_id"] = query.agent_id
        return self._runs[shape], params
