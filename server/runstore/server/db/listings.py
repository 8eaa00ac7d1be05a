"""The SQL of ListSessions and ListRuns (§9.8): keyset pages over indexes.

A listing's filters are optional, so its statement depends on which are given
(its *shape*); each shape is built and compiled once per dialect, on first use.
Every shape reads an index whose leading columns are the equality filters and
whose next columns are the order, so a page reads about ``limit`` index
entries at any depth and any table size:

* ``(time, id)`` with no equality filter;
* ``(session_id | agent_id | status, time, id)`` for one of them;
* ``(session_id | agent_id, status, time, id)`` for either with statuses;
* ``(parent_run_id, time, id)``, partial (children only), for a run's children.

Several statuses are read as one ordered, limited branch per status, merged:
an ``IN`` list would make the database sort every matching row. Newest first
reads the same indexes backwards.

An exact ID is the primary key; an ID or agent prefix is a range on the
primary key or the agent's index (``>= prefix`` and ``<`` the next string),
checked exactly as well, so the range only has to cover the matches (it does
in SQLite's binary order and in PostgreSQL's C collation). An agent prefix,
labels and ``root_only`` are tests on the rows the index walk reads. Labels and
``root_only`` are conditions on the rows the index walk reads. Status counts
read at most ``core.listing.COUNT_CAP`` index entries per status.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.engine import Dialect

from runstore.contract.model import RunFilter, RunStatus, SessionFilter, SessionStatus
from runstore.server.core.model import NANOS_PER_MILLI, Nanos, PageKey
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.record_writes import in_namespace
from runstore.server.db.row_codecs import RUN_COLUMNS, SESSION_COLUMNS, split_nanos
from runstore.server.db.schema import CHILDREN_ONLY, runs, sessions

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
    newest: bool = False
    row_id: bool = False
    id_prefix: bool = False
    agent_prefix: bool = False
    labels: int = 0
    root_only: bool = False
    parent: bool = False
    counts: bool = False
    """A count of each status instead of a page (no order, keyset or limit)."""


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


def _prefix(column: Any, name: str) -> list[ColumnElement[bool]]:
    """``column`` starts with the bound ``name``: a range an index serves (its
    end bound is ``name_end``), then the exact test."""
    prefix = bindparam(name, type_=Text)
    return [
        column >= prefix,
        column < bindparam(f"{name}_end", type_=Text),
        _starts_with(column, prefix, "sqlite"),
    ]


def _starts_with(column: Any, prefix: Any, dialect: str) -> ColumnElement[bool]:
    """The exact prefix test, no index range: PostgreSQL's ``starts_with``
    (whose selectivity its planner estimates from the column's statistics, so
    it walks the order's index when many rows match), else a substring."""
    test: ColumnElement[bool]
    if dialect == "postgresql":
        test = func.starts_with(column, prefix, type_=Boolean)
    else:
        test = func.substr(column, 1, func.length(prefix)) == prefix
    return test


def prefix_end(prefix: str) -> str:
    """The first string after every string that starts with ``prefix`` in code
    point order; a prefix of only the last code point has none (the largest
    string a column can hold stands in)."""
    kept = prefix.rstrip(chr(0x10FFFF))
    if not kept:
        return chr(0x10FFFF) * (len(prefix) + 1)
    return kept[:-1] + chr(ord(kept[-1]) + 1 + (ord(kept[-1]) + 1 == 0xD800) * 0x800)


def _keyset_page(
    columns: Sequence[Any],
    time: Sequence[Any],
    row_id: Any,
    status: Any,
    shape: _Shape,
    conditions: list[ColumnElement[bool]],
    tests: Sequence[ColumnElement[bool]] = (),
) -> Select[Any]:
    """``time`` is the time's columns (seconds and nanoseconds, or milliseconds);
    ``tests`` are conditions no index serves, checked on the rows read."""
    if shape.lower:
        conditions.append(_at_least(time, "lower"))
    if shape.upper:
        conditions.append(_below(time, "upper"))
    if shape.counts:
        return _counts(status, shape, conditions, tests, (*time, row_id))
    conditions = [*conditions, *tests]
    if shape.after:
        key = tuple_(*time, row_id)
        last = tuple_(*_binds("at", len(time)), bindparam("last_id"))
        conditions.append(key < last if shape.newest else key > last)
    limit = bindparam("limit", type_=Integer)

    def ordered(keys: Sequence[Any]) -> list[Any]:
        return [key.desc() for key in keys] if shape.newest else list(keys)

    def branch(*extra: ColumnElement[bool]) -> Select[Any]:
        return (
            select(*columns)
            .where(*conditions, *extra)
            .order_by(*ordered((*time, row_id)))
            .limit(limit)
        )

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
    return select(merged).order_by(*ordered(order)).limit(limit)


def _counts(
    status: Any,
    shape: _Shape,
    conditions: list[ColumnElement[bool]],
    tests: Sequence[ColumnElement[bool]],
    order: Sequence[Any],
) -> Select[Any]:
    """One row per status: the status, how many rows read match ``tests``,
    and how many were read. Each status reads at most ``cap`` entries of the
    index its indexed conditions lead to, in that index's order (so that the
    database walks the index rather than the table), whatever ``tests`` keep:
    a count that read ``cap`` rows is a lower bound."""
    cap = bindparam("cap", type_=Integer)
    matches = case((and_(*tests), 1), else_=0) if tests else literal(1)
    parts = []
    for i in range(shape.statuses):
        value = bindparam(f"status_{i}", type_=Text)
        limited = (
            select(matches.label("hit"))
            .where(*conditions, status == value)
            .order_by(*order)
            .limit(cap)
            .subquery(f"counted_{i}")
        )
        parts.append(
            select(
                value.label("status"),
                func.coalesce(func.sum(limited.c.hit), 0).label("matched"),
                func.count().label("read"),
            ).select_from(limited)
        )
    return union_all(*parts)  # type: ignore[return-value]


def _sessions_statement(shape: _Shape) -> Select[Any]:
    conditions: list[ColumnElement[bool]] = [in_namespace(sessions)]
    if shape.row_id:
        conditions.append(sessions.c.session_id == bindparam("session_id"))
    if shape.id_prefix:
        conditions.extend(_prefix(sessions.c.session_id, "session_id_prefix"))
    return _keyset_page(
        SESSION_COLUMNS,
        (sessions.c.created_at_s, sessions.c.created_at_ns),
        sessions.c.session_id,
        sessions.c.status,
        shape,
        conditions,
    )


def _runs_statement(shape: _Shape, dialect: str) -> Select[Any]:
    conditions: list[ColumnElement[bool]] = [in_namespace(runs)]
    if shape.session:
        conditions.append(runs.c.session_id == bindparam("session_id"))
    if shape.agent:
        conditions.append(runs.c.agent_id == bindparam("agent_id"))
    if shape.row_id:
        conditions.append(runs.c.run_id == bindparam("run_id"))
    if shape.id_prefix:
        conditions.extend(_prefix(runs.c.run_id, "run_id_prefix"))
    if shape.parent:
        # The children's index is partial (roots are not in it): its condition,
        # spelled as the index spells it, lets both databases choose it for a
        # prepared statement whose parameter they cannot see.
        conditions.append(runs.c.parent_run_id == bindparam("parent_run_id"))
        conditions.append(literal_column(CHILDREN_ONLY))
    tests: list[ColumnElement[bool]] = []
    if shape.agent_prefix:
        # A range over the agent index would read and sort every run of the
        # matching agents; walking the order's (or a status's) index and
        # testing each run reads a page divided by the prefix's share.
        prefix = bindparam("agent_id_prefix", type_=Text)
        tests.append(_starts_with(runs.c.agent_id, prefix, dialect))
    if shape.root_only:
        tests.append(runs.c.parent_run_id == "")
    # Labels are stored as JSON with sorted keys (row_codecs.labels_to_text),
    # in which '"key": "value"' only ever appears as that one pair.
    find = func.strpos if dialect == "postgresql" else func.instr
    for i in range(shape.labels):
        tests.append(find(runs.c.labels, bindparam(f"label_{i}", type_=Text)) > 0)
    return _keyset_page(
        LISTED_RUN_COLUMNS,
        (runs.c.started_at_ms,),
        runs.c.run_id,
        runs.c.status,
        shape,
        conditions,
        tests,
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


def _from_the_key(
    after: PageKey | None, lower: Nanos | None, upper: Nanos | None, newest: bool, granule: int
) -> tuple[PageKey | None, Nanos | None, Nanos | None]:
    """A later page's key and the time bounds, with the bound on the walk's
    starting side folded into the key: the key alone then bounds the index
    range (a database given both ``t > :lower`` and ``(t, id) > :key`` may
    seek by the bound and step over every row before the key). ``granule``
    is the time column's unit in nanoseconds (bounds round up to it)."""
    if after is None:
        return after, lower, upper
    if newest:
        if upper is not None:
            after = min(after, (-(-upper // granule) * granule, ""))
        return after, lower, None
    if lower is not None:
        after = max(after, (-(-lower // granule) * granule, ""))
    return after, None, upper


def _label_pattern(key: str, value: str) -> str:
    """How one label pair is spelled inside the stored labels' JSON."""
    return f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"


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
        return self._session_statement(query, after, limit, counts=False)

    def session_counts(
        self, query: SessionFilter[Nanos], cap: int
    ) -> tuple[Compiled, dict[str, Any]]:
        """The statement and parameters of ListSessions' status counts."""
        every = dataclasses.replace(query, statuses=frozenset(SessionStatus))
        statement, params = self._session_statement(every, None, 0, counts=True)
        return statement, {**params, "cap": cap}

    def _session_statement(
        self, query: SessionFilter[Nanos], after: PageKey | None, limit: int, counts: bool
    ) -> tuple[Compiled, dict[str, Any]]:
        newest = query.newest_first and not counts
        after, lower, upper = _from_the_key(
            after, query.created_after, query.created_before, newest, 1
        )
        shape = _Shape(
            after is not None,
            lower is not None,
            upper is not None,
            len(query.statuses or ()),
            newest=newest,
            row_id=bool(query.session_id),
            id_prefix=bool(query.session_id_prefix),
            counts=counts,
        )
        if shape not in self._sessions:
            self._sessions[shape] = compile_for(_sessions_statement(shape), self._dialect)
        params = _bounds(after, lower, upper, query.statuses, limit, _session_time)
        if shape.row_id:
            params["session_id"] = query.session_id
        if shape.id_prefix:
            params["session_id_prefix"] = query.session_id_prefix
            params["session_id_prefix_end"] = prefix_end(query.session_id_prefix)
        return self._sessions[shape], params

    def runs(
        self, query: RunFilter[Nanos], after: PageKey | None, limit: int
    ) -> tuple[Compiled, dict[str, Any]]:
        """The statement and parameters of one ListRuns page; a sessionless
        run's ``session_id`` is ``''``, so ``sessionless_only`` is that value."""
        return self._run_statement(query, after, limit, counts=False)

    def run_counts(self, query: RunFilter[Nanos], cap: int) -> tuple[Compiled, dict[str, Any]]:
        """The statement and parameters of ListRuns' status counts."""
        every = dataclasses.replace(query, statuses=frozenset(RunStatus))
        statement, params = self._run_statement(every, None, 0, counts=True)
        return statement, {**params, "cap": cap}

    def _run_statement(
        self, query: RunFilter[Nanos], after: PageKey | None, limit: int, counts: bool
    ) -> tuple[Compiled, dict[str, Any]]:
        session_id = "" if query.sessionless_only else query.session_id
        labels = sorted(query.labels.items())
        newest = query.newest_first and not counts
        after, lower, upper = _from_the_key(
            after, query.started_after, query.started_before, newest, NANOS_PER_MILLI
        )
        shape = _Shape(
            after is not None,
            lower is not None,
            upper is not None,
            len(query.statuses or ()),
            session=bool(session_id) or query.sessionless_only,
            agent=bool(query.agent_id),
            newest=newest,
            row_id=bool(query.run_id),
            id_prefix=bool(query.run_id_prefix),
            agent_prefix=bool(query.agent_id_prefix),
            labels=len(labels),
            root_only=query.root_only,
            parent=bool(query.parent_run_id),
            counts=counts,
        )
        if shape not in self._runs:
            self._runs[shape] = compile_for(
                _runs_statement(shape, self._dialect.name), self._dialect
            )
        params = _bounds(after, lower, upper, query.statuses, limit, _run_time)
        if shape.session:
            params["session_id"] = session_id
        if shape.agent:
            params["agent_id"] = query.agent_id
        if shape.row_id:
            params["run_id"] = query.run_id
        if shape.id_prefix:
            params["run_id_prefix"] = query.run_id_prefix
            params["run_id_prefix_end"] = prefix_end(query.run_id_prefix)
        if shape.agent_prefix:
            params["agent_id_prefix"] = query.agent_id_prefix
        if shape.parent:
            params["parent_run_id"] = query.parent_run_id
        for i, (key, value) in enumerate(labels):
            params[f"label_{i}"] = _label_pattern(key, value)
        return self._runs[shape], params
