"""Opening the database a ``--database-url`` names: its backend by URL scheme,
the schema checked (or created on a new SQLite file), and the two ways the
server reaches it (``OpenDatabase``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from runstore.server import tracing
from runstore.server.config import ServerConfig
from runstore.server.core.ports import Database
from runstore.server.db import migrate, urls
from runstore.server.db.measured import measured
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions
from runstore.server.db.sqlite import SqliteDatabase, SqliteOptions
from runstore.server.telemetry import Telemetry

Backend: TypeAlias = SqliteDatabase | PostgresDatabase
"""A backend the server serves: beyond ``Database``, its watch wake-ups, its
retention lock and its health probe."""


@dataclass(frozen=True)
class OpenDatabase:
    """An open backend, and how the server reaches it."""

    backend: Backend
    """The backend itself, for the server's own work: the namespace directory's
    refreshes, the quotas' heartbeats and recounts, retention's check for
    overrides, seed expiry, health probes, watch wake-ups and the retention
    lock (not measured or traced as a call's transactions)."""
    calls: Database
    """What the calls' transactions go through: the backend, measured and traced
    as ``telemetry`` asks (the backend itself when neither is on)."""
    telemetry: Telemetry
    """What it was opened with; the stores' figures come from its metrics."""


def backend_for(config: ServerConfig) -> Backend:
    """The backend ``config.database_url`` names, not yet started."""
    url = urls.parse(config.database_url)
    name = url.get_backend_name()
    if name == "sqlite":
        if config.read_database_url:
            raise migrate.SchemaError("--read-database-url needs a PostgreSQL --database-url")
        if not url.database or url.database == ":memory:":
            raise migrate.SchemaError("SQLite needs a file path: sqlite:///path/to/runstore.db")
        return SqliteDatabase(
            Path(url.database),
            SqliteOptions(
                synchronous=config.sqlite_synchronous,
                readers=config.sqlite_readers,
                operation_timeout=config.db_operation_timeout,
            ),
        )
    if name in ("postgresql", "postgres"):
        return PostgresDatabase(
            config.database_url,
            PostgresOptions(
                pool_min=config.pg_pool_min,
                pool_max=config.pg_pool_max,
                connect_timeout=config.pg_connect_timeout,
                acquire_timeout=config.pg_acquire_timeout,
                statement_timeout=config.pg_statement_timeout,
                operation_timeout=config.db_operation_timeout,
                reconnect_pause_max=config.pg_reconnect_pause_max,
            ),
            read_url=config.read_database_url or None,
        )
    raise migrate.SchemaError(f"unsupported database URL scheme {url.drivername!r}")


@contextlib.asynccontextmanager
async def open_database(
    config: ServerConfig, telemetry: Telemetry | None = None
) -> AsyncIterator[OpenDatabase]:
    """Checks the schema (creating it on a new SQLite file) and opens the backend,
    measured and traced as ``telemetry`` asks."""
    await migrate.ensure_schema(config.database_url, migrate=config.migrate)
    backend = backend_for(config)
    telemetry = telemetry or Telemetry()
    kind = "sqlite" if isinstance(backend, SqliteDatabase) else "postgres"
    figures = telemetry.metrics.for_backend(kind) if telemetry.metrics is not None else None
    backend.figures = figures
    provider = telemetry.tracer_provider
    tracer = tracing.tracer(provider) if provider is not None else None
    with migrate.opening(config.database_url):
        await backend.start()
    try:
        yield OpenDatabase(backend, measured(backend, kind, figures, tracer), telemetry)
    finally:
        await backend.close()
