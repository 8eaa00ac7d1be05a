"""ListSessions and ListRuns page cost at two table sizes (docs/contract.md §9.8).

For each size, a fresh database is seeded in SQL with ``size`` sessions and
``size`` runs, and one page of 100 is timed for each listing shape: the first
page, a page deep in the walk (its token points at the last thousand rows), a
status filter, and for runs an agent with two statuses (merged index branches)
and sessionless runs. A page cost that does not grow with the table shows as
the same latency at both sizes.

Seeded rows, for i in 1..size: session ``s{i}`` created at ``i`` µs, ended
when i is even; run ``r{i}`` started at ``i`` ms, in session ``s{i}`` unless
i is a multiple of 10 (sessionless), agent ``agent-{i % 10}``, status by
``(i // 7) % 5`` (running, completed, failed, canceled, suspended).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg
from google.protobuf import json_format
from sqlalchemy.engine import make_url

from runstore.contract.model import RunFilter, SessionFilter
from runstore.server.core import listing
from runstore.server.db.postgres import asyncpg_dsn
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb

PAGE = 100

_STATUS_OF = (
    "CASE g % 5 WHEN 0 THEN 'running' WHEN 1 THEN 'completed' WHEN 2 THEN 'failed' "
    "WHEN 3 THEN 'canceled' ELSE 'suspended' END"
)

_SEED_SESSIONS = (
    "INSERT INTO sessions (session_id, status, created_at_s, created_at_ns, ended_at_s, "
    "ended_at_ns) SELECT 's' || g, CASE WHEN g % 2 = 0 THEN 'ended' ELSE 'active' END, g, 0, "
    "CASE WHEN g % 2 = 0 THEN g ELSE NULL END, CASE WHEN g % 2 = 0 THEN 1 ELSE NULL END "
    "FROM {source}"
)
_SEED_RUNS = (
    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, labels, "
    "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
    "cancellation_key, suspension_key, terminal_key, checkpoint_id, checkpoint_data) "
    "SELECT 'r' || g, 'agent-' || (g % 10), CASE WHEN g % 10 = 0 THEN '' ELSE 's' || g END, "
    "'', g, '{{}}', 'proceed', " + _STATUS_OF + ", '', g * 1000000, 'k1', '', '', '', "
    "'', NULL, NULL FROM {source}"
)


def seed_sqlite(url: str, size: int) -> None:
    conn = sqlite3.connect(make_url(url).database or "")
    source = (
        f"(WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < {size}) "
        "SELECT g FROM seq)"
    )
    with conn:
        conn.execute(_SEED_SESSIONS.format(source=source))
        conn.execute(_SEED_RUNS.format(source=source))
    conn.execute("ANALYZE")
    conn.close()


async def seed_postgres(url: str, size: int) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        source = f"generate_series(1::bigint, {size}) AS g"
        async with conn.transaction():
            await conn.execute(_SEED_SESSIONS.format(source=source))
            await conn.execute(_SEED_RUNS.format(source=source))
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def _request(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def cases(size: int) -> list[dict[str, Any]]:
    """The timed requests for a table of ``size`` rows, each with its label."""
    deep = size - 1000
    deep_session = listing.encode_token(
        listing.session_filter_digest(SessionFilter()), (deep * 1000, f"s{deep}")
    )
    deep_run = listing.encode_token(
        listing.run_filter_digest(RunFilter()), (deep * 1_000_000, f"r{deep}")
    )
    return [
        {"case": "sessions, first page", "rpc": "ListSessions", "request": {}},
        {
            "case": "sessions, deep page",
            "rpc": "ListSessions",
            "request": {"page_token": deep_session},
        },
        {
            "case": "sessions, status ended",
            "rpc": "ListSessions",
            "request": _request(sa.ListSessionsRequest(statuses=[pb.SESSION_STATUS_ENDED])),
        },
        {"case": "runs, first page", "rpc": "ListRuns", "request": {}},
        {"case": "runs, deep page", "rpc": "ListRuns", "request": {"page_token": deep_run}},
        {
            "case": "runs, status completed",
            "rpc": "ListRuns",
            "request": _request(sa.ListRunsRequest(statuses=[pb.RUN_STATUS_COMPLETED])),
        },
        {
            "case": "runs, agent + 2 statuses",
            "rpc": "ListRuns",
            "request": _request(
                sa.ListRunsRequest(
                    agent_id="agent-1", statuses=[pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED]
                )
            ),
        },
        {
            "case": "runs, sessionless",
            "rpc": "ListRuns",
            "request": _request(sa.ListRunsRequest(sessionless_only=True)),
        },
    ]
