"""Server lifecycle: open the database, build the gRPC server, serve, stop cleanly.

``build_server`` is separate from ``serve`` so tests start the very same stack
on an ephemeral port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sqlalchemy.engine import make_url

from runstore.server import tracing
from runstore.server.auth import Security
from runstore.server.auth.secrets import redacted
from runstore.server.config import ServerConfig
from runstore.server.core.context import ContextStore
from runstore.server.core.memory import MemoryStore
from runstore.server.core.ports import Database
from runstore.server.core.store import PageLimits, RuntimeStore
from runstore.server.db import migrate
from runstore.server.db.measured import measured
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions
from runstore.server.db.sqlite import SqliteDatabase, SqliteOptions
from runstore.server.interceptors import server_interceptors
from runstore.server.metrics import Metrics, MetricsEndpoint
from runstore.server.servicers.context_store import ContextStoreServicer
from runstore.server.servicers.memory_store import MemoryStoreServicer
from runstore.server.servicers.runtime_store import RuntimeStoreServicer
from runstore.server.servicers.session_admin import SessionAdminServicer
from runstore.v1 import (
    context_store_pb2,
    context_store_pb2_grpc,
    memory_store_pb2,
    memory_store_pb2_grpc,
    runtime_store_pb2,
    runtime_store_pb2_grpc,
    session_admin_pb2,
    session_admin_pb2_grpc,
)

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    runtime_store_pb2.DESCRIPTOR.services_by_name["RuntimeStore"].full_name,
    session_admin_pb2.DESCRIPTOR.services_by_name["SessionAdmin"].full_name,
    memory_store_pb2.DESCRIPTOR.services_by_name["MemoryStore"].full_name,
    context_store_pb2.DESCRIPTOR.services_by_name["ContextStore"].full_name,
)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    security: Security


@dataclass(frozen=True)
class Telemetry:
    """What the operator asked to see: metrics and traces (both off by default)."""

    metrics: Metrics | None = None
    tracer_provider: Any | None = None
    """An OpenTelemetry tracer provider (the ``otel`` extra), or None."""

    @classmethod
    def from_config(cls, config: ServerConfig) -> Telemetry:
        return cls(
            metrics=Metrics(metadata.version("runstore-server")) if config.metrics_listen else None,
            tracer_provider=tracing.provider_from_env(),
        )


@contextlib.asynccontextmanager
async def open_database(
    config: ServerConfig, telemetry: Telemetry | None = None
) -> AsyncIterator[Database]:
    """Checks the schema (creating it on a new SQLite file) and opens the backend,
    measured and traced as ``telemetry`` asks."""
    await migrate.ensure_schema(config.database_url, migrate=config.migrate)
    url = make_url(config.database_url)
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise migrate.SchemaError("SQLite needs a file path: sqlite:///path/to/runstore.db")
        db: SqliteDatabase | PostgresDatabase = SqliteDatabase(
            Path(url.database),
            SqliteOptions(synchronous=config.sqlite_synchronous, readers=config.sqlite_readers),
        )
    elif url.get_backend_name() in ("postgresql", "postgres"):
        db = PostgresDatabase(
            config.database_url,
            PostgresOptions(
                pool_min=config.pg_pool_min,
                pool_max=config.pg_pool_max,
                connect_timeout=config.pg_connect_timeout,
                acquire_timeout=config.pg_acquire_timeout,
                statement_timeout=config.pg_statement_timeout,
            ),
        )
    else:
        raise migrate.SchemaError(f"unsupported database URL scheme {url.drivername!r}")
    telemetry = telemetry or Telemetry()
    backend = "sqlite" if isinstance(db, SqliteDatabase) else "postgres"
    figures = telemetry.metrics.for_backend(backend) if telemetry.metrics is not None else None
    db.figures = figures
    tracer = (
        tracing.tracer(telemetry.tracer_provider) if telemetry.tracer_provider is not None else None
    )
    await db.start()
    try:
        yield measured(db, backend, figures, tracer)
    finally:
        await db.close()


@dataclass(frozen=True)
class Stores:
    """The store cores one server serves, all over one database."""

    runtime: RuntimeStore
    memory: MemoryStore
    context: ContextStore


def create_stores(config: ServerConfig, db: Database) -> Stores:
    return Stores(
        runtime=RuntimeStore(
            db, limits=PageLimits(records=config.page_limit, payload_bytes=config.page_bytes)
        ),
        memory=MemoryStore(db, page_limit=config.page_limit),
        context=ContextStore(
            db, versions_kept=config.context_versions_kept, page_limit=config.page_limit
        ),
    )


async def build_server(
    config: ServerConfig,
    stores: Stores,
    security: Security | None = None,
    telemetry: Telemetry | None = None,
) -> RunningServer:
    """A started server with every service, health and reflection.

    ``security`` defaults to what ``config`` asks for (TLS files, auth file,
    the secure-by-default rule); ``SecurityError`` says why it may not start.
    ``telemetry`` (metrics, tracing) is off unless given.
    """
    security = security if security is not None else Security.from_config(config)
    telemetry = telemetry or Telemetry()
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
    ]
    interceptors = server_interceptors(
        config, security, telemetry.metrics, telemetry.tracer_provider
    )
    server = grpc.aio.server(options=options, interceptors=interceptors)
    runtime_store_pb2_grpc.add_RuntimeStoreServicer_to_server(
        RuntimeStoreServicer(stores.runtime), server
    )
    session_admin_pb2_grpc.add_SessionAdminServicer_to_server(
        SessionAdminServicer(stores.runtime), server
    )
    memory_store_pb2_grpc.add_MemoryStoreServicer_to_server(
        MemoryStoreServicer(stores.memory), server
    )
    context_store_pb2_grpc.add_ContextStoreServicer_to_server(
        ContextStoreServicer(stores.context), server
    )

    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            *SERVICE_NAMES,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    credentials = security.server_credentials()
    port = (
        server.add_secure_port(config.listen, credentials)
        if credentials is not None
        else server.add_insecure_port(config.listen)
    )
    if port == 0:
        raise OSError(f"cannot listen on {config.listen}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, health_servicer, security)


async def serve(config: ServerConfig) -> None:
    """Serves until SIGTERM or SIGINT, then lets in-flight calls finish; SIGHUP
    re-reads the auth file and the TLS files."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    security = Security.from_config(config)  # refuses before touching the database
    loop.add_signal_handler(signal.SIGHUP, security.reload)
    telemetry = Telemetry.from_config(config)
    endpoint = None
    try:
        if telemetry.metrics is not None:
            endpoint = MetricsEndpoint(telemetry.metrics, config.metrics_listen)
            log.info("metrics at http://%s/metrics (port %d)", config.metrics_listen, endpoint.port)
        async with open_database(config, telemetry) as db:
            running = await build_server(config, create_stores(config, db), security, telemetry)
            log.info(
                "runstore serving on %s (port %d), database %s, %s",
                config.listen,
                running.port,
                redacted(config.database_url),
                security.describe(),
            )
            try:
                await stop.wait()
            finally:
                await shutdown(running, config.grace_seconds)
    finally:
        if endpoint is not None:
            endpoint.close()
        if telemetry.tracer_provider is not None:
            tracing.shutdown(telemetry.tracer_provider)
    log.info("runstore stopped")


async def shutdown(running: RunningServer, grace: float) -> None:
    """Reports NOT_SERVING, refuses new calls and lets in-flight calls finish
    within ``grace`` seconds; calls still running after that are cancelled."""
    log.info("shutting down: finishing in-flight calls (grace %.1fs)", grace)
    await running.health.enter_graceful_shutdown()
    await running.server.stop(grace)
