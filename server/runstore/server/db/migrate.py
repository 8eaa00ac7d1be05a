"""Schema migrations with Alembic: one history for SQLite and PostgreSQL.

``runstore migrate`` upgrades a database to head; ``runstore serve`` only checks
that the schema is at head (and creates it on a brand-new SQLite file, the
embedded default), or newer but still within this code's compatibility level
(``compat``, docs/upgrades.md). On PostgreSQL the upgrade holds an advisory
lock, so replicas or deploy jobs that migrate at the same time take turns.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import asyncpg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.server.config import DEFAULT_DATABASE_URL
from runstore.server.db import compat, urls
from runstore.server.db.schema import metadata

log = logging.getLogger(__name__)

VERSION_TABLE: Final = "runstore_schema_version"
"""Alembic's version table, named so it cannot clash with an application's own."""

_ADVISORY_LOCK_KEY: Final = 0x72756E73746F7265  # "runstore"
_MIGRATIONS = Path(__file__).with_name("migrations")


class SchemaError(RuntimeError):
    """The database schema is not one this server can use."""


class SchemaBehind(SchemaError):
    """The schema is older than this server's and ``serve`` was not asked to migrate."""

    def __init__(self, current: str | None, head: str) -> None:
        self.current = current
        self.head = head
        super().__init__(
            f"database schema is at {current or 'nothing (empty database)'}, "
            f"this server needs {head}: run `runstore migrate` first (or start with --migrate)"
        )


class SchemaNewer(SchemaError):
    """The database's revision is unknown to this code: a newer runstore migrated
    it. ``serve`` refuses it when its marker asks for a higher compatibility level
    than this code's, or records none; ``migrate`` always refuses it."""

    def __init__(self, state: SchemaState, *, migrating: bool) -> None:
        self.state = state
        marker = state.marker
        ours = compat.server_version()
        if migrating:
            by = f"was migrated by runstore {marker.migrated_by}" if marker else "is"
            message = (
                f"database schema {state.current} {by}, newer than this runstore {ours} "
                f"(schema {state.head}): an older runstore never changes a newer schema; "
                "run the newer release's `runstore migrate`"
            )
        elif marker is None:
            message = (
                f"database schema revision {state.current!r} is newer than this runstore "
                f"{ours} (schema {state.head}) and records no compatibility level: "
                "upgrade runstore"
            )
        else:
            message = (
                f"database schema {state.current} was migrated by runstore "
                f"{marker.migrated_by} and needs compatibility level "
                f"{marker.min_compat_level}; this is runstore {ours} "
                f"(level {compat.COMPAT_LEVEL}): upgrade runstore to {marker.migrated_by} "
                "or later"
            )
        super().__init__(message)


class MigrationFailed(SchemaError):
    """A migration stopped on a database error (a lock or statement timeout, a
    cancelled index build, a lost connection)."""

    def __init__(self, head: str, cause: BaseException) -> None:
        self.head = head
        super().__init__(
            f"migrating the schema to {head} failed: {_driver_message(cause)}: "
            "run `runstore migrate` again once the cause is gone "
            "(it goes on from the last revision committed)"
        )


def _driver_message(exc: BaseException) -> str:
    """The database's own words for ``exc``, without SQLAlchemy's wrapping."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, asyncpg.PostgresError | sqlite3.Error):
            return str(seen).splitlines()[0]
        seen = getattr(seen, "orig", None) or seen.__cause__
    return str(exc).splitlines()[0]


def async_url(database_url: str) -> URL:
    """The SQLAlchemy URL with the async driver runstore uses for its dialect."""
    url = urls.parse(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        return urls.for_writer(url.set(drivername="postgresql+asyncpg"))
    raise SchemaError(f"unsupported database URL {url.render_as_string(hide_password=True)!r}")


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(_alembic_config())


def head_revision() -> str:
    head = _script().get_current_head()
    assert head is not None
    return head


def min_compat_level(script: ScriptDirectory, revision: str) -> int:
    """The oldest compatibility level that can serve ``revision``'s schema, as its
    migration declares it (``min_compat_level``; docs/upgrades.md)."""
    found = script.get_revision(revision)
    level = getattr(found.module, "min_compat_level", None) if found is not None else None
    if not isinstance(level, int):
        raise SchemaError(f"migration {revision} declares no min_compat_level")
    return level


def _is_known(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


VersionApplied = Callable[
    [MigrationContext, MigrationInfo, Collection[str], Mapping[str, Any]], None
]
"""Alembic's ``on_version_apply`` callback (called with those as keywords)."""


def on_version_apply(
    script: ScriptDirectory, connection: Connection, then: Iterable[Callable[..., None]]
) -> VersionApplied:
    """After each revision: replaces the compatibility marker, in that revision's
    transaction, then tells ``then`` (``runstore migrate`` prints the revision)."""

    def applied(
        ctx: MigrationContext,
        step: MigrationInfo,
        heads: Collection[str],
        run_args: Mapping[str, Any],
    ) -> None:
        if len(heads) == 1:
            (revision,) = heads
            compat.write_marker(connection, revision, min_compat_level(script, revision))
        for callback in then:
            callback(ctx=ctx, step=step, heads=heads, run_args=run_args)

    return applied


@dataclass(frozen=True, slots=True)
class SchemaState:
    current: str | None
    """The revision stored in the database; None when never migrated."""
    head: str
    """The newest revision this server knows."""
    has_tables: bool
    """Whether any runstore table exists (a database with tables but no
    revision was not created by runstore migrations)."""
    known: bool = True
    """Whether this code knows ``current`` (else a newer runstore migrated it)."""
    marker: compat.Marker | None = None
    """The compatibility marker of an unknown ``current`` (None for a known one,
    or when the database records none for that revision)."""

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    @property
    def empty(self) -> bool:
        return self.current is None and not self.has_tables


def _read_state(connection: Connection) -> SchemaState:
    current = MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()
    tables = set(inspect(connection).get_table_names())
    script = _script()
    head = script.get_current_head()
    assert head is not None
    known = current is None or _is_known(script, current)
    marker = None if known else compat.read_marker(connection)
    if marker is not None and marker.revision != current:
        marker = None  # it describes another revision: none for this one (fail closed)
    return SchemaState(current, head, bool(tables & set(metadata.tables)), known, marker)


AppliedRevision = Callable[[str, str], None]
"""Told ``(revision, first line of its description)`` as each revision is applied."""


def _upgrade(connection: Connection, on_applied: AppliedRevision | None = None) -> None:
    config = _alembic_config()
    config.attributes["connection"] = connection
    if on_applied is not None:

        def applied(*, step: Any, **_: Any) -> None:
            revision = step.up_revision
            on_applied(step.up_revision_id, (revision.doc or "").strip().splitlines()[0])

        config.attributes["on_version_apply"] = [applied]
    command.upgrade(config, "head")


class DatabaseOpenError(RuntimeError):
    """The database could not be reached, opened or read at start-up; the
    driver's error is the cause (``startup_failures`` says it in one line)."""


_OPENING_ERRORS: Final = (OSError, SQLAlchemyError, sqlite3.Error, asyncpg.PostgresError)


@contextlib.contextmanager
def opening(database_url: str | URL) -> Iterator[None]:
    """Turns a driver's failure to reach or open the database into a
    ``DatabaseOpenError`` (its message without the password)."""
    try:
        yield
    except _OPENING_ERRORS as exc:
        url = urls.parse(database_url) if isinstance(database_url, str) else database_url
        shown = urls.render(url, hide_password=True)
        raise DatabaseOpenError(f"cannot open the database {shown}") from exc


class SqliteDirectoryMissing(SchemaError):
    """A SQLite URL names a file in a directory that does not exist: most
    likely a typo, which must not silently become a new empty database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"cannot create the SQLite database {path}: its directory {path.parent} "
            "does not exist (create it, or fix the path in --database-url)"
        )


_DEFAULT_SQLITE_FILE: Final = Path(urls.parse(DEFAULT_DATABASE_URL).database or "")
"""The default database, whose directory (``var/``) runstore creates itself."""


def _prepare(url: URL) -> None:
    """A SQLite file is created only in a directory that exists (the default's
    excepted), and the log says when a new one is (docs/durability.md)."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    path = Path(url.database)
    if path.exists():
        return
    if path == _DEFAULT_SQLITE_FILE:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.is_dir():
        raise SqliteDirectoryMissing(path)
    log.info("creating a new SQLite database file %s", path.resolve())


async def schema_state(database_url: str) -> SchemaState:
    url = async_url(database_url)
    _prepare(url)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        with opening(url):
            async with engine.connect() as connection:
                return await connection.run_sync(_read_state)
    finally:
        await engine.dispose()


async def upgrade(database_url: str, on_applied: AppliedRevision | None = None) -> SchemaState:
    """Upgrades the database to head; returns the state it found before."""
    url = async_url(database_url)
    _prepare(url)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        with opening(url):
            connection = await engine.connect()
        try:
            with opening(url):
                if url.get_backend_name() == "postgresql":
                    await connection.execute(
                        text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_LOCK_KEY}
                    )
                    await connection.commit()
                before = await connection.run_sync(_read_state)
            if not before.known:
                raise SchemaNewer(before, migrating=True)
            if before.at_head:
                return before
            log.info("migrating schema from %s to %s", before.current or "empty", before.head)
            try:
                if url.get_backend_name() == "postgresql":
                    # Alembic then owns the transaction, so a migration's
                    # autocommit block (CREATE INDEX CONCURRENTLY) can end it.
                    await connection.commit()
                await connection.run_sync(_upgrade, on_applied)
                await connection.commit()
            except _OPENING_ERRORS as exc:
                raise MigrationFailed(before.head, exc) from exc
            return before
        finally:
            await connection.close()
    finally:
        await engine.dispose()


def _serve_newer(state: SchemaState) -> None:
    """Serves a schema newer than this code's within its compatibility level,
    saying so once; refuses any other (docs/upgrades.md#the-start-rule)."""
    marker = state.marker
    if marker is None or marker.min_compat_level > compat.COMPAT_LEVEL:
        raise SchemaNewer(state, migrating=False)
    log.warning(
        "database schema %s is newer than this runstore's %s: runstore %s migrated it and "
        "compatibility level %d can serve it; this is runstore %s (level %d), serving it "
        "(upgrade runstore to %s or later)",
        state.current,
        state.head,
        marker.migrated_by,
        marker.min_compat_level,
        compat.server_version(),
        compat.COMPAT_LEVEL,
        marker.migrated_by,
    )


async def ensure_schema(database_url: str, *, migrate: bool) -> None:
    """What ``serve`` does before opening the store.

    A brand-new SQLite database gets the schema (the embedded default needs no
    set-up); a schema this code does not know is served when its marker allows
    this code's compatibility level; otherwise the schema must be at head unless
    ``migrate`` is set.
    """
    state = await schema_state(database_url)
    if state.at_head:
        return
    if not state.known:
        _serve_newer(state)
        return
    first_sqlite_start = state.empty and async_url(database_url).get_backend_name() == "sqlite"
    if migrate or first_sqlite_start:
        await upgrade(database_url)
        return
    raise SchemaBehind(state.current, state.head)
