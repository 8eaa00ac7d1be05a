"""Triage listings at scale page through indexes (docs/contract.md §9.8).

A namespace of ``RUNS`` runs and a session of 10,000 of them, seeded in SQL by
``bench.triage`` (the same rows the ``triage`` benchmark times at 1,000,000),
once per backend. For every listing shape an operator uses to triage (newest
first, ID and agent prefixes, statuses, the big session, labels, root-only,
the status counts) the tests assert the work of a page, not its time:

* store calls: one transaction and one statement per page (two with status
  counts), returning at most a page and one row;
* rows read: PostgreSQL's ``EXPLAIN ANALYZE`` counts the rows every scan of
  ``runs`` read (returned plus removed by a filter); SQLite's progress handler
  counts the virtual machine's steps. Both stay under a budget proportional
  to the page, far below the table;
* an index scan: no sequential scan of ``runs`` in PostgreSQL's plan, only
  index searches in SQLite's.

``RUNS`` is 200,000 so that a CI run seeds both backends in seconds; set
``RUNSTORE_TEST_TRIAGE_RUNS=1000000`` to run the same assertions at the
benchmark's size (the budgets do not depend on it).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import make_url

from bench import triage
from runstore.contract.model import RunFilter, RunStatus, SessionFilter
from runstore.contract.namespaces import DEFAULT
from runstore.server.app import create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.core import listing
from runstore.server.db import migrate
from runstore.server.db.listings import ListingStatements
from runstore.server.db.postgres import asyncpg_dsn
from runstore.server.db.transaction import SqlTransaction
from tests import postgres

pytestmark = pytest.mark.usefixtures("acting_in_default")  # direct database work

RUNS = int(os.environ.get("RUNSTORE_TEST_TRIAGE_RUNS", "200000"))
PAGE = 100
FAILED = frozenset({RunStatus.FAILED})
DONE = frozenset({RunStatus.FAILED, RunStatus.CANCELED})

ROWS_PER_PAGE_ROW = 12
"""Rows a scan may read per row of a page, over every branch: a filter the
index does not hold (root-only, labels, an agent prefix walked in time order)
skips a few rows per match; a table scan would read ``RUNS``."""

STEPS_PER_PAGE_ROW = 1500
"""SQLite virtual machine steps per row of a page (measured about 100-300)."""

RUN_SHAPES: list[tuple[str, RunFilter[int]]] = [
    ("newest first", RunFilter(newest_first=True)),
    ("oldest first", RunFilter()),
    ("newest first, time range", RunFilter(started_after=10**9, newest_first=True,
                                           started_before=RUNS * 10**6)),
    ("failed, newest first", RunFilter(statuses=FAILED, newest_first=True)),
    ("failed or canceled, newest first", RunFilter(statuses=DONE, newest_first=True)),
    ("big session, newest first", RunFilter(session_id="big", newest_first=True)),
    ("big session, failed", RunFilter(session_id="big", statuses=FAILED)),
    ("run ID", RunFilter(run_id="r123")),
    ("run ID prefix", RunFilter(run_id_prefix=f"r{RUNS // 100 - 1}")),
    ("run ID prefix, newest first", RunFilter(run_id_prefix="r1999", newest_first=True)),
    ("agent, newest first", RunFilter(agent_id="agent-3", newest_first=True)),
    ("agent prefix, newest first", RunFilter(agent_id_prefix="agent-3", newest_first=True)),
    ("agent prefix, failed", RunFilter(agent_id_prefix="agent-", statuses=FAILED)),
    ("root only, newest first", RunFilter(root_only=True, newest_first=True)),
    ("label, newest first", RunFilter(labels={"team": "t1"}, newest_first=True)),
    ("a run's children", RunFilter(parent_run_id=f"r{RUNS // 2 - 1}")),
    ("a run's failed children, newest first",
     RunFilter(parent_run_id=f"r{RUNS // 2 - 1}", statuses=FAILED, newest_first=True)),
]  # fmt: skip
SESSION_SHAPES: list[tuple[str, SessionFilter[int]]] = [
    ("sessions newest first", SessionFilter(newest_first=True)),
    ("session ID prefix", SessionFilter(session_id_prefix="s199")),
    ("session ID", SessionFilter(session_id="big")),
]
SHAPES = [("runs", *shape) for shape in RUN_SHAPES] + [
    ("sessions", *shape) for shape in SESSION_SHAPES
]
IDS = [shape[1] for shape in SHAPES]


# A plan test takes one backend's seeded database (indirect parameters), never
# both with a skip: under RUNSTORE_REQUIRE_POSTGRES a skipped PostgreSQL item fails CI.
ONLY_SQLITE = ["sqlite"]
ONLY_POSTGRES = [pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=ONLY_SQLITE + ONLY_POSTGRES)
async def seeded_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """One seeded database per backend for the whole module."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('scale') / 'scale.db'}"
        await migrate.upgrade(url)
        triage.seed_sqlite(url, RUNS)
        yield url
        return
    async with postgres.fresh_database("runstore_scale") as url:
        await migrate.upgrade(url)
        await triage.seed_postgres(url, RUNS)
        yield url


def _statement(dialect: Any, kind: str, query: Any, after: Any) -> tuple[Any, dict[str, Any]]:
    statements = ListingStatements(dialect)
    if kind == "sessions":
        compiled, params = statements.sessions(query, after, PAGE + 1)
    else:
        compiled, params = statements.runs(query, after, PAGE + 1)
    return compiled, {**params, "namespace": DEFAULT}


def _counts_statement(dialect: Any, kind: str, query: Any) -> tuple[Any, dict[str, Any]]:
    statements = ListingStatements(dialect)
    build = statements.session_counts if kind == "sessions" else statements.run_counts
    compiled, params = build(query, listing.COUNT_CAP + 1)
    return compiled, {**params, "namespace": DEFAULT}


def _branches(query: Any) -> int:
    return max(1, len(query.statuses or ()))


async def _pages(url: str, kind: str, query: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Three pages through the store core, each with what it cost: the
    statements that read ``kind``, each with its transaction and the rows it
    returned (the server's own background reads touch other tables)."""
    calls: list[tuple[int, int]] = []

    def counting(cls: type[SqlTransaction]) -> Any:
        inner = cls._all

        async def _all(self: Any, statement: Any, **params: Any) -> list[Any]:
            rows = await inner(self, statement, **params)
            if f" {kind} " in f" {statement.sql} ".replace("\n", " "):
                calls.append((id(self), len(rows)))
            return rows  # type: ignore[no-any-return]

        return _all

    config = ServerConfig(listen="127.0.0.1:0", database_url=url)
    async with open_database(config) as db:
        transaction_type = _transaction_type(db)
        monkeypatch.setattr(transaction_type, "_all", counting(transaction_type))
        store = create_stores(config, db).runtime
        pages: list[Any] = []
        token = ""
        for number in range(3):
            calls.clear()
            counted = number == 0
            if kind == "runs":
                page = await store.list_runs(query, PAGE, token, counted)
            else:
                page = await store.list_sessions(query, PAGE, token, counted)
            pages.append((page, list(calls)))
            token = page.next_page_token
            if not token:
                break
    return pages


def _transaction_type(db: Any) -> type[SqlTransaction]:
    from runstore.server.db import postgres as pg_backend
    from runstore.server.db import sqlite as sqlite_backend
    from runstore.server.db.sqlite_groups import SqliteTransaction

    if isinstance(db.backend, sqlite_backend.SqliteDatabase):
        return SqliteTransaction
    return pg_backend._PostgresTransaction


@pytest.mark.parametrize(("kind", "name", "query"), SHAPES, ids=IDS)
async def test_a_page_is_one_transaction_of_one_statement_and_a_page_of_rows(
    seeded_url: str, kind: str, name: str, query: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = await _pages(seeded_url, kind, query, monkeypatch)
    for number, (page, calls) in enumerate(pages):
        transactions = {transaction for transaction, _ in calls}
        statements = [rows for _, rows in calls]
        assert len(transactions) == 1, calls
        assert len(statements) == (2 if number == 0 else 1), calls
        assert statements[0] <= PAGE + 1
        assert len(page.items) <= PAGE
        if number == 0:
            assert statements[1] <= len(RunStatus)
            assert page.status_counts, name
            if "ID" in name:
                # An ID or a prefix narrows the counts too: they are exact.
                assert not any(count.estimated for count in page.status_counts), page
    if kind == "runs" and not (query.run_id or query.parent_run_id) and "prefix" not in name:
        # Every shape but the ID filters and a run's children (one, in the
        # seeded rows) has more than two pages of matches.
        assert len(pages) == 3 and all(len(page.items) == PAGE for page, _ in pages), name


def _after(kind: str) -> Any:
    """A key in the middle of the table (a page deep in the walk)."""
    middle = RUNS // 2
    if kind == "sessions":
        return (middle * 10**9, f"s{middle}")
    return (middle * 10**6, f"r{middle}")


def _sqlite_file(url: str) -> str:
    return make_url(url).database or ""


@pytest.mark.parametrize("seeded_url", ONLY_SQLITE, indirect=True)
@pytest.mark.parametrize(("kind", "name", "query"), SHAPES, ids=IDS)
async def test_sqlite_pages_search_indexes_within_a_step_budget(
    seeded_url: str, kind: str, name: str, query: Any
) -> None:
    dialect = sqlite_dialect.dialect(paramstyle="named")
    conn = sqlite3.connect(_sqlite_file(seeded_url))
    try:
        for after in (None, _after(kind)):
            compiled, params = _statement(dialect, kind, query, after)
            plan = [
                row[3]
                for row in conn.execute("EXPLAIN QUERY PLAN " + compiled.sql, compiled.args(params))
            ]
            accesses = [step for step in plan if step.startswith(("SCAN", "SEARCH"))]
            assert accesses and all(not step.startswith(f"SCAN {kind}") for step in accesses), plan
            assert all(
                "INDEX" in step or "PRIMARY KEY" in step
                for step in accesses
                if f" {kind} " in f"{step} "
            ), plan
            steps = 0

            def count() -> int:
                nonlocal steps
                steps += 1
                return 0

            conn.set_progress_handler(count, 1)
            rows = conn.execute(compiled.sql, compiled.args(params)).fetchall()
            conn.set_progress_handler(None, 1)
            assert len(rows) <= PAGE + 1
            budget = STEPS_PER_PAGE_ROW * (PAGE + 1) * _branches(query)
            assert steps <= budget, (name, after, steps, plan)
        compiled, params = _counts_statement(dialect, kind, query)
        plan = [
            row[3]
            for row in conn.execute("EXPLAIN QUERY PLAN " + compiled.sql, compiled.args(params))
        ]
        assert not any(step.startswith(f"SCAN {kind}") for step in plan), plan
    finally:
        conn.close()


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found.extend(_nodes(child))
    return found


@pytest.mark.parametrize("seeded_url", ONLY_POSTGRES, indirect=True)
@pytest.mark.parametrize(("kind", "name", "query"), SHAPES, ids=IDS)
async def test_postgres_pages_scan_indexes_and_read_a_page_of_rows(
    seeded_url: str, kind: str, name: str, query: Any
) -> None:
    dialect = postgresql_dialect.asyncpg.dialect()
    conn = await asyncpg.connect(asyncpg_dsn(seeded_url))
    try:
        for after in (None, _after(kind)):
            compiled, params = _statement(dialect, kind, query, after)
            explained = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + compiled.sql, *compiled.args(params)
            )
            nodes = _nodes(json.loads(explained)[0]["Plan"])
            scans = [node for node in nodes if node.get("Relation Name") == kind]
            assert scans and not any(n["Node Type"] == "Seq Scan" for n in nodes), nodes
            read = sum(
                n.get("Actual Rows", 0) * n.get("Actual Loops", 1)
                + n.get("Rows Removed by Filter", 0)
                + n.get("Rows Removed by Index Recheck", 0)
                for n in scans
            )
            budget = ROWS_PER_PAGE_ROW * (PAGE + 1) * _branches(query)
            assert read <= budget, (name, after, read, nodes)
        compiled, params = _counts_statement(dialect, kind, query)
        explained = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + compiled.sql, *compiled.args(params)
        )
        nodes = _nodes(json.loads(explained)[0]["Plan"])
        assert not any(n["Node Type"] == "Seq Scan" for n in nodes), nodes
    finally:
        await conn.close()
