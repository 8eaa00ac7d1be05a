"""``runstore serve``: the process around a server. The event loop, the
descriptor limit, signals (SIGTERM and SIGINT stop, SIGHUP reloads), the
metrics endpoint, serving until told to stop, and a clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import resource
import signal
from pathlib import Path

from runstore.contract import pid_file
from runstore.server import tracing
from runstore.server.app import build_server, shutdown
from runstore.server.auth import Security
from runstore.server.auth.secrets import redacted
from runstore.server.config import ServerConfig, uvloop_installed
from runstore.server.console.server import ConsoleServer, check_exposure
from runstore.server.db import serve_lock
from runstore.server.db.opening import open_database
from runstore.server.interceptors.handlers import chain_kind
from runstore.server.listening import ListenError, check_listen_addresses
from runstore.server.metrics import MetricsEndpoint
from runstore.server.telemetry import Telemetry
from runstore.server.wiring import create_stores

log = logging.getLogger("runstore.server.app")
"""The logger ``runstore serve`` has always written its lifecycle lines to."""


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
    of each call's time in the loop's own Python; ``auto``: uvloop where it is
    installed, else asyncio's own)."""
    loop_factory = None
    choice = config.event_loop.lower()
    if choice == "uvloop" or (choice == "auto" and uvloop_installed()):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(config, reuse_port=reuse_port))


def _metrics_endpoint(telemetry: Telemetry, config: ServerConfig) -> MetricsEndpoint | None:
    """``/metrics`` on ``--metrics-listen``, when metrics are on."""
    if telemetry.metrics is None:
        return None
    try:
        return MetricsEndpoint(telemetry.metrics, config.metrics_listen)
    except OSError as exc:
        problem = (exc.strerror or str(exc)).lower()
        raise ListenError(
            f"cannot serve metrics on {config.metrics_listen} (--metrics-listen): {problem}"
        ) from None


async def serve(config: ServerConfig, *, reuse_port: bool = False) -> None:
    """Serves until SIGTERM or SIGINT, then lets in-flight calls finish; SIGHUP
    re-reads the auth file and the TLS files. ``reuse_port``: bind with
    SO_REUSEPORT, as one of the workers of ``serve --workers N``."""
    descriptors = raise_descriptor_limit()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    chain_kind()  # a mistaken RUNSTORE_INTERCEPTOR_CHAIN refuses before the database too
    security = Security.from_config(config)  # refuses before touching the database
    check_exposure(config, security)
    loop.add_signal_handler(signal.SIGHUP, security.reload)
    check_listen_addresses(config, reuse_port=reuse_port)
    telemetry = Telemetry.from_config(config)
    endpoint = None
    held = contextlib.ExitStack()
    try:
        held.enter_context(serve_lock.serving(config.database_url))
        # A worker's parent holds the pid file of --workers (it passes SIGHUP on).
        pid_path = None if reuse_port else early_pid_file(config)
        if pid_path is not None:
            pid_file.hold(held, pid_path, required=bool(config.pid_file))
        endpoint = _metrics_endpoint(telemetry, config)
        async with open_database(config, telemetry) as database:
            running = await build_server(
                config, create_stores(config, database), security, telemetry, reuse_port=reuse_port
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
                if not reuse_port and pid_path is None:  # named after the port just bound
                    path = pid_file.server_path(config.pid_file, config.listen, running.port)
                    pid_file.hold(held, path, required=bool(config.pid_file))
                await stop.wait()
            finally:
                await shutdown(running, config.grace_seconds)
    finally:
        held.close()
        if endpoint is not None:
            endpoint.close()
        if telemetry.tracer_provider is not None:
            tracing.shutdown(telemetry.tracer_provider)
    log.info("runstore stopped")


def early_pid_file(config: ServerConfig) -> Path | None:
    """The pid file, when it is known before the port is bound (``--pid-file``,
    or a fixed port): taken before the database is touched."""
    if config.pid_file:
        return Path(config.pid_file)
    if config.listen.endswith(":0"):
        return None
    return pid_file.default_path(config.listen)


def _reload(security: Security, console: ConsoleServer) -> None:
    """SIGHUP with the console on: the auth file and TLS files, then the
    console's certificate."""
    security.reload()
    console.reload_tls()
