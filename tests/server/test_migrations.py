"""Schema migrations: one Alembic history, both dialects, and serve's schema check."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.contract.errors import IdempotencyConflictError, SeedNotFoundError
from runstore.contract.namespaces import DEFAULT
from runstore.server.app import create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.core.model import OneShotRunStart, RecordDraft, RunStart
from runstore.server.db import migrate
from runstore.server.db.schema import metadata
from tests import backends

pytestmark = pytest.mark.usefixtures("acting_in_default")  # direct database work


@pytest.fixture(params=backends.BACKENDS)
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with backends.database(request.param, tmp_path, "migrate") as url:
        yield url


def _differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "version_table": migrate.VERSION_TABLE}
    )
    return list(compare_metadata(context, metadata))


async def _run_sync(url: str, fn):  # type: ignore[no-untyped-def]
    engine = create_async_engine(migrate.async_url(url), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(fn)
    finally:
        await engine.dispose()


async def test_empty_database_migrates_to_head_matching_the_models(empty_url: str) -> None:
    before = await migrate.upgrade(empty_url)
    assert before.empty
    state = await migrate.schema_state(empty_url)
    assert state.at_head and state.current == migrate.head_revision()
    assert await _run_sync(empty_url, _differences) == []
    again = await migrate.upgrade(empty_url)  # idempotent
    assert again.at_head


async def test_serve_refuses_a_database_behind_head_unless_told(empty_url: str) -> None:
    if empty_url.startswith("sqlite"):
        # A brand-new SQLite file is the embedded default: serve creates it.
        await migrate.ensure_schema(empty_url, migrate=False)
        assert (await migrate.schema_state(empty_url)).at_head
        return
    with pytest.raises(migrate.SchemaError, match="run `runstore migrate"):
        await migrate.ensure_schema(empty_url, migrate=False)
    await migrate.ensure_schema(empty_url, migrate=True)
    assert (await migrate.schema_state(empty_url)).at_head


async def test_tables_without_a_revision_are_refused(empty_url: str) -> None:
    def create_foreign_tables(connection: Connection) -> None:
        metadata.create_all(connection)
        connection.commit()

    await _run_sync(empty_url, create_foreign_tables)
    with pytest.raises(migrate.SchemaError, match="run `runstore migrate"):
        await migrate.ensure_schema(empty_url, migrate=False)


async def test_runstore_migrate_command(empty_url: str) -> None:
    """The deploy step: `runstore migrate` as a process, twice."""

    async def migrate_once() -> str:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runstore.cli",
            "migrate",
            "--database-url",
            empty_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        return out.decode()

    head = migrate.head_revision()
    history = reversed(
        list(ScriptDirectory.from_config(migrate._alembic_config()).walk_revisions())
    )
    applied = "".join(
        f"applied {script.revision}: {script.doc.strip().splitlines()[0]}\n" for script in history
    )
    assert await migrate_once() == f"{applied}schema upgraded from empty to {head}\n"
    assert await migrate_once() == f"schema already at {head}\n"


def _upgrade_to(revision: str) -> Any:
    def upgrade(connection: Connection) -> None:
        config = migrate._alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        connection.commit()

    return upgrade


_SESSION_NS = -1_500_000_001  # 1969-12-31T23:59:58.499999999Z: negative, not whole seconds
_ENDED_NS = 1_764_590_400_123_456_789
_STARTED_MS = 1_764_590_400_123
_MEMORY_NS = 1_764_590_400_987_654_321


_RUN_0003 = (
    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at, labels, "
    "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
    "cancellation_key, suspension_key, terminal_key, checkpoint_id, checkpoint_data) "
    "VALUES ('r1', 'a', '{session}', '', {started}, '{{}}', 'proceed', 'running', "
    "'', 5, 'k1', '', '', '', '', NULL, NULL)"
)


def _seed_revision_0003(connection: Connection) -> None:
    """Rows as 0003 stored them: every time a BIGINT of nanoseconds."""
    statements = [
        "INSERT INTO sessions (session_id, status, created_at, ended_at) "
        f"VALUES ('s1', 'ended', {_SESSION_NS}, {_ENDED_NS})",
        "INSERT INTO sessions (session_id, status, created_at, ended_at) "
        f"VALUES ('s2', 'active', {_ENDED_NS}, NULL)",
        _RUN_0003.format(session="s2", started=_STARTED_MS * 1_000_000),
        "INSERT INTO records (run_id, record_id, event_key, agent_id, session_id, turn_id, "
        "type, payload, payload_size, timestamp, session_position) VALUES ('r1', 1, 'k1', 'a', "
        f"'s2', '', 'runtime.run_started', :payload, 2, {_STARTED_MS * 1_000_000}, 1)",
        "INSERT INTO memory_runs (agent_id, run_id, event_count) VALUES ('a', 'm', 1)",
        "INSERT INTO memory_events (agent_id, run_id, position, type, timestamp, data, labels) "
        f"VALUES ('a', 'm', 0, 'user_message', {_MEMORY_NS}, :payload, '{{}}')",
        "INSERT INTO memory_appends (agent_id, run_id, idempotency_key, digest, "
        "first_position, count) VALUES ('a', 'm', 'step-1', :digest, 0, 1)",
    ]
    for statement in statements:
        connection.execute(text(statement), {"payload": b"{}", "digest": b"d" * 32})
    connection.commit()


async def test_existing_rows_migrate_to_exact_times_without_losing_nanoseconds(
    empty_url: str,
) -> None:
    await _run_sync(empty_url, _upgrade_to("0003_derived_record_ids"))
    await _run_sync(empty_url, _seed_revision_0003)
    await migrate.upgrade(empty_url)
    assert await _run_sync(empty_url, _differences) == []

    config = ServerConfig(listen="127.0.0.1:0", database_url=empty_url)
    async with open_database(config) as db:
        stores = create_stores(config, db)
        ended = await stores.runtime.load_session("s1")
        assert (ended.created_at, ended.ended_at) == (_SESSION_NS, _ENDED_NS)
        assert (await stores.runtime.load_session("s2")).ended_at is None
        run = await stores.runtime.load_run("r1")
        assert run.started_at == _STARTED_MS * 1_000_000
        page = await stores.runtime.list_session_run_records("s2", "", 10)
        assert [record.timestamp for record in page.events] == [_STARTED_MS * 1_000_000]
        memory = await stores.memory.load_run("a", "m", "", 0)
        assert [event.timestamp for event in memory.events] == [_MEMORY_NS]
        # The migrated idempotency key still finds its append (its digest differs).
        with pytest.raises(IdempotencyConflictError):
            await stores.memory.append_events("a", "m", [], "step-1")


def _sub_millisecond_record(connection: Connection) -> None:
    connection.execute(text(_RUN_0003.format(session="", started=1_000_001)))
    connection.commit()


async def test_a_start_time_that_is_not_a_whole_millisecond_stops_the_migration(
    empty_url: str,
) -> None:
    await _run_sync(empty_url, _upgrade_to("0003_derived_record_ids"))
    await _run_sync(empty_url, _sub_millisecond_record)
    with pytest.raises(RuntimeError, match="not whole milliseconds"):
        await migrate.upgrade(empty_url)
    assert (await migrate.schema_state(empty_url)).current == "0003_derived_record_ids"


_RUN_0006 = (
    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, labels, "
    "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
    "cancellation_key, suspension_key, terminal_key, checkpoint_id, checkpoint_data) "
    "VALUES ('{run}', 'a', '', '', 1000, '{{}}', 'proceed', '{status}', '', 5, 'start', '', "
    "'', '', '{terminal}', NULL, NULL)"
)


def _seed_revision_0006(connection: Connection) -> None:
    """An ended, a running and a suspended sessionless run, and two context keys
    (one saved, one with only a transcript), as 0006 stored them."""
    statements = [
        _RUN_0006.format(run="done", status="completed", terminal="end"),
        _RUN_0006.format(run="busy", status="running", terminal=""),
        _RUN_0006.format(run="paused", status="suspended", terminal="pause"),
        *(
            "INSERT INTO records (run_id, record_id, event_key, agent_id, session_id, turn_id, "
            f"type, payload, payload_size, timestamp_ms) VALUES ('{run}', {number}, '{key}', "
            f"'a', '', '', 'x', :payload, 2, {at})"
            for run, number, key, at in (
                ("done", 1, "start", 1000),
                ("done", 2, "end", 4242),
                ("busy", 1, "start", 1000),
                ("paused", 1, "start", 1000),
                ("paused", 2, "pause", 2000),
            )
        ),
        "INSERT INTO context_keys (context_key, version, saved_at, transcript_count) "
        "VALUES ('saved', 1, 77, 0), ('transcript-only', 0, NULL, 3)",
    ]
    for statement in statements:
        connection.execute(text(statement), {"payload": b"{}"})
    connection.commit()


async def test_retention_columns_are_backfilled(empty_url: str) -> None:
    await _run_sync(empty_url, _upgrade_to("0006_exact_times"))
    await _run_sync(empty_url, _seed_revision_0006)
    before_ns = time.time_ns()
    await migrate.upgrade(empty_url)
    assert await _run_sync(empty_url, _differences) == []

    def read(connection: Connection) -> Any:
        finished = dict(connection.execute(text("SELECT run_id, finished_at_ms FROM runs")).all())
        written = dict(
            connection.execute(text("SELECT context_key, written_at FROM context_keys")).all()
        )
        return finished, written

    finished, written = await _run_sync(empty_url, read)
    # Only an ending record sets a finish time; a suspension does not.
    assert finished == {"done": 4242, "busy": None, "paused": None}
    assert written["saved"] == 77  # its last save
    assert before_ns <= written["transcript-only"] <= time.time_ns()  # the migration's time


_NAMESPACED_TABLES = (
    "sessions",
    "session_tombstones",
    "run_tombstones",
    "runs",
    "records",
    "memory_runs",
    "memory_events",
    "memory_appends",
    "context_keys",
    "context_versions",
    "context_transcript",
    "context_appends",
)


async def test_existing_rows_move_into_the_default_namespace(empty_url: str) -> None:
    await _run_sync(empty_url, _upgrade_to("0006_exact_times"))
    await _run_sync(empty_url, _seed_revision_0006)
    await _run_sync(empty_url, _upgrade_to("0007_retention"))
    await migrate.upgrade(empty_url)
    assert await _run_sync(empty_url, _differences) == []

    def read(connection: Connection) -> Any:
        namespaces = {
            table: set(
                connection.execute(text(f"SELECT DISTINCT namespace FROM {table}")).scalars()
            )
            for table in _NAMESPACED_TABLES
        }
        rows = connection.execute(text("SELECT name, state FROM namespaces")).all()
        # The same run ID in another namespace is another row (the key grew).
        connection.execute(
            text(
                "INSERT INTO runs (namespace, run_id, agent_id, session_id, parent_run_id, "
                "started_at_ms, labels, start_outcome, status, cancellation_reason, "
                "updated_at, start_key, parent_link_key, cancellation_key, suspension_key, "
                "terminal_key) SELECT 'team-b', run_id, agent_id, session_id, parent_run_id, "
                "started_at_ms, labels, start_outcome, status, cancellation_reason, "
                "updated_at, start_key, parent_link_key, cancellation_key, suspension_key, "
                "terminal_key FROM runs WHERE run_id = 'done'"
            )
        )
        connection.commit()
        return namespaces, rows

    namespaces, rows = await _run_sync(empty_url, read)
    assert namespaces["runs"] == {"default"}
    assert namespaces["records"] == {"default"}
    assert namespaces["context_keys"] == {"default"}
    assert all(found <= {"default"} for found in namespaces.values())
    assert [tuple(row) for row in rows] == [("default", "active")]

    # Downgrading would merge team-b's run into default's: refused.
    with pytest.raises(RuntimeError, match="namespace other than 'default'"):
        await _run_sync(empty_url, _downgrade_to("0007_retention"))

    def drop_team_b(connection: Connection) -> None:
        connection.execute(text("DELETE FROM runs WHERE namespace = 'team-b'"))
        connection.commit()

    await _run_sync(empty_url, drop_team_b)
    await _run_sync(empty_url, _downgrade_to("0007_retention"))

    def runs_after(connection: Connection) -> Any:
        return sorted(connection.execute(text("SELECT run_id FROM runs")).scalars())

    assert await _run_sync(empty_url, runs_after) == ["busy", "done", "paused"]


def _downgrade_to(revision: str) -> Any:
    def downgrade(connection: Connection) -> None:
        config = migrate._alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
        connection.commit()

    return downgrade


async def test_runs_from_before_0011_read_as_seed_era(empty_url: str) -> None:
    """0011 adds nullable columns only: rows written before it, or by a server
    of 0009 after it (whose inserts leave them out), are seed-era runs (D1)."""
    await _run_sync(empty_url, _upgrade_to("0006_exact_times"))
    await _run_sync(empty_url, _seed_revision_0006)
    await _run_sync(empty_url, _upgrade_to("0009_quotas"))
    await migrate.upgrade(empty_url)
    assert await _run_sync(empty_url, _differences) == []

    def insert_as_0009(connection: Connection) -> None:
        connection.execute(
            text(
                "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, "
                "labels, start_outcome, status, cancellation_reason, updated_at, start_key, "
                "parent_link_key, cancellation_key, suspension_key, terminal_key) "
                "VALUES ('old-server', 'a', '', '', 1000, '{}', 'proceed', 'running', '', 5, "
                "'start', '', '', '', '')"
            )
        )
        connection.commit()

    await _run_sync(empty_url, insert_as_0009)
    config = ServerConfig(listen="127.0.0.1:0", database_url=empty_url)
    async with open_database(config) as db:
        stores = create_stores(config, db)
        for run_id in ("paused", "old-server"):
            run = await stores.runtime.load_run(run_id)
            assert (run.request_digest, run.successor_run_id, run.seed_end_id) == (b"", "", "")
            start = RunStart(run_id, "a", started_at=run.started_at)
            # A current start attaches its seed first (§9.7.9), and no seed
            # can be begun for a run that exists.
            with pytest.raises(SeedNotFoundError):
                await stores.runtime.start_one_shot_run(
                    OneShotRunStart(start, _started(start), request_digest=b"\x01" * 32)
                )
    await _run_sync(empty_url, _downgrade_to("0009_quotas"))


def _started(start: RunStart) -> RecordDraft:
    return RecordDraft(
        "start", start.run_id, "a", "", "", "run_started", b"{}", start.started_at, DEFAULT
    )


_FAILED_RUNS = 2100
"""More than two of 0013's backfill batches, so the batches' keyset is exercised."""


def _seed_failed_runs_0012(connection: Connection) -> None:
    """Failed runs whose ending records carry a failure (one without), a
    completed run, as 0012 stored them: no failure column yet."""
    run = (
        "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, labels, "
        "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
        "cancellation_key, suspension_key, terminal_key, finished_at_ms) "
        "VALUES (:run, 'a', '', '', 1000, '{}', 'proceed', :status, '', 5, 'start', '', '', "
        "'', 'end', 3000)"
    )
    record = (
        "INSERT INTO records (run_id, record_id, event_key, agent_id, session_id, turn_id, "
        "type, payload, payload_size, timestamp_ms) VALUES (:run, :id, :key, 'a', '', '', "
        "'run_completed', :payload, 2, 3000)"
    )
    failure = (
        b'{"status":"failed","phase":"failed","failure":{"message":"disk full %d",'
        b'"kind":"io","code":"ENOSPC","retryable":true,"debug_message":"x"}}'
    )
    names = [f"failed-{i:05d}" for i in range(_FAILED_RUNS)]
    connection.execute(text(run), [{"run": name, "status": "failed"} for name in names])
    connection.execute(
        text(run), [{"run": "no-failure", "status": "failed"}, {"run": "ok", "status": "completed"}]
    )
    connection.execute(
        text(record),
        [
            {"run": name, "id": 2, "key": "end", "payload": failure % i}
            for i, name in enumerate(names)
        ]
        + [
            {"run": "no-failure", "id": 2, "key": "end", "payload": b"not json"},
            {"run": "ok", "id": 2, "key": "end", "payload": b'{"status":"success"}'},
            # A record of the run that is not its ending one is never read.
            {"run": "ok", "id": 3, "key": "other", "payload": failure % 0},
        ],
    )
    connection.commit()


async def test_failed_runs_get_their_failure_backfilled(empty_url: str) -> None:
    await _run_sync(empty_url, _upgrade_to("0012_run_seeds"))
    await _run_sync(empty_url, _seed_failed_runs_0012)
    await migrate.upgrade(empty_url)
    assert await _run_sync(empty_url, _differences) == []
    config = ServerConfig(listen="127.0.0.1:0", database_url=empty_url)
    async with open_database(config) as db:
        stores = create_stores(config, db)
        for i in (0, 999, 1000, _FAILED_RUNS - 1):
            run = await stores.runtime.load_run(f"failed-{i:05d}")
            assert run.failure is not None
            assert (run.failure.message, run.failure.kind) == (f"disk full {i}", "io")
            assert (run.failure.code, run.failure.retryable) == ("ENOSPC", True)
            assert run.ended_at == 3000 * 1_000_000
        for run_id in ("no-failure", "ok"):
            assert (await stores.runtime.load_run(run_id)).failure is None

    def unfilled(connection: Connection) -> int:
        query = "SELECT count(*) FROM runs WHERE status = 'failed' AND failure IS NULL"
        return int(connection.execute(text(query)).scalar_one())

    assert await _run_sync(empty_url, unfilled) == 1  # only the one without a failure
    await _run_sync(empty_url, _downgrade_to("0012_run_seeds"))
