"""Version skew (docs/upgrades.md): the compatibility marker every migration run
records, the start rule of ``serve`` on a schema newer than its code, the
``migrate`` of an older release, and a history kept linear.

A newer release's schema is faked the way such a release would leave it: an
unknown revision in the version table and in the marker."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.server.db import compat, migrate
from tests import backends
from tests.processes import server_process
from tests.server.test_startup_failures import one_line, runstore
from tests.support import Store, run_start

NEWER = "0099_from_the_future"
NEWER_VERSION = "9.8.7"


@pytest.fixture(params=backends.BACKENDS)
async def migrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A database migrated to this code's head."""
    async with backends.database(request.param, tmp_path, "compat") as url:
        await migrate.upgrade(url)
        yield url


async def _run_sync(url: str, fn: Any) -> Any:
    engine = create_async_engine(migrate.async_url(url), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(fn)
    finally:
        await engine.dispose()


async def _make_newer(url: str, *, level: int | None, marked: str = NEWER) -> None:
    """Leaves the database as a newer release would: at revision ``NEWER``, with a
    marker for ``marked`` asking for ``level`` (no marker row when None)."""

    def stamp(connection: Connection) -> None:
        connection.execute(
            text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = :revision"),
            {"revision": NEWER},
        )
        connection.execute(text(f"DELETE FROM {compat.MARKER_TABLE}"))
        if level is not None:
            connection.execute(
                text(
                    f"INSERT INTO {compat.MARKER_TABLE} "
                    "(id, revision, min_compat_level, migrated_by) VALUES (1, :r, :l, :by)"
                ),
                {"r": marked, "l": level, "by": NEWER_VERSION},
            )
        connection.commit()

    await _run_sync(url, stamp)


async def _stored(url: str) -> tuple[Any, ...]:
    def read(connection: Connection) -> tuple[Any, ...]:
        version = connection.execute(text(f"SELECT version_num FROM {migrate.VERSION_TABLE}"))
        marker = connection.execute(
            text(f"SELECT revision, min_compat_level, migrated_by FROM {compat.MARKER_TABLE}")
        )
        return (version.scalar_one(), *(tuple(row) for row in marker.all()))

    result: tuple[Any, ...] = await _run_sync(url, read)
    return result


def _refusal() -> str:
    ours = compat.server_version()
    return (
        f"database schema {NEWER} was migrated by runstore {NEWER_VERSION} and needs "
        f"compatibility level {compat.COMPAT_LEVEL + 1}; this is runstore {ours} "
        f"(level {compat.COMPAT_LEVEL}): upgrade runstore to {NEWER_VERSION} or later"
    )


# --- The history: linear, every revision with a level that never decreases --------


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(migrate._alembic_config())


def test_the_history_is_one_line_from_the_base_to_one_head() -> None:
    script = _script()
    assert len(script.get_heads()) == 1, script.get_heads()
    assert len(script.get_bases()) == 1, script.get_bases()
    revisions = {revision.revision: revision for revision in script.walk_revisions()}
    chain = []
    current: str | None = script.get_current_head()
    while current is not None:
        found = revisions[current]
        assert not found.branch_labels and not found.dependencies, current
        assert found.is_branch_point is False, f"{current} has several next revisions"
        down = found.down_revision
        assert down is None or isinstance(down, str), f"{current} merges {down}"
        chain.append(current)
        current = down
    # Every revision is on the one line from the head down to the base.
    assert sorted(chain) == sorted(revisions)


def test_every_revision_declares_a_level_that_never_decreases() -> None:
    script = _script()
    oldest_first = list(reversed(list(script.walk_revisions())))
    levels = []
    for revision in oldest_first:
        level = getattr(revision.module, "min_compat_level", None)
        assert isinstance(level, int) and level >= 1, (
            f"{revision.revision} declares no min_compat_level"
        )
        levels.append(level)
    named = [(r.revision, level) for r, level in zip(oldest_first, levels, strict=True)]
    assert levels == sorted(levels), named
    # This code serves its own head; a migration may not ask for more.
    assert levels[-1] <= compat.COMPAT_LEVEL


# --- The marker --------------------------------------------------------------


async def test_a_migration_run_records_the_marker(migrated_url: str) -> None:
    head = migrate.head_revision()
    level = migrate.min_compat_level(_script(), head)
    assert await _stored(migrated_url) == (head, (head, level, compat.server_version()))


async def test_the_marker_follows_the_revision_down_and_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runstore.db'}"
    before_marker = _script().get_revision("0010_schema_compat").down_revision
    assert isinstance(before_marker, str)

    def to(revision: str, *, down: bool = False) -> Any:
        def move(connection: Connection) -> None:
            from alembic import command

            config = migrate._alembic_config()
            config.attributes["connection"] = connection
            (command.downgrade if down else command.upgrade)(config, revision)
            connection.commit()

        return move

    await _run_sync(url, to(before_marker))
    await _run_sync(url, to("0010_schema_compat"))
    assert (await _stored(url))[1][0] == "0010_schema_compat"
    await migrate.upgrade(url)
    head = migrate.head_revision()
    assert (await _stored(url))[1][0] == head
    await _run_sync(url, to("0010_schema_compat", down=True))
    assert (await _stored(url))[1][0] == "0010_schema_compat"


async def test_a_new_sqlite_file_gets_the_marker_on_its_first_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    await migrate.ensure_schema(url, migrate=False)
    assert (await _stored(url))[1][0] == migrate.head_revision()


# --- The start rule ----------------------------------------------------------------


async def test_a_newer_schema_within_this_level_is_served_and_left_alone(
    migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _make_newer(migrated_url, level=compat.COMPAT_LEVEL)
    stored = await _stored(migrated_url)
    caplog.set_level(logging.WARNING, logger=migrate.__name__)
    for asked_to_migrate in (False, True):
        await migrate.ensure_schema(migrated_url, migrate=asked_to_migrate)
    assert await _stored(migrated_url) == stored
    # Only the migration's own lines: another test's background task may log too.
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == migrate.__name__
    ]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(
        f"database schema {NEWER} is newer than this runstore's {migrate.head_revision()}: "
        f"runstore {NEWER_VERSION} migrated it"
    )


async def test_a_newer_schema_above_this_level_is_refused(migrated_url: str) -> None:
    await _make_newer(migrated_url, level=compat.COMPAT_LEVEL + 1)
    for asked_to_migrate in (False, True):
        with pytest.raises(migrate.SchemaNewer) as refused:
            await migrate.ensure_schema(migrated_url, migrate=asked_to_migrate)
        assert str(refused.value) == _refusal()


@pytest.mark.parametrize("marked", [None, "0098_another_revision"])
async def test_an_unknown_revision_without_its_marker_is_refused(
    migrated_url: str, marked: str | None
) -> None:
    """No marker row, or one left by another revision: nothing says who may serve it."""
    await _make_newer(
        migrated_url,
        level=None if marked is None else compat.COMPAT_LEVEL,
        marked=marked or NEWER,
    )
    with pytest.raises(migrate.SchemaNewer, match="records no compatibility level"):
        await migrate.ensure_schema(migrated_url, migrate=True)


async def test_migrate_never_touches_a_newer_schema(migrated_url: str) -> None:
    for level in (compat.COMPAT_LEVEL, compat.COMPAT_LEVEL + 1, None):
        await _make_newer(migrated_url, level=level)
        stored = await _stored(migrated_url)
        with pytest.raises(migrate.SchemaNewer, match="never changes a newer schema"):
            await migrate.upgrade(migrated_url)
        assert await _stored(migrated_url) == stored


# --- As processes: runstore serve and runstore migrate -----------------------------


async def test_serve_answers_calls_on_a_compatible_newer_schema(migrated_url: str) -> None:
    await _make_newer(migrated_url, level=compat.COMPAT_LEVEL)
    async with server_process("--database-url", migrated_url) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            store = Store(channel, target=server.target)
            run = run_start()
            await store.runtime.StartOneShotRun(run.one_shot_request())
            assert (await store.load(run.id)).run_id == run.id
        log = server.log.decode()
    assert len(re.findall(f"database schema {NEWER} is newer", log)) == 1, log
    assert (await _stored(migrated_url))[0] == NEWER


async def test_serve_and_migrate_refuse_an_incompatible_schema_in_one_line(
    migrated_url: str,
) -> None:
    await _make_newer(migrated_url, level=compat.COMPAT_LEVEL + 1)
    stored = await _stored(migrated_url)
    code, stderr = runstore("serve", "--listen", "127.0.0.1:0", "--database-url", migrated_url)
    assert code == 2, stderr
    assert one_line(stderr) == f"runstore: {_refusal()}"

    code, stderr = runstore("migrate", "--database-url", migrated_url)
    assert code == 2, stderr
    assert one_line(stderr) == (
        f"runstore: database schema {NEWER} was migrated by runstore {NEWER_VERSION}, newer "
        f"than this runstore {compat.server_version()} (schema {migrate.head_revision()}): "
        "an older runstore never changes a newer schema; run the newer release's "
        "`runstore migrate`"
    )
    assert await _stored(migrated_url) == stored


async def test_serve_refuses_an_unknown_revision_without_a_marker(migrated_url: str) -> None:
    await _make_newer(migrated_url, level=None)
    code, stderr = runstore(
        "serve", "--listen", "127.0.0.1:0", "--migrate", "--database-url", migrated_url
    )
    assert code == 2, stderr
    assert one_line(stderr) == (
        f"runstore: database schema revision {NEWER!r} is newer than this runstore "
        f"{compat.server_version()} (schema {migrate.head_revision()}) and records no "
        "compatibility level: upgrade runstore"
    )


def test_the_docs_show_the_refusals_as_runstore_says_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "server_version", lambda: "0.2.0")
    monkeypatch.setattr(compat, "COMPAT_LEVEL", 1)
    marker = compat.Marker("0011_example", 2, "0.3.0")
    state = migrate.SchemaState("0011_example", "0010_schema_compat", True, False, marker)
    serving = f"runstore: {migrate.SchemaNewer(state, migrating=False)}"
    migrating = f"runstore: {migrate.SchemaNewer(state, migrating=True)}"
    docs = Path(__file__).resolve().parents[2] / "docs"
    upgrades = (docs / "upgrades.md").read_text()
    errors = (docs / "errors.md").read_text()
    assert serving in upgrades
    assert serving in errors
    assert migrating in errors
