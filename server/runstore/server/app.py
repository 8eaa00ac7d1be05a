"""The server itself: every service, health and reflection on one gRPC server
behind the interceptor chain, the background tasks started, and a clean stop.

``build_server`` is separate from serving (``serving``: the process, its
signals and its loop) so tests start the very same stack on an ephemeral port.
The database is opened by ``db.opening``, the stores wired by ``wiring``, the
gRPC core's settings are ``grpc_options``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from runstore.server.auth import Security
from runstore.server.config import ServerConfig
from runstore.server.console.server import ConsoleListenError, ConsoleServer, start_console
from runstore.server.core.namespaces import NamespaceStore
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.watch import RecordWatch
from runstore.server.db.opening import OpenDatabase, open_database
from runstore.server.grpc_options import server_options
from runstore.server.health import HealthMonitor, HealthServicer
from runstore.server.interceptors import server_interceptors
from runstore.server.listening import ListenError, bind_problem
from runstore.server.metrics import Metrics
from runstore.server.retention import RetentionTask
from runstore.server.servicers.context_store import ContextStoreServicer
from runstore.server.servicers.memory_store import MemoryStoreServicer
from runstore.server.servicers.namespace_admin import NamespaceAdminServicer
from runstore.server.servicers.runtime_store import RuntimeStoreServicer
from runstore.server.servicers.session_admin import SessionAdminServicer
from runstore.server.telemetry import Telemetry
from runstore.server.wiring import Stores, create_stores
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

__all__ = [
    "SERVICE_NAMES",
    "ListenError",
    "OpenDatabase",
    "RunningServer",
    "Stores",
    "Telemetry",
    "build_server",
    "create_stores",
    "open_database",
    "shutdown",
]
"""What starting a server in-process takes (tests, benchmarks), from one module."""

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    runtime_store_pb2.DESCRIPTOR.services_by_name["RuntimeStore"].full_name,
    session_admin_pb2.DESCRIPTOR.services_by_name["SessionAdmin"].full_name,
    memory_store_pb2.DESCRIPTOR.services_by_name["MemoryStore"].full_name,
    context_store_pb2.DESCRIPTOR.services_by_name["ContextStore"].full_name,
    namespace_admin_pb2.DESCRIPTOR.services_by_name["NamespaceAdmin"].full_name,
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


class _GenericHandlersOnly:
    """The server as the generated ``add_*_to_server`` functions see it: each
    service's handlers reach it as one generic handler, never as registered
    methods.

    The generated code gives the same handlers both ways. grpcio's asyncio
    server waits for the next call of each registered method on a future of
    its own, and for every call it takes it ``asyncio.wait``s on all of them
    again: with runstore's 50-odd methods that wait was about a tenth of the
    server's CPU per call (docs/benchmarks.md, "Generic handlers"). A generic
    handler costs one waiting future and a dictionary lookup per call."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        """Not registered: ``add_generic_rpc_handlers`` received them already."""


def _add_services(
    grpc_server: grpc.aio.Server,
    stores: Stores,
    interceptors: Sequence[grpc.aio.ServerInterceptor],
) -> HealthServicer:
    """Every runstore service over ``stores``, health and reflection; the calls
    AppendRunRecordCalls carries pass ``interceptors`` as calls of their own."""
    # The generated functions take a grpc.aio.Server; they call only the two above.
    server = cast(grpc.aio.Server, _GenericHandlersOnly(grpc_server))
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
    # What ``reflection.enable_server_reflection`` adds for an asyncio server
    # (it tells one by its type, which ``server`` here only stands for).
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # type: ignore[no-untyped-call]
        reflection.aio.ReflectionServicer(
            (
                *SERVICE_NAMES,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            )
        ),
        server,
    )
    return health_servicer


def _bind(server: grpc.aio.Server, config: ServerConfig, security: Security) -> int:
    """The port ``--listen`` bound (TLS when ``security`` has it); ``ListenError``
    says why it could not."""
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
    return port


async def _start_background(
    config: ServerConfig, stores: Stores, health: HealthServicer, metrics: Metrics | None
) -> HealthMonitor | None:
    """Health SERVING and its monitor, retention, the quotas' keeper, and the
    purges a stopped replica left half done."""
    names = ("", *SERVICE_NAMES)
    for name in names:
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    monitor = None
    if stores.probe is not None:
        monitor = HealthMonitor(
            health,
            names,
            stores.probe,
            config.health_probe_interval,
            heartbeat=stores.quotas,
            stall_after=config.commit_stall_after,
            metrics=metrics,
        )
        monitor.start()
    if stores.retention is not None:
        stores.retention.start()
        if stores.retention.settings.on:
            log.info("retention on: %s", stores.retention.settings.describe())
    if stores.quotas is not None:
        stores.quotas.start()
    return monitor


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
    ``telemetry`` (call metrics, tracing) is off unless given; the stores'
    figures are those of the database they were wired over (``wiring``).
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
    health = _add_services(server, stores, interceptors)
    port = _bind(server, config, security)
    await server.start()
    monitor = await _start_background(config, stores, health, telemetry.metrics)
    running = RunningServer(
        server,
        port,
        health,
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
                quotas=stores.quotas.quotas if stores.quotas is not None else None,
                metrics=telemetry.metrics,
                memory=stores.memory,
                context=stores.context,
            )
        except BaseException as exc:
            await shutdown(running, 0)
            if isinstance(exc, ConsoleListenError):
                raise ListenError(str(exc)) from None
            raise
    return running


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
