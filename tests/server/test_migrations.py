"""Schema migrations: one Alembic history, both dialects, and serve's schema check."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.server.db import migrate
from runstore.server.db.schema import metadata
from tests import postgres


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    async with postgres.fresh_database("runstore_migrate") as url:
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


async def test_unknown_newer_revision_is_refused(empty_url: str) -> None:
    await migrate.upgrade(empty_url)

    def stamp_future(connection: Connection) -> None:
        connection.execute(text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999_future'"))
        connection.commit()

    await _run_sync(empty_url, stamp_future)
    with pytest.raises(migrate.SchemaError, match="newer than this server"):
        await migrate.ensure_schema(empty_url, migrate=True)


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
            "runstore.server.cli",
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
