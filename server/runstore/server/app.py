"""Server lifecycle: open the database, build the gRPC server, serve, stop cleanly.

``build_server`` is separate from ``serve`` so tests start the very same stack
on an ephemeral port.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import resource
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runstore.server import tracing
from runstore.server.auth import Security
from runstore.server.auth.secrets import redacted
from runstore.server.config import ServerConfig
from runstore.server.console.server import (
    ConsoleListenError,
    ConsoleServer,
    check_exposure,
    start_console,
)
from runstore.server.core.context import ContextStore
from runstore.server.core.memory import MemoryStore
from runstore.server.core.namespaces import NamespaceDirectory, NamespaceStore
from runstore.server.core.ports import Database, Wakeups
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.quotas import Quotas
from runstore.server.core.store import PageLimits, RuntimeStore
from runstore.server.core.watch import NoWakeups, RecordWatch, WatchSettings
from runstore.server.db import migrate, urls
from runstore.server.db.measured import measured
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions
from runstore.server.db.sqlite import SqliteDatabase, SqliteOptions
from runstore.server.health import HealthMonitor, HealthServicer, Probe
from runstore.server.interceptors import server_interceptors
from runstore.server.metrics import Metrics, MetricsEndpoint
from runstore.server.retention import RetentionSettings, RetentionTask
from runstore.server.seed_expiry import SeedExpiry
from runstore.server.servicers.context_store import ContextStoreServicer
from runstore.server.servicers.memory_store import MemoryStoreServicer
from runstore.server.servicers.namespace_admin import NamespaceAdminServicer
from runstore.server.servicers.runtime_store import RuntimeStoreServicer
from runstore.server.servicers.session_admin import SessionAdminServicer
from runstore.server.version import __version__
from runstore.v1 import (
    context_store_pb2,
    context_store_pb2_grpc,
    memory_store_pb2,
    memory_store_pb2_grpc,
    namespace_admin_pb2,
    namespace_admin_pb2_grpc,
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
    namespace_admin_pb2.DESCRIPTOR.services_by_name["NamespaceAdmin"].full_name,
)


RESPONSE_ENVELOPE_BYTES = 64 * 1024
"""Room a response needs beyond the largest request the server accepts: the
record, event or snapshot that request carried comes back with its ID,
cursor and counts around it."""

PAGE_RECORD_ENVELOPE_BYTES = 8 * 1024
"""Room per record of a page for what is not payload (six IDs and keys of at
most 1 KiB each, the record ID, the timestamp, framing)."""


def max_send_bytes(config: ServerConfig) -> int:
    """The largest response: whatever was accepted must be readable, so a page
    holding the largest accepted record (or a full page of records whose
    payloads fill the page budget) always fits."""
    return (
        config.max_message_bytes
        + config.page_limit * PAGE_RECORD_ENVELOPE_BYTES
        + RESPONSE_ENVELOPE_BYTES
    )


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: HealthServicer
    security: Security
    watch: RecordWatch
    monitor: HealthMonitor | None = None
    retention: RetentionTask | None = None
    console: ConsoleServer | None = None
    """The web console (``--console-listen``), served in the same event loop."""
    namespaces: NamespaceStore | None = None
    """NamespaceAdmin's store, whose background purges stop with the server."""
    quota_keeper: QuotaKeeper | None = None
    """The quotas' background refresh and heartbeat (docs/namespaces.md#quotas)."""


@dataclass(frozen=True)
class Telemetry:
    """What the operator asked to see: metrics and traces (both off by default)."""

    metrics: Metrics | None = None
    tracer_provider: Any | None = None
    """An OpenTelemetry tracer provider (the ``otel`` extra), or None."""

    @classmethod
    def from_config(cls, config: ServerConfig) -> Telemetry:
        return cls(
            metrics=Metrics(__version__) if config.metrics_listen else None,
            tracer_provider=tracing.provider_from_env(),
        )


@contextlib.asynccontextmanager
async def open_database(
    config: ServerConfig, telemetry: Telemetry | None = None
) -> AsyncIterator[Database]:
    """Checks the schema (creating it on a new SQLite file) and opens the backend,
    measured and traced as ``telemetry`` asks."""
    await migrate.ensure_schema(config.database_url, migrate=config.migrate)
    url = urls.parse(config.database_url)
    if url.get_backend_name() == "sqlite":
        if config.read_database_url:
            raise migrate.SchemaError("--read-database-url needs a PostgreSQL --database-url")
        if not url.database or url.database == ":memory:":
            raise migrate.SchemaError("SQLite needs a file path: sqlite:///path/to/runstore.db")
        db: SqliteDatabase | PostgresDatabase = SqliteDatabase(
            Path(url.database),
            SqliteOptions(
                synchronous=config.sqlite_synchronous,
                readers=config.sqlite_readers,
                operation_timeout=config.db_operation_timeout,
            ),
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
                operation_timeout=config.db_operation_timeout,
                reconnect_pause_max=config.pg_reconnect_pause_max,
            ),
            read_url=config.read_database_url or None,
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
    with migrate.opening(config.database_url):
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
    watch: RecordWatch
    probe: Probe | None = None
    """What the health service checks (the database), if it can be checked."""
    retention: RetentionTask | None = None
    """The background retention task: ``--retain-*`` flags, and namespaces' overrides."""
    namespaces: NamespaceStore | None = None
    """Which namespaces exist, and their administration (docs/namespaces.md);
    None serves the namespace ``default`` only, without NamespaceAdmin."""
    quotas: QuotaKeeper | None = None
    """The namespaces' quotas and the task keeping them current (with ``namespaces``)."""


def _retention_task(
    config: ServerConfig, runtime: RuntimeStore, context: ContextStore, db: Database
) -> RetentionTask:
    task = RetentionTask(
        runtime,
        context,
        db.retention_lock,  # type: ignore[attr-defined]
        RetentionSettings.from_config(config),
        # Its check for overrides is the server's own read, like the
        # directory's: only a pass's purges are measured and traced.
        overrides=RuntimeStore(getattr(db, "inner", db)).namespace_retention,
    )
    # The server's own work, like the overrides' read: counted by its own
    # metric, not measured or traced as calls' transactions.
    task.expiry = SeedExpiry.from_config(RuntimeStore(getattr(db, "inner", db)), config)
    return task


def create_stores(config: ServerConfig, db: Database) -> Stores:
    # A page never carries more payload than the largest request.
    page_bytes = min(config.page_bytes, config.max_message_bytes)
    runtime = RuntimeStore(
        db, limits=PageLimits(records=config.page_limit, payload_bytes=page_bytes)
    )
    # getattr, not isinstance: the measured wrapper (metrics on) forwards the
    # backend's wake-ups, and watchers must not fall back to polling then.
    wakeups: Wakeups = getattr(db, "wakeups", None) or NoWakeups()
    context = ContextStore(
        db,
        versions_kept=config.context_versions_kept,
        page_limit=config.page_limit,
        page_bytes=page_bytes,
    )
    # The directory's refreshes are the server's own reads, like its health
    # probes: not measured or traced as the call's that happened to miss the
    # cache; so are the quotas' heartbeats and recounts.
    own = getattr(db, "inner", db)
    directory = NamespaceDirectory(own)
    return Stores(
        namespaces=NamespaceStore(db, directory),
        quotas=QuotaKeeper(
            Quotas(directory), directory, own, recount_seconds=config.quota_recount_seconds
        ),
        probe=db if isinstance(db, Probe) else None,
        runtime=runtime,
        memory=MemoryStore(db, page_limit=config.page_limit, page_bytes=page_bytes),
        context=context,
        # Always: a namespace's retention overrides apply even when no
        # --retain-* flag is set (docs/namespaces.md, "Storage").
        retention=_retention_task(config, runtime, context, db),
        watch=RecordWatch(
            runtime,
            wakeups,
            WatchSettings(
                heartbeat_seconds=config.watch_heartbeat_seconds,
                poll_seconds=config.watch_poll_seconds,
                max_watchers=config.max_watchers,
            ),
        ),
    )


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def server_options(config: ServerConfig, *, reuse_port: bool = False) -> list[tuple[str, int]]:
    """gRPC core settings behind docs/limits.md: message sizes,
    the port, and the connection, idle and keepalive policies."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", max_send_bytes(config)),
        # gRPC turns SO_REUSEPORT on by default: a second server on our port
        # would start and take half of the calls to another database. Only the
        # workers of one `serve --workers N` share it (runstore.server.workers).
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        # A connection that never finishes the HTTP/2 preface holds a descriptor.
        ("grpc.server_handshake_timeout_ms", _ms(config.handshake_timeout)),
        ("grpc.max_connection_idle_ms", _ms(config.max_connection_idle)),
        # The server's own pings find clients that vanished mid-call.
        ("grpc.keepalive_time_ms", _ms(config.keepalive_time)),
        ("grpc.keepalive_timeout_ms", _ms(config.keepalive_timeout)),
        # Clients ping while idle (runstore.client.Keepalive): allow it, at most
        # every keepalive_min_ping_interval, instead of gRPC's 5 minutes
        # (2 hours without calls), which answers GOAWAY "too_many_pings".
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(config.keepalive_min_ping_interval)),
        ("grpc.http2.max_ping_strikes", 2),
    ]


class ListenError(OSError):
    """The listen address cannot be bound (for example: already in use)."""


def bind_problem(listen: str) -> str | None:
    """Why ``listen`` (``host:port``) cannot be bound now, as the operating
    system says it ("address already in use"), or None (gRPC reports only that
    binding failed, after logging a C-core line of its own)."""
    if listen.startswith("unix"):
        return None
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    except ValueError:
        pass
    return None


def check_listen_addresses(config: ServerConfig, *, reuse_port: bool = False) -> None:
    """Refuses an address already taken before the database is touched, in
    one line naming the flag (docs/errors.md#start-up-failures). A worker of
    ``--workers`` shares the gRPC port on purpose, so only its console is checked."""
    checked = [("--console-listen", config.console_listen)]
    if not reuse_port:
        checked.insert(0, ("--listen", config.listen))
    for flag, listen in checked:
        problem = bind_problem(listen) if listen else None
        if problem is not None:
            raise ListenError(f"cannot listen on {listen} ({flag}): {problem}")


async def build_server(
    config: ServerConfig,
    stores: Stores,
    security: Security | None = None,
    telemetry: Telemetry | None = None,
    *,
    reuse_port: bool = False,
) -> RunningServer:
    """A started server with every service, health and reflection.

    ``security`` defaults to what ``config`` asks for (TLS files, auth file,
    the secure-by-default rule); ``SecurityError`` says why it may not start.
    ``telemetry`` (metrics, tracing) is off unless given.
    """
    security = security if security is not None else Security.from_config(config)
    telemetry = telemetry or Telemetry()
    interceptors = server_interceptors(
        config,
        security,
        telemetry.metrics,
        telemetry.tracer_provider,
        stores.namespaces.directory if stores.namespaces is not None else None,
        stores.quotas.quotas if stores.quotas is not None else None,
    )
    server = grpc.aio.server(
        options=server_options(config, reuse_port=reuse_port), interceptors=interceptors
    )
    runtime_store_pb2_grpc.add_RuntimeStoreServicer_to_server(
        RuntimeStoreServicer(stores.runtime, stores.watch, interceptors), server
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
    if stores.namespaces is not None:
        namespace_admin_pb2_grpc.add_NamespaceAdminServicer_to_server(
            NamespaceAdminServicer(stores.namespaces), server
        )

    health_servicer = HealthServicer()
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
    try:
        port = (
            server.add_secure_port(config.listen, credentials)
            if credentials is not None
            else server.add_insecure_port(config.listen)
        )
    except RuntimeError:
        port = 0
    if port == 0:
        problem = bind_problem(config.listen) or "cannot bind"
        raise ListenError(f"cannot listen on {config.listen} (--listen): {problem}")
    await server.start()
    names = ("", *SERVICE_NAMES)
    for name in names:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    monitor = None
    if stores.probe is not None:
        monitor = HealthMonitor(health_servicer, names, stores.probe, config.health_probe_interval)
        monitor.start()
    if stores.namespaces is not None and telemetry.metrics is not None:
        stores.namespaces.purged = telemetry.metrics.forget_namespace
    if stores.retention is not None:
        stores.retention.metrics = telemetry.metrics
        if stores.retention.expiry is not None:
            stores.retention.expiry.metrics = telemetry.metrics
        stores.retention.start()
        if stores.retention.settings.on:
            log.info("retention on: %s", stores.retention.settings.describe())
    if stores.quotas is not None:
        if telemetry.metrics is not None:
            stores.quotas.quotas.refusals = telemetry.metrics.quota_refusals
        stores.quotas.start()
    running = RunningServer(
        server,
        port,
        health_servicer,
        security,
        stores.watch,
        monitor,
        stores.retention,
        namespaces=stores.namespaces,
        quota_keeper=stores.quotas,
    )
    if stores.namespaces is not None:
        await stores.namespaces.resume_purges()
    if config.console_listen:
        try:
            running.console = await start_console(
                config,
                stores.runtime,
                stores.watch,
                security,
                stores.namespaces.directory if stores.namespaces is not None else None,
            )
        except BaseException as exc:
            await shutdown(running, 0)
            if isinstance(exc, ConsoleListenError):
                raise ListenError(str(exc)) from None
            raise
    return running


def raise_descriptor_limit() -> int:
    """Raises the soft descriptor limit to the hard one (as Go's runtime and nginx
    do): every connection, even one that never speaks, holds a descriptor until
    the handshake timeout, and a low soft limit (often 1024) locks clients out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, exc)
            return soft
        return hard
    return soft


def freeze_startup_objects() -> None:
    """Moves every object alive once the server is up (modules, compiled
    statements, descriptors: about 100,000) out of the garbage collector's
    reach. They live as long as the process, and each full collection would
    scan them again on the event loop, tens of milliseconds per pass."""
    gc.collect()
    gc.freeze()


def run(config: ServerConfig, *, reuse_port: bool = False) -> None:
    """``serve`` on the event loop ``config.event_loop`` names (uvloop: less
    of each call's time in the loop's own Python)."""
    loop_factory = None
    if config.event_loop.lower() == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(config, reuse_port=reuse_port))


async def serve(config: ServerConfig, *, reuse_port: bool = False) -> None:
    """Serves until SIGTERM or SIGINT, then lets in-flight calls finish; SIGHUP
    re-reads the auth file and the TLS files. ``reuse_port``: bind with
    SO_REUSEPORT, as one of the workers of ``serve --workers N``."""
    descriptors = raise_descriptor_limit()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    security = Security.from_config(config)  # refuses before touching the database
    check_exposure(config, security)
    loop.add_signal_handler(signal.SIGHUP, security.reload)
    check_listen_addresses(config, reuse_port=reuse_port)
    telemetry = Telemetry.from_config(config)
    endpoint = None
    try:
        if telemetry.metrics is not None:
            try:
                endpoint = MetricsEndpoint(telemetry.metrics, config.metrics_listen)
            except OSError as exc:
                problem = (exc.strerror or str(exc)).lower()
                raise ListenError(
                    f"cannot serve metrics on {config.metrics_listen} (--metrics-listen): {problem}"
                ) from None
        async with open_database(config, telemetry) as db:
            running = await build_server(
                config, create_stores(config, db), security, telemetry, reuse_port=reuse_port
            )
            freeze_startup_objects()
            if endpoint is not None:
                log.info(
                    "metrics at http://%s/metrics (port %d)", config.metrics_listen, endpoint.port
                )
            log.info(
                "runstore serving on %s (port %d), database %s, %s, descriptor limit %d",
                config.listen,
                running.port,
                redacted(config.database_url),
                security.describe(),
                descriptors,
            )
            if running.console is not None:
                loop.add_signal_handler(signal.SIGHUP, _reload, security, running.console)
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


def _reload(security: Security, console: ConsoleServer) -> None:
    """SIGHUP with the console on: the auth file and TLS files, then the
    console's certificate."""
    security.reload()
    console.reload_tls()


async def shutdown(running: RunningServer, grace: float) -> None:
    """Reports NOT_SERVING, ends Watch streams with UNAVAILABLE (their clients
    resume elsewhere), refuses new calls and lets in-flight calls finish within
    ``grace`` seconds; calls still running after that are cancelled."""
    log.info("shutting down: finishing in-flight calls (grace %.1fs)", grace)
    if running.monitor is not None:
        await running.monitor.stop()
    if running.retention is not None:
        await running.retention.stop(grace)
    if running.namespaces is not None:
        await running.namespaces.close()
    if running.quota_keeper is not None:
        await running.quota_keeper.stop()
    await running.health.enter_graceful_shutdown()
    running.watch.close()
    if running.console is not None:
        await running.console.stop()
    await running.server.stop(grace)
