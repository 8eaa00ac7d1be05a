"""The database URL without exposing its password.

A password belongs in ``RUNSTORE_DATABASE_URL``, a ``--database-url-file`` or
PostgreSQL's own ``PGPASSFILE`` / ``PGPASSWORD`` (which asyncpg reads when the
URL has none), never in the process arguments, where any local user sees it.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from sqlalchemy.exc import ArgumentError

from runstore.server.config import ServerConfig
from runstore.server.db import urls

log = logging.getLogger(__name__)


class DatabaseURLError(ValueError):
    """The database URL cannot be read; the message never contains it."""


def resolve_database_url(config: ServerConfig, command_line_url: str | None) -> ServerConfig:
    """``config`` with the URL read from ``--database-url-file`` when given.

    ``command_line_url`` is what ``--database-url`` said on the command line
    (None when absent): a password in it is warned about.
    """
    if config.database_url_file:
        if command_line_url is not None:
            raise DatabaseURLError("pass --database-url or --database-url-file, not both")
        path = Path(config.database_url_file)
        try:
            url = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise DatabaseURLError(f"cannot read --database-url-file {path}: {exc}") from None
        if not url:
            raise DatabaseURLError(f"--database-url-file {path} is empty")
        config = dataclasses.replace(config, database_url=url)
    try:
        parsed = urls.parse(config.database_url)
    except (ArgumentError, ValueError):
        # SQLAlchemy's own message quotes the whole URL, password included.
        raise DatabaseURLError(
            "the database URL does not parse (it is not shown: it may hold a password); "
            "expected sqlite:///path or postgresql://user@host/db"
        ) from None
    if command_line_url is not None and parsed.password:
        log.warning(
            "the database password given with --database-url is visible in the process "
            "arguments; use RUNSTORE_DATABASE_URL, --database-url-file or PGPASSFILE instead"
        )
    return config


def redacted(url: str) -> str:
    """``url`` fit for a log line or an error message."""
    try:
        return urls.render(urls.parse(url), hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparsable database URL>"
