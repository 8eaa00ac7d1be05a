"""The retention task: purges what the ``--retain-*`` flags say is old enough.

Off by default. Every ``--retention-interval`` one pass purges, in bounded
batches, ended sessions (the contract's purge, tombstone kept), finished
sessionless runs (run tombstones kept) and context keys not written for
their durations, using the same store rules as the on-demand RPCs
(docs/contract.md §9.10): each session's purge, and each sessionless run
with its children, is one transaction of its own, re-checked under its
locks, so a session with a running run is never touched.

With several replicas one works at a time: a pass runs only while it holds
the database's retention lock (PostgreSQL: an advisory lock on a connection
of its own; SQLite: one server, one pass at a time); the others skip that
pass. Even without the lock every purge would happen once, as the store's
re-checks make concurrent on-demand calls safe; the lock only saves the work.

A pass runs per active namespace, one after another, each in its own keys:
a namespace's retention overrides (its row in ``namespaces``) replace the
server's settings for it (docs/namespaces.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final

from runstore.contract.durations import format_duration
from runstore.server import call_scope
from runstore.server.call_scope import ALL_NAMESPACES
from runstore.server.config import ServerConfig, parse_duration
from runstore.server.core.context import ContextStore
from runstore.server.core.model import NamespaceRetention, Nanos
from runstore.server.core.store import RuntimeStore
from runstore.server.metrics import Metrics
from runstore.server.seed_expiry import SeedExpiry

log = logging.getLogger(__name__)

BATCH: Final = 100
"""Sessions, root runs or context keys per batch (a store call)."""

NANOS_PER_SECOND: Final = 1_000_000_000

RetentionLock = Callable[[], AbstractAsyncContextManager[bool]]
"""Yields whether this replica may run a pass now (``retention_lock`` of a backend)."""


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """How old things may get, in seconds (None: kept for ever), and how often to look."""

    ended_sessions: float | None = None
    sessionless_runs: float | None = None
    contexts: float | None = None
    interval: float = 600
    batch: int = BATCH

    @classmethod
    def from_config(cls, config: ServerConfig) -> RetentionSettings:
        return cls(
            ended_sessions=config.retention_seconds("retain_ended_sessions"),
            sessionless_runs=config.retention_seconds("retain_sessionless_runs"),
            contexts=config.retention_seconds("retain_contexts"),
            interval=parse_duration(config.retention_interval),
        )

    @property
    def on(self) -> bool:
        return any(
            age is not None for age in (self.ended_sessions, self.sessionless_runs, self.contexts)
        )

    def describe(self) -> str:
        """The settings as the log line says them, in the flags' own units
        ("ended sessions after 30d, context keys after 90d; every 10m")."""
        ages = [
            f"{what} after {format_duration(age)}"
            for what, age in (
                ("ended sessions", self.ended_sessions),
                ("sessionless runs", self.sessionless_runs),
                ("context keys", self.contexts),
            )
            if age is not None
        ]
        return f"{', '.join(ages) or 'nothing'}; every {format_duration(self.interval)}"


@dataclass(frozen=True, slots=True)
class PassReport:
    """What one pass did: whether it ran (held the lock) and what it purged."""

    ran: bool
    sessions: int = 0
    runs: int = 0
    contexts: int = 0
    seconds: float = 0.0


class RetentionTask:
    """Runs passes on an interval until ``stop``; ``run_pass`` runs one now.

    Args:
        runtime, context: The stores whose rules purge.
        lock: The backend's retention lock.
        settings: The durations and the interval.
        clock: UTC nanoseconds "now" (each pass's cut-offs are now minus a duration).
        wait: Waits between passes; returns early when asked to stop. The
            default waits ``interval`` seconds or until ``stop``.
        metrics: Where passes are counted and timed (metrics on).
        overrides: Reads the namespaces' retention overrides (default: ``runtime``'s).
        expiry: Seed attempts' expiry, a pass of it after each retention pass.
    """

    def __init__(
        self,
        runtime: RuntimeStore,
        context: ContextStore,
        lock: RetentionLock,
        settings: RetentionSettings,
        *,
        clock: Callable[[], Nanos] = time.time_ns,
        wait: Callable[[float], Awaitable[None]] | None = None,
        metrics: Metrics | None = None,
        overrides: Callable[[], Awaitable[list[NamespaceRetention]]] | None = None,
        expiry: SeedExpiry | None = None,
    ) -> None:
        self._runtime = runtime
        self._overrides = overrides or runtime.namespace_retention
        """Reads the namespaces' overrides: the check each pass makes first, the
        server's own read (not measured as a pass's work when there is none)."""
        self._context = context
        self._lock = lock
        self.settings = settings
        self._clock = clock
        self.stopping = asyncio.Event()
        """Set by ``stop``: the loop ends after the batch it is in."""
        self._wait = wait or self._wait_or_stop
        self.metrics = metrics
        self.expiry = expiry
        """Seed attempts' expiry (``seed_expiry``): a pass of it follows each
        retention pass, whatever the ``--retain-*`` settings."""
        self._task: asyncio.Task[None] | None = None

    async def _wait_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def start(self) -> None:
        """Starts the loop; the first pass runs at once (a restarted server catches up)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="runstore-retention")

    async def stop(self, grace: float = 10.0) -> None:
        """Asks the loop to stop after the batch it is in (whose transactions
        commit or roll back whole) and waits up to ``grace`` seconds for it;
        then cancels it (an interrupted transaction rolls back)."""
        self.stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), grace)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                await self.run_pass()
            except Exception:
                log.exception(
                    "retention pass failed; trying again in %s",
                    format_duration(self.settings.interval),
                )
            await self._expire()
            if self.stopping.is_set():
                return
            await self._wait(self.settings.interval)

    async def run_pass(self) -> PassReport:
        """One pass, if this replica holds the retention lock; logged and
        counted. With no ``--retain-*`` setting and no namespace's override,
        nothing to do: not run, not logged, not counted. Over every namespace
        (``ALL_NAMESPACES``), each purged in its own (``call_scope``)."""
        with call_scope.acting_in(ALL_NAMESPACES):
            return await self._run_pass()

    async def _run_pass(self) -> PassReport:
        if not self.settings.on and not await self._overridden():
            return PassReport(ran=False)
        now = self._clock()
        started = time.perf_counter()
        try:
            async with self._lock() as held:
                if not held:
                    log.info("retention pass skipped: another replica holds the retention lock")
                    self._count("skipped")
                    return PassReport(ran=False)
                report = await self._purge(now, started)
        except BaseException:
            # Taking the lock failed (database down) or a batch did: the next
            # pass tries again; what was purged stays purged.
            self._count("failed", time.perf_counter() - started)
            raise
        self._count("done", report.seconds)
        if self.metrics is not None:
            self.metrics.retention_last_success.set(time.time())
        log.info(
            "retention pass: purged %d sessions, %d sessionless runs, %d context keys in %d ms",
            report.sessions,
            report.runs,
            report.contexts,
            round(report.seconds * 1000),
        )
        return report

    async def _expire(self) -> None:
        """One seed expiry pass, if any; a failure waits for the next interval."""
        if self.expiry is None or self.stopping.is_set():
            return
        try:
            expired = await self.expiry.run_pass()
        except Exception:
            log.exception("seed expiry pass failed; trying again in %s", self.settings.interval)
            return
        if expired:
            log.info("seed expiry: deleted %d unpublished or abandoned seed attempts", expired)

    async def _overridden(self) -> bool:
        """Whether a namespace has a retention override of its own."""
        try:
            namespaces = await self._overrides()
        except Exception as exc:  # retention is off: a failed look is no pass's failure
            log.debug("cannot read the namespaces' retention overrides: %s", exc)
            return False
        return any(
            ns.ended_sessions is not None or ns.sessionless_runs is not None for ns in namespaces
        )

    async def _purge(self, now: Nanos, started: float) -> PassReport:
        """Each active namespace in turn, with its own overrides, acting in
        that namespace (``call_scope``)."""
        totals = [0, 0, 0]
        for namespace in await self._runtime.namespace_retention():
            if self.stopping.is_set():
                break
            with call_scope.acting_in(namespace.name):
                purged = await self._purge_namespace(namespace, now)
            for index, count in enumerate(purged):
                totals[index] += count
        sessions, runs, contexts = totals
        return PassReport(True, sessions, runs, contexts, time.perf_counter() - started)

    async def _purge_namespace(
        self, namespace: NamespaceRetention, now: Nanos
    ) -> tuple[int, int, int]:
        """One namespace's purges (the current one), each in bounded batches:
        its overrides, else the server's settings."""
        batch = self.settings.batch
        ended_sessions = (
            self.settings.ended_sessions
            if namespace.ended_sessions is None
            else namespace.ended_sessions
        )
        sessionless_runs = (
            self.settings.sessionless_runs
            if namespace.sessionless_runs is None
            else namespace.sessionless_runs
        )
        settings = self.settings
        sessions = runs = contexts = 0
        if ended_sessions is not None:
            cut = now - round(ended_sessions * NANOS_PER_SECOND)
            while not self.stopping.is_set():
                ids, more = await self._runtime.purge_ended_sessions(cut, batch)
                sessions += len(ids)
                if not (more and ids):
                    break
        if sessionless_runs is not None:
            cut = now - round(sessionless_runs * NANOS_PER_SECOND)
            while not self.stopping.is_set():
                ids, more = await self._runtime.purge_sessionless_runs(cut, batch)
                runs += len(ids)
                if not (more and ids):
                    break
        if settings.contexts is not None:
            cut = now - round(settings.contexts * NANOS_PER_SECOND)
            while not self.stopping.is_set():
                count, more = await self._context.purge_stale_contexts(cut, batch)
                contexts += count
                if not more:
                    break
        return sessions, runs, contexts

    def _count(self, outcome: str, seconds: float | None = None) -> None:
        if self.metrics is None:
            return
        self.metrics.retention_passes.labels(outcome).inc()
        if seconds is not None:
            self.metrics.retention_pass_seconds.observe(seconds)
