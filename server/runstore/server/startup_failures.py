"""Start-up failures as one line: what failed and the flag or variable to fix
(docs/errors.md#start-up-failures).

``serve`` and ``migrate`` open the database before anything else; a database
that does not exist, a refused port, an unknown role or an unresolvable host
surface there as driver exceptions several layers deep. ``explain`` finds the
cause in the exception's chain and says it in a sentence that names where the
URL came from (``--database-url``, ``--database-url-file`` or
``RUNSTORE_DATABASE_URL``), never the password.
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import asyncpg
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

from runstore.server.config import ServerConfig
from runstore.server.db import migrate, urls
from runstore.server.db.urls import hosts


@dataclass(frozen=True, slots=True)
class DatabaseSource:
    """Where the database URL came from, as the user wrote it."""

    flag: str
    """``--database-url``, ``--database-url-file``, or the variable of either."""
    file: str = ""
    """The file ``--database-url-file`` named, if that is where."""

    @classmethod
    def of(
        cls,
        args: argparse.Namespace,
        settings: ServerConfig,
        env: Mapping[str, str] | None = None,
    ) -> DatabaseSource:
        env = os.environ if env is None else env
        if settings.database_url_file:
            if getattr(args, "database_url_file", None) is not None:
                return cls("--database-url-file", settings.database_url_file)
            return cls("RUNSTORE_DATABASE_URL_FILE", settings.database_url_file)
        if getattr(args, "database_url", None) is None and "RUNSTORE_DATABASE_URL" in env:
            return cls("RUNSTORE_DATABASE_URL")
        return cls("--database-url")

    def migrate_command(self) -> str:
        """The ``runstore migrate`` that reaches the same database."""
        if self.flag == "--database-url-file":
            return f"runstore migrate --database-url-file {self.file}"
        if self.flag.startswith("RUNSTORE_"):
            return f"runstore migrate (with {self.flag} set as for serve)"
        return "runstore migrate --database-url URL"


def explain(exc: BaseException, database_url: str, source: DatabaseSource) -> str | None:
    """One line for a start-up failure found in ``exc``'s chain, or None when
    it is not one this module knows (a bug, which keeps its traceback)."""
    if isinstance(exc, migrate.SchemaBehind):
        return (
            f"database schema is at {exc.current or 'nothing (empty database)'}, this server "
            f"needs {exc.head}: run `{source.migrate_command()}` first (or start with --migrate)"
        )
    if isinstance(exc, migrate.SqliteDirectoryMissing):
        return (
            f"cannot create the SQLite database {exc.path}: its directory {exc.path.parent} "
            f"does not exist (create it, or fix the path in {source.flag})"
        )
    try:
        url = urls.parse(database_url)
    except (ArgumentError, ValueError):
        return None
    for cause in _chain(exc):
        reason = _reason(cause, url, source.flag)
        if reason is not None:
            line = f"cannot open the database {_shown(url)}: {reason}"
            return line.replace(url.password, "***") if url.password else line
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes: SQLAlchemy's ``orig``, ``__cause__``, ``__context__``."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for nested in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(nested, BaseException):
                pending.append(nested)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)


def _shown(url: URL) -> str:
    return urls.render(url, hide_password=True)


def _address(url: URL) -> str:
    listed = hosts(url)
    if listed:
        return ", ".join(listed)
    return f"{url.host or 'localhost'}:{url.port or 5432}"


def _reason(cause: BaseException, url: URL, flag: str) -> str | None:
    """Why the database could not be opened, and what to change, or None."""
    if isinstance(cause, asyncpg.InvalidCatalogNameError):
        return f"{cause}: create it, or fix the database name in {flag}"
    if isinstance(cause, asyncpg.InvalidPasswordError):
        return f"{cause}: fix the password (in {flag}, PGPASSFILE or PGPASSWORD)"
    if isinstance(cause, asyncpg.InvalidAuthorizationSpecificationError):
        return f"{cause}: create the role, or fix the user name in {flag}"
    if isinstance(cause, asyncpg.PostgresError):
        return f"PostgreSQL says: {cause} (check {flag})"
    if isinstance(cause, socket.gaierror):
        host = ", ".join(h.rsplit(":", 1)[0] for h in hosts(url)) or url.host or "localhost"
        return f"the host name {host} does not resolve: fix the host in {flag}"
    if isinstance(cause, ConnectionRefusedError):
        return (
            f"connection refused at {_address(url)}: is PostgreSQL running there? "
            f"Fix the host or port in {flag}"
        )
    if isinstance(cause, TimeoutError):
        return f"no answer from {_address(url)} in time: check the host and port in {flag}"
    if isinstance(cause, OSError) and url.get_backend_name() != "sqlite":
        return f"{(cause.strerror or str(cause)).lower()} at {_address(url)}: check {flag}"
    if isinstance(cause, sqlite3.Error):
        return f"{cause}: check the path in {flag}"
    return None
