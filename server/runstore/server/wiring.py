"""The store cores one server serves, wired over an open database: which of
them reach it through the calls' measured path, which through the backend
itself (the server's own work), and the figures each reports to."""

from __future__ import annotations

from dataclasses import dataclass

from runstore.server.config import ServerConfig
from runstore.server.core.context import ContextStore
from runstore.server.core.memory import MemoryStore
from runstore.server.core.namespaces import NamespaceDirectory, NamespaceStore
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.quotas import Quotas
from runstore.server.core.store import PageLimits, RuntimeStore
from runstore.server.core.watch import RecordWatch, WatchSettings
from runstore.server.db.opening import OpenDatabase
from runstore.server.health import Probe
from runstore.server.retention import RetentionSettings, RetentionTask
from runstore.server.seed_expiry import SeedExpiry


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


def create_stores(config: ServerConfig, database: OpenDatabase) -> Stores:
    """Every store of a server over ``database``, reporting to its telemetry's metrics.

    The calls' stores go through ``database.calls``; the server's own work
    (the directory's refreshes, the quotas' heartbeats and recounts, the
    retention task's check for overrides, seed expiry) through
    ``database.backend``, like the health probes: it is not measured or traced
    as a call's transactions, and retention's passes count in metrics of their own.
    """
    db, own = database.calls, database.backend
    metrics = database.telemetry.metrics
    # A page never carries more payload than the largest request.
    page_bytes = min(config.page_bytes, config.max_message_bytes)
    runtime = RuntimeStore(
        db, limits=PageLimits(records=config.page_limit, payload_bytes=page_bytes)
    )
    context = ContextStore(
        db,
        versions_kept=config.context_versions_kept,
        page_limit=config.page_limit,
        page_bytes=page_bytes,
    )
    # The server's own reads and purges: retention's overrides, seed expiry.
    own_runtime = RuntimeStore(own)
    directory = NamespaceDirectory(own)
    return Stores(
        namespaces=NamespaceStore(
            db, directory, purged=metrics.forget_namespace if metrics is not None else None
        ),
        quotas=QuotaKeeper(
            Quotas(directory, refusals=metrics.quota_refusals if metrics is not None else None),
            directory,
            own,
            recount_seconds=config.quota_recount_seconds,
            always=True,  # the health service's commit probe (health.Heartbeat)
        ),
        probe=own,
        runtime=runtime,
        memory=MemoryStore(db, page_limit=config.page_limit, page_bytes=page_bytes),
        context=context,
        # Always: a namespace's retention overrides apply even when no
        # --retain-* flag is set (docs/namespaces.md, "Storage").
        retention=RetentionTask(
            runtime,
            context,
            own.retention_lock,
            RetentionSettings.from_config(config),
            metrics=metrics,
            overrides=own_runtime.namespace_retention,
            expiry=SeedExpiry.from_config(own_runtime, config, metrics),
        ),
        watch=RecordWatch(
            runtime,
            own.wakeups,
            WatchSettings(
                heartbeat_seconds=config.watch_heartbeat_seconds,
                poll_seconds=config.watch_poll_seconds,
                max_watchers=config.max_watchers,
            ),
        ),
    )
