"""Seeds and preparations go wherever their run's data goes (docs/retention.md,
docs/namespaces.md): purging a session, retention of ended sessions and of
finished sessionless runs delete every seed table's rows of the runs they
delete (``seed_records``, ``seed_attempts``, ``seed_operations``,
``synchronous_runs``), published, open or never published, and nothing else.

Tests share one server per backend; their times are in a nineteenth-century
window of their own, so retention's cut-offs reach only their rows.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import asyncpg
from sqlalchemy.engine import make_url

from runstore.server.db.postgres import asyncpg_dsn
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from tests.seeds import Upload, declaration
from tests.support import Run, Store, run_start, started_record, ts, unique

SEED_TABLES = ("seed_records", "seed_attempts", "seed_operations", "synchronous_runs")


def window_ms() -> int:
    """A thousand seconds of the nineteenth century no other test uses."""
    return (-4_000_000_000 + random.randrange(1_000_000) * 1000) * 1000


async def seed_rows(database_url: str, run_ids: Iterable[str]) -> dict[str, int]:
    """How many rows each seed table holds for ``run_ids``."""
    ids = list(run_ids)
    counts: dict[str, int] = {}
    if make_url(database_url).get_backend_name() == "sqlite":
        import sqlite3

        path = make_url(database_url).database
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            marks = ",".join("?" * len(ids))
            for table in SEED_TABLES:
                query = f"SELECT count(*) FROM {table} WHERE run_id IN ({marks})"
                counts[table] = connection.execute(query, ids).fetchone()[0]
        finally:
            connection.close()
        return counts
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        for table in SEED_TABLES:
            query = f"SELECT count(*) FROM {table} WHERE run_id = ANY($1::text[])"
            counts[table] = await conn.fetchval(query, ids)
    finally:
        await conn.close()
    return counts


async def seeded_run(store: Store, started_ms: int) -> Run:
    """A synchronous (so sessionless) run started from its published seed:
    every seed table has a row of it."""
    upload = await Upload(store.runtime, declaration()).published(history=2)
    run = run_start(run_id=upload.run_id, seed_end_id="2", started_ms=started_ms)
    await store.runtime.StartSynchronousRun(
        sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    )
    return run


async def open_preparation(store: Store, session_id: str) -> str:
    """An attempt begun with a history and a prepared part, never published."""
    upload = Upload(store.runtime, declaration(session_id=session_id))
    await upload.begin()
    await upload.history()
    await upload.compiled()
    return upload.run_id


async def session_with_seeds(store: Store, created_ms: int) -> tuple[str, list[str]]:
    """A session with a published seed of one of its runs and an open
    preparation of another."""
    session_id = unique("seeded")
    await store.admin.CreateSession(
        sa.CreateSessionRequest(session_id=session_id, created_at=ts(created_ms))
    )
    published = await Upload(store.runtime, declaration(session_id=session_id)).published()
    return session_id, [published.run_id, await open_preparation(store, session_id)]


def stored(counts: dict[str, int]) -> bool:
    """Rows in every seed table a session's seeds use (synchronous runs have none)."""
    return all(counts[table] for table in SEED_TABLES if table != "synchronous_runs")


async def test_purging_a_session_deletes_its_seeds_preparations_and_start_kinds(
    store: Store, database_url: str
) -> None:
    base = window_ms()
    session_id, doomed = await session_with_seeds(store, base)
    _, kept = await session_with_seeds(store, base)
    before = await seed_rows(database_url, doomed)
    assert stored(before), before
    await store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=ts(base + 3)))
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id))
    assert set((await seed_rows(database_url, doomed)).values()) == {0}
    assert await seed_rows(database_url, kept) == before


async def test_retention_of_ended_sessions_deletes_their_seeds(
    store: Store, database_url: str
) -> None:
    base = window_ms()
    session_id, doomed = await session_with_seeds(store, base)
    assert stored(await seed_rows(database_url, doomed))
    await store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=ts(base + 3)))
    purged: list[str] = []
    response = sa.PurgeEndedSessionsResponse(more=True)
    while response.more and session_id not in purged:
        response = await store.admin.PurgeEndedSessions(
            sa.PurgeEndedSessionsRequest(ended_before=ts(base + 4), limit=1000)
        )
        purged += response.purged_session_ids
    assert session_id in purged
    assert set((await seed_rows(database_url, doomed)).values()) == {0}


async def test_retention_of_sessionless_runs_deletes_their_seeds(
    store: Store, database_url: str
) -> None:
    base = window_ms()
    run = await seeded_run(store, base)
    await store.runtime.RecordRunTerminal(run.terminal_request(at_ms=base + 1))
    assert all((await seed_rows(database_url, [run.id])).values())
    purged: list[str] = []
    response = sa.PurgeSessionlessRunsResponse(more=True)
    while response.more and run.id not in purged:
        response = await store.admin.PurgeSessionlessRuns(
            sa.PurgeSessionlessRunsRequest(finished_before=ts(base + 2), limit=1000)
        )
        purged += response.purged_run_ids
    assert run.id in purged
    assert set((await seed_rows(database_url, [run.id])).values()) == {0}
    loaded = await store.admin.ListRuns(sa.ListRunsRequest(run_id=run.id))
    assert list(loaded.runs) == []
