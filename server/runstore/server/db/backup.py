"""``runstore backup``: an online, consistent copy of a SQLite database.

SQLite's backup API copies the pages of one read transaction, so in WAL mode the
server keeps writing while the copy is taken and the copy holds exactly the
commits that preceded that transaction. The copy is written beside its target,
opened and checked, and only then renamed into place, so a failed backup never
leaves a file that looks like a good one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from runstore.server.db import schema
from runstore.server.db.migrate import VERSION_TABLE


class BackupError(Exception):
    """The backup could not be taken or did not verify (nothing left at the target)."""


@dataclass(frozen=True, slots=True)
class BackupResult:
    path: Path
    schema_revision: str
    sessions: int
    runs: int
    records: int
    bytes: int
    seed_records: int = 0
    """Records of seeds and preparations (docs/contract.md §9.7), published or not."""


def sqlite_path(database_url: str) -> Path:
    """The file of a ``sqlite:///…`` URL; any other URL is refused (PostgreSQL has pg_dump)."""
    try:
        url = make_url(database_url)
    except (ArgumentError, ValueError):
        # SQLAlchemy's message quotes the URL, password included.
        raise BackupError(
            "--database-url does not parse (it is not shown: it may hold a password); "
            "expected sqlite:///path/to/runstore.db"
        ) from None
    if url.get_backend_name() != "sqlite":
        raise BackupError(
            f"backup copies SQLite databases; for {url.get_backend_name()} use pg_dump "
            "(see docs/retention.md)"
        )
    if not url.database or url.database == ":memory:":
        raise BackupError("--database-url needs a file path: sqlite:///path/to/runstore.db")
    return Path(url.database)


def backup_sqlite(database_url: str, target: Path) -> BackupResult:
    """Copies the database at ``database_url`` to ``target`` and verifies the copy."""
    source_path = sqlite_path(database_url)
    if not source_path.is_file():
        raise BackupError(f"no database at {source_path}: fix the path in --database-url")
    if target.exists():
        raise BackupError(f"{target} exists: choose a new path for --to")
    if not target.parent.is_dir():
        raise BackupError(
            f"cannot write {target}: its directory {target.parent} does not exist "
            "(create it, or fix the path in --to)"
        )
    partial = target.with_name(target.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    try:
        # Read-only: the backup never writes to the served file or its WAL.
        source = sqlite3.connect(f"file:{source_path}?mode=ro", uri=True)
        try:
            copy = sqlite3.connect(partial)
            try:
                source.backup(copy)  # every page in one step, from one read snapshot
            finally:
                copy.close()
        finally:
            source.close()
        result = _verify(partial, target)
        os.replace(partial, target)
    except (sqlite3.Error, OSError) as exc:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise BackupError(f"backup failed: {exc}") from exc
    except BackupError:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    return result


def _verify(partial: Path, target: Path) -> BackupResult:
    """Opens the copy as a new reader would and checks it is whole and a runstore schema."""
    conn = sqlite3.connect(f"file:{partial}?mode=ro", uri=True)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()
        if check is None or check[0] != "ok":
            raise BackupError(f"the copy failed its integrity check: {check}")
        try:
            (revision,) = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
            tables = (
                schema.sessions.name,
                schema.runs.name,
                schema.records.name,
                schema.seed_records.name,
            )
            counts = [
                conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables
            ]
        except (sqlite3.Error, TypeError) as exc:
            raise BackupError(f"the copy is not a runstore database: {exc}") from exc
    finally:
        conn.close()
    return BackupResult(
        path=target,
        schema_revision=str(revision),
        sessions=int(counts[0]),
        runs=int(counts[1]),
        records=int(counts[2]),
        bytes=partial.stat().st_size,
        seed_records=int(counts[3]),
    )
