"""``create_index_online``: an index built on a table in use, on PostgreSQL
concurrently, through the real ``migrate.upgrade`` (asyncpg, Alembic's
autocommit block), with a revision of the test's own after the real head."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from alembic.config import Config

from runstore.server.db import compat, migrate
from runstore.server.db.urls import asyncpg_dsn
from tests import postgres

pytestmark = pytest.mark.postgres

INDEX = "ix_namespace_usage_measured_at"

_REVISION = '''"""A test's index on a table in use.

Revision ID: {revision}
Revises: {down}
"""

from runstore.server.db.online_index import create_index_online

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
min_compat_level = 1


def upgrade() -> None:
    create_index_online(
        "{index}", "namespace_usage", ["measured_at"], lock_timeout_ms={lock_timeout_ms}
    )


def downgrade() -> None:
    pass
'''


@dataclass
class Database:
    url: str
    before: str
    """The real head, where the database is before the test's revision."""
    revision: str
    """The test's revision, one after the real head."""


async def _with_index_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, lock_timeout_ms: int
) -> AsyncIterator[Database]:
    real_head = migrate.head_revision()
    async with postgres.fresh_database("runstore_online_index") as url:
        await migrate.upgrade(url)
        revision = "9001_test_online_index"
        versions = tmp_path / "versions"
        versions.mkdir()
        (versions / f"{revision}.py").write_text(
            _REVISION.format(
                revision=revision, down=real_head, index=INDEX, lock_timeout_ms=lock_timeout_ms
            )
        )
        real_config = migrate._alembic_config

        def with_test_revision() -> Config:
            config = real_config()
            real = Path(migrate.__file__).with_name("migrations") / "versions"
            config.set_main_option("path_separator", "os")
            config.set_main_option("version_locations", f"{real}{os.pathsep}{versions}")
            return config

        monkeypatch.setattr(migrate, "_alembic_config", with_test_revision)
        yield Database(url, real_head, revision)


@pytest.fixture
async def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Database]:
    async for found in _with_index_revision(tmp_path, monkeypatch, lock_timeout_ms=60_000):
        yield found


@pytest.fixture
async def impatient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Database]:
    async for found in _with_index_revision(tmp_path, monkeypatch, lock_timeout_ms=200):
        yield found


async def _index_valid(connection: asyncpg.Connection) -> bool | None:
    """The index's ``indisvalid``, or None when there is no such index."""
    valid: bool | None = await connection.fetchval(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = $1",
        INDEX,
    )
    return valid


async def _revision_and_marker(connection: asyncpg.Connection) -> tuple[str, str]:
    version = await connection.fetchval(f"SELECT version_num FROM {migrate.VERSION_TABLE}")
    marker = await connection.fetchval(f"SELECT revision FROM {compat.MARKER_TABLE}")
    return version, marker


async def _waiting_build(connection: asyncpg.Connection) -> int:
    """The pid of the index build once it waits for a lock (polling the catalog)."""
    while True:
        pid: int | None = await connection.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'"
        )
        if pid is not None:
            return pid
        await asyncio.sleep(0.02)


async def test_a_cancelled_build_leaves_an_invalid_index_that_a_rerun_replaces(
    database: Database,
) -> None:
    dsn = asyncpg_dsn(database.url)
    holder = await asyncpg.connect(dsn)
    other = await asyncpg.connect(dsn)
    try:
        # An open transaction that wrote to the table: the build waits for it.
        holding = holder.transaction()
        await holding.start()
        await holder.execute("INSERT INTO namespace_usage VALUES ('before', 1, 1)")

        build = asyncio.ensure_future(migrate.upgrade(database.url))
        pid = await asyncio.wait_for(_waiting_build(other), timeout=60)
        # Writes to the table go on while the build waits.
        await asyncio.wait_for(
            other.execute("INSERT INTO namespace_usage VALUES ('during', 2, 2)"), timeout=30
        )
        assert not build.done()

        assert await other.fetchval("SELECT pg_cancel_backend($1)", pid)
        with pytest.raises(migrate.MigrationFailed, match="canceling statement"):
            await asyncio.wait_for(build, timeout=60)
        assert await _index_valid(other) is False
        # The revision is not recorded: the next run does it again.
        assert await _revision_and_marker(other) == (database.before, database.before)
        await holding.commit()

        await asyncio.wait_for(migrate.upgrade(database.url), timeout=60)
        assert await _index_valid(other) is True
        assert await _revision_and_marker(other) == (database.revision, database.revision)
        names = await other.fetch("SELECT name FROM namespace_usage ORDER BY name")
        assert [row["name"] for row in names] == ["before", "during"]
    finally:
        await holder.close()
        await other.close()


async def test_a_build_stops_at_its_lock_timeout_and_a_rerun_builds_it(
    impatient: Database,
) -> None:
    dsn = asyncpg_dsn(impatient.url)
    holder = await asyncpg.connect(dsn)
    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute("INSERT INTO namespace_usage VALUES ('held', 1, 1)")
        # The transaction stays open past the build's lock timeout (200 ms).
        with pytest.raises(migrate.MigrationFailed, match="lock timeout"):
            await asyncio.wait_for(migrate.upgrade(impatient.url), timeout=60)
        assert await _index_valid(holder) is False
        await holding.commit()

        await asyncio.wait_for(migrate.upgrade(impatient.url), timeout=60)
        assert await _index_valid(holder) is True
    finally:
        await holder.close()
