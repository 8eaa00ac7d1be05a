"""The schema's compatibility marker: which releases may serve a database
(docs/upgrades.md).

Every migration declares ``min_compat_level``, the oldest compatibility level
that can still serve the schema it leaves. Each migration run records, in the
transaction of each revision it applies, one row: that revision, its level and
the runstore that migrated it. A server whose code does not know the database's
revision (a newer release migrated it) reads the row and serves the database
when its own ``COMPAT_LEVEL`` is at least the row's level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection, inspect, text

from runstore.server.version import __version__

COMPAT_LEVEL: Final = 1
"""This code's compatibility level. Raise it in the release whose code can no
longer serve a schema that an older release could (a contract step); a
migration that needs this level or more declares it as its ``min_compat_level``."""

MARKER_TABLE: Final = "runstore_schema_compat"
"""The one-row table of the marker. Its three columns are read by every release
from 0.2.0 on, so they are never renamed or removed."""


def server_version() -> str:
    """The version of this runstore-server, named in the marker and in messages."""
    return __version__


@dataclass(frozen=True, slots=True)
class Marker:
    revision: str
    """The revision the database was left at."""
    min_compat_level: int
    """The oldest compatibility level that can serve that revision."""
    migrated_by: str
    """The runstore-server version that migrated it."""


def read_marker(connection: Connection) -> Marker | None:
    """The database's marker, or None when it has none (a schema older than
    ``0010_schema_compat``, or one runstore did not migrate)."""
    if not inspect(connection).has_table(MARKER_TABLE):
        return None
    row = connection.execute(
        text(f"SELECT revision, min_compat_level, migrated_by FROM {MARKER_TABLE}")
    ).first()
    if row is None:
        return None
    return Marker(str(row[0]), int(row[1]), str(row[2]))


def write_marker(connection: Connection, revision: str, min_compat_level: int) -> None:
    """Replaces the marker (in the caller's transaction, the one that moved the
    version table to ``revision``). Nothing is written before the table exists."""
    if not inspect(connection).has_table(MARKER_TABLE):
        return
    connection.execute(text(f"DELETE FROM {MARKER_TABLE}"))
    connection.execute(
        text(
            f"INSERT INTO {MARKER_TABLE} (id, revision, min_compat_level, migrated_by) "
            "VALUES (1, :revision, :level, :by)"
        ),
        {"revision": revision, "level": min_compat_level, "by": server_version()},
    )
