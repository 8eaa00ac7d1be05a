"""The console's HTTP(S) listener: uvicorn inside the gRPC server's event loop.

uvicorn runs programmatically (``startup``, ``main_loop``, ``shutdown``, never
``serve``, which would take over SIGTERM and SIGINT from runstore's own
handlers). Those steps are not uvicorn's public API, so runstore-server caps
uvicorn at the newest release ``tests/console/test_console_embedding.py``
passed on. The socket is bound here, so a busy port is one clear error before
anything is served, and port 0 gives a free port (tests). Under TLS the
console uses the gRPC server's certificate and key (and client CA).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Final

import anyio
import uvicorn

from runstore.server.auth import Security, SecurityError, is_loopback
from runstore.server.concerns import FrontDoor
from runstore.server.config import ServerConfig
from runstore.server.console.access import Access
from runstore.server.console.app import create_app
from runstore.server.console.pages import Console
from runstore.server.core.context import ContextStore
from runstore.server.core.memory import MemoryStore
from runstore.server.core.namespace_streams import NamespaceStreams
from runstore.server.core.namespaces import NamespaceDirectory
from runstore.server.core.quotas import Quotas
from runstore.server.core.store import RuntimeStore
from runstore.server.core.watch import RecordWatch
from runstore.server.metrics import Metrics

log = logging.getLogger(__name__)

GRACE_SECONDS: Final = 5
"""On shutdown, how long open page loads may finish (live streams end at once)."""


LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "::1", "[::1]")
"""The Host names an open (authentication off) console on loopback answers."""


class ConsoleListenError(OSError):
    """The console's address cannot be bound."""


def check_exposure(config: ServerConfig, security: Security) -> None:
    """The gRPC rule for the console's address: off loopback it needs TLS and an
    auth file, unless ``--insecure``."""
    if not config.console_listen or is_loopback(config.console_listen):
        return
    missing = [
        flag
        for flag, present in (
            ("--tls-cert/--tls-key", security.tls is not None),
            ("--auth-file", security.principals is not None),
        )
        if not present
    ]
    if missing and not config.insecure:
        raise SecurityError(
            f"refusing to serve the console on {config.console_listen} (not loopback) "
            f"without {' and '.join(missing)}; pass --insecure to serve it anyway"
        )


def _bind(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConsoleListenError(
            f"cannot listen on {listen} (--console-listen): {(exc.strerror or str(exc)).lower()}"
        ) from None
    sock.setblocking(False)
    return sock


@dataclass
class ConsoleServer:
    """A started console; ``stop`` ends it."""

    server: uvicorn.Server
    sock: socket.socket
    console: Console
    task: asyncio.Task[None]

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def reload_tls(self) -> bool:
        """Re-reads the certificate and key (SIGHUP) for the next handshakes;
        on error keeps the current ones and logs why."""
        context = self.server.config.ssl
        files = self.console.tls_files
        if context is None or files is None:
            return False
        try:
            context.load_cert_chain(files.cert, files.key)
        except (OSError, ssl.SSLError) as exc:
            log.error("console TLS files not reloaded, keeping the current ones: %s", exc)
            return False
        log.info("console TLS certificate %s reloaded for new connections", files.cert)
        return True

    async def stop(self) -> None:
        """Ends live streams, lets page loads finish within ``GRACE_SECONDS``."""
        if self.console.shutdown is not None:
            self.console.shutdown.set()
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.server.shutdown(sockets=[self.sock])
        self.sock.close()


async def start_console(
    config: ServerConfig,
    store: RuntimeStore,
    watch: RecordWatch,
    security: Security,
    directory: NamespaceDirectory | None = None,
    *,
    quotas: Quotas | None = None,
    metrics: Metrics | None = None,
    memory: MemoryStore | None = None,
    context: ContextStore | None = None,
) -> ConsoleServer:
    """Serves the console on ``config.console_listen`` in the running loop,
    behind the concerns the gRPC chain applies: its ``quotas`` and ``metrics``
    (the server's, shared with the chain) and its access log."""
    sock = _bind(config.console_listen)
    files = security.tls.files if security.tls is not None else None
    console = Console(
        store=store,
        watch=watch,
        memory=memory,
        context=context,
        access=Access(security.principals),
        door=FrontDoor(
            directory=directory,
            authenticated=security.principals is not None,
            quotas=quotas,
            metrics=metrics,
            access_log=config.access_log_on,
            watch=watch,
            streams=None if directory is None else NamespaceStreams(directory),
        ),
        secure=files is not None,
        tls_files=files,
        allowed_hosts=(
            LOOPBACK_HOSTS
            if security.principals is None and is_loopback(config.console_listen)
            else None
        ),
        shutdown=anyio.Event(),
    )
    settings = uvicorn.Config(
        create_app(console),
        log_config=None,
        access_log=False,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=GRACE_SECONDS,
        ssl_certfile=str(files.cert) if files is not None else None,
        ssl_keyfile=str(files.key) if files is not None else None,
        ssl_ca_certs=str(files.client_ca) if files and files.client_ca else None,
        ssl_cert_reqs=ssl.CERT_REQUIRED if files and files.client_ca else ssl.CERT_NONE,
    )
    # uvicorn logs each request when its access logger has a handler anywhere up
    # the tree (ours, at the root): the console does not use that log.
    logging.getLogger("uvicorn.access").propagate = False
    server = uvicorn.Server(settings)
    try:
        settings.load()
        server.lifespan = settings.lifespan_class(settings)
        await server.startup(sockets=[sock])
    except BaseException:
        sock.close()
        raise
    if server.should_exit:  # startup failed and said why in the log
        sock.close()
        raise ConsoleListenError(f"cannot serve the console on {config.console_listen}")
    task = asyncio.create_task(server.main_loop(), name="runstore-console")
    scheme = "https" if files is not None else "http"
    log.info("console at %s://%s (port %d)", scheme, config.console_listen, sock.getsockname()[1])
    return ConsoleServer(server, sock, console, task)
