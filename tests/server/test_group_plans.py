"""PostgreSQL's group append statement probes the records' unique index for
each key whatever the statistics say (``append_groups._PROBE_EACH``).

asyncpg prepares the statement once per connection, and after five runs
PostgreSQL keeps one generic plan, planned from the statistics of that moment.
On a fresh database they say ``records`` holds a few hundred rows, and the
planner would rather hash every record once than probe the index per key: a
plan that then reads the whole table for every group as it grows. The test
plans the statement the way the pool does, on a nearly empty table, and reads
the plan that would be kept.
"""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg
import pytest

from runstore.server.db import append_groups, migrate
from runstore.server.db.postgres import asyncpg_dsn
from tests import postgres

pytestmark = pytest.mark.postgres

SESSIONS = 4
PER_REQUEST = 4


def _group(round_: int) -> list[list[Any]]:
    """One group of SESSIONS requests of PER_REQUEST records, one run each."""
    payload = b'{"n":1}'
    now = int(time.time() * 1000)
    columns: dict[str, list[Any]] = {name: [] for name, _ in append_groups._COLUMNS}
    for request in range(SESSIONS):
        for index in range(PER_REQUEST):
            row = {
                "request": request,
                "namespace": "default",
                "run_id": f"r{request}",
                "agent_id": "agent",
                "session_id": f"s{request}",
                "event_key": f"k{round_}-{index}",
                "turn_id": "",
                "type": "note",
                "payload": payload,
                "payload_size": len(payload),
                "timestamp_ms": now,
            }
            for name in columns:
                columns[name].append(row[name])
    return [columns[name] for name, _ in append_groups._COLUMNS]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(_nodes(child))
    return found


async def test_the_kept_plan_probes_each_key_instead_of_scanning_the_records() -> None:
    async with postgres.fresh_database("runstore_group_plans") as url:
        await migrate.upgrade(url)
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            for index in range(SESSIONS):
                await conn.execute(
                    "INSERT INTO sessions (session_id, status, created_at_s, created_at_ns)"
                    " VALUES ($1, 'active', 1, 0)",
                    f"s{index}",
                )
                await conn.execute(
                    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id,"
                    " started_at_ms, labels, start_outcome, status, cancellation_reason,"
                    " updated_at, start_key, parent_link_key, cancellation_key,"
                    " suspension_key, terminal_key) VALUES ($1, 'agent', $2, '', 1, '{}',"
                    " 'proceed', 'running', '', 0, 'started', '', '', '', '')",
                    f"r{index}",
                    f"s{index}",
                )
            statement = await conn.prepare(append_groups.GROUP_APPEND)
            for round_ in range(8):  # enough runs for the generic plan to be kept
                async with conn.transaction():
                    rows = await statement.fetch(*_group(round_))
                assert len(rows) == SESSIONS * PER_REQUEST
            # The generic plan, on the statistics of a nearly empty table (never analyzed).
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE kept AS {append_groups.GROUP_APPEND}")
            nulls = ", ".join(f"NULL::{kind}[]" for _, kind in append_groups._COLUMNS)
            (explained,) = await conn.fetchrow(f"EXPLAIN (FORMAT JSON) EXECUTE kept({nulls})")
        finally:
            await conn.close()
    nodes = _nodes(json.loads(explained)[0]["Plan"])
    scans = [node for node in nodes if node.get("Relation Name") == "records"]
    assert scans, "the plan reads no records at all"
    full = [node["Node Type"] for node in scans if node["Node Type"] == "Seq Scan"]
    assert not full, f"the group statement scans every record: {full}"
    key_probes = [node for node in scans if node.get("Alias") == "prior"]
    assert key_probes and all(
        node.get("Index Name") == "ix_records_namespace_run_id_event_key" for node in key_probes
    ), key_probes
