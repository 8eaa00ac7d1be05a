"""Every listing shape reads an index in the listing's order (§9.8).

The query planner's own EXPLAIN over a seeded table. SQLite: each base-table
access is a search of the index made for the shape, and a shape with one branch
needs no sort. PostgreSQL: never a full scan, and a one-branch shape reads the
shape's index or the order's index, unsorted. So a page reads a bounded number
of index entries whatever the table's size; ``make bench`` measures it at a
million rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import make_url

from bench import listings as seeded
from runstore.contract.model import RunFilter, RunStatus, SessionFilter, SessionStatus
from runstore.contract.namespaces import DEFAULT
from runstore.server.db import migrate
from runstore.server.db.listings import ListingStatements
from runstore.server.db.postgres import asyncpg_dsn
from runstore.server.db.schema import metadata
from tests import postgres

ROWS = 5000
AFTER = (2000 * 1_000_000, "r2000")
DONE = frozenset({RunStatus.COMPLETED, RunStatus.FAILED})

ORDER_INDEX = {
    "sessions": "ix_sessions_namespace_created_at_s_created_at_ns_session_id",
    "runs": "ix_runs_namespace_started_at_ms_run_id",
}

_RUNS_BY_SESSION = "ix_runs_namespace_session_id_started_at_ms_run_id"

SESSION_SHAPES: list[tuple[str, SessionFilter[int], str]] = [
    ("no filter", SessionFilter(), "ix_sessions_namespace_created_at_s_created_at_ns_session_id"),
    (
        "time range",
        SessionFilter(created_after=1000, created_before=10**9),
        "ix_sessions_namespace_created_at_s_created_at_ns_session_id",
    ),
    (
        "status",
        SessionFilter(statuses=frozenset({SessionStatus.ENDED})),
        "ix_sessions_namespace_status_created_at_session_id",
    ),
]
RUN_SHAPES: list[tuple[str, RunFilter[int], str]] = [
    ("no filter", RunFilter(), "ix_runs_namespace_started_at_ms_run_id"),
    (
        "time range",
        RunFilter(started_after=1, started_before=10**15),
        "ix_runs_namespace_started_at_ms_run_id",
    ),
    ("session", RunFilter(session_id="s4001"), "ix_runs_namespace_session_id_started_at_ms_run_id"),
    (
        "sessionless",
        RunFilter(sessionless_only=True),
        "ix_runs_namespace_session_id_started_at_ms_run_id",
    ),
    ("agent", RunFilter(agent_id="agent-3"), "ix_runs_namespace_agent_id_started_at_ms_run_id"),
    (
        "status",
        RunFilter(statuses=frozenset({RunStatus.COMPLETED})),
        "ix_runs_namespace_status_started_at_ms_run_id",
    ),
    ("two statuses", RunFilter(statuses=DONE), "ix_runs_namespace_status_started_at_ms_run_id"),
    (
        "session and statuses",
        RunFilter(session_id="s4001", statuses=DONE),
        "ix_runs_namespace_session_id_status_started_at_ms_run_id",
    ),
    (
        "agent and statuses",
        RunFilter(agent_id="agent-3", statuses=DONE),
        "ix_runs_namespace_agent_id_status_started_at_ms_run_id",
    ),
]
SHAPES = [("sessions", *shape) for shape in SESSION_SHAPES] + [
    ("runs", *shape) for shape in RUN_SHAPES
]


def _statement(dialect: Any, kind: str, query: Any) -> Any:
    statements = ListingStatements(dialect)
    after = (AFTER[0] // 1000, "s2000") if kind == "sessions" else AFTER
    build = statements.sessions if kind == "sessions" else statements.runs
    compiled, params = build(query, after, 101)
    # Every call binds its namespace (SqlTransaction); the seeded rows are in default.
    return compiled, {**params, "namespace": DEFAULT}


@pytest.fixture(scope="module")
async def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('plans') / 'plans.db'}"
    await migrate.upgrade(url)
    seeded.seed_sqlite(url, ROWS)
    yield make_url(url).database or ""


@pytest.fixture(scope="module")
async def postgres_url() -> AsyncIterator[str]:
    async with postgres.fresh_database("runstore_plans") as url:
        await migrate.upgrade(url)
        await seeded.seed_postgres(url, ROWS)
        yield url


def _branches(query: Any) -> int:
    return max(1, len(query.statuses or ()))


@pytest.mark.parametrize(("kind", "name", "query", "index"), SHAPES, ids=[s[1] for s in SHAPES])
def test_sqlite_reads_the_index_of_each_shape(
    sqlite_db: str, kind: str, name: str, query: Any, index: str
) -> None:
    compiled, params = _statement(sqlite_dialect.dialect(paramstyle="named"), kind, query)
    conn = sqlite3.connect(sqlite_db)
    try:
        plan = [
            row[3]
            for row in conn.execute("EXPLAIN QUERY PLAN " + compiled.sql, compiled.args(params))
        ]
    finally:
        conn.close()
    accesses = [step for step in plan if step.startswith(("SCAN", "SEARCH"))]
    table_accesses = [step for step in accesses if f" {kind} " in f"{step} "]
    assert len(table_accesses) == _branches(query), plan
    for step in table_accesses:
        assert step.startswith(f"SEARCH {kind} USING") and f"INDEX {index} " in step, plan
    if _branches(query) == 1:
        assert not any("TEMP B-TREE" in step for step in plan), plan


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found.extend(_nodes(child))
    return found


@pytest.mark.postgres
@pytest.mark.parametrize(("kind", "name", "query", "index"), SHAPES, ids=[s[1] for s in SHAPES])
async def test_postgres_reads_the_index_of_each_shape(
    postgres_url: str, kind: str, name: str, query: Any, index: str
) -> None:
    compiled, params = _statement(postgresql_dialect.asyncpg.dialect(), kind, query)
    conn = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        explained = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + compiled.sql, *compiled.args(params)
        )
    finally:
        await conn.close()
    nodes = _nodes(json.loads(explained)[0]["Plan"])
    scans = [node for node in nodes if node.get("Relation Name") == kind]
    assert len(scans) == _branches(query), nodes
    assert not any(node["Node Type"] == "Seq Scan" for node in nodes), nodes
    if _branches(query) == 1:
        # PostgreSQL weighs the filter's index against the order's (with the
        # filter applied to each row): either reads in order, so no sort.
        (scan,) = scans
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), scan
        assert scan["Index Name"] in (index, ORDER_INDEX[kind]), scan
        assert not any(node["Node Type"] == "Sort" for node in nodes), nodes


def test_every_expected_index_is_in_the_schema() -> None:
    names = {index.name for table in metadata.tables.values() for index in table.indexes}
    assert {index for *_, index in SHAPES} <= names
