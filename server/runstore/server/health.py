"""Health that tells the truth: the gRPC health service follows the database.

A background task probes the database cheaply (a trivial query on a
connection of its own, at most once per interval) and reports every service
``NOT_SERVING`` while the probe fails or hangs, ``SERVING`` again once it
answers, so a load balancer stops routing to a replica that can only fail.

A database can answer queries and still complete no commit: a promoted
standby whose ``synchronous_standby_names`` names a standby that does not
exist makes every commit wait (docs/failover.md#what-to-clear-on-promotion).
So the monitor also watches a commit the replica makes anyway, its heartbeat
(``Heartbeat``): while the database answers and no heartbeat has committed
for ``stall_after`` seconds, the commits are stalled, and health says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Final, Protocol, runtime_checkable

from grpc_health.v1 import health, health_pb2

from runstore.contract import durations
from runstore.server.metrics import Metrics

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

SERVING_STATE: Final = "serving"
DOWN_STATE: Final = "down"
"""The database probe fails or hangs."""
STALLED_STATE: Final = "stalled"
"""The probe answers, but no heartbeat has committed for ``--commit-stall-after``."""


@runtime_checkable
class Probe(Protocol):
    """A database the health service can check."""

    @property
    def is_open(self) -> bool: ...

    async def ping(self, within: float) -> None:
        """Raises unless the database answers within ``within`` seconds."""
        ...


@runtime_checkable
class Heartbeat(Protocol):
    """A commit the replica makes at an interval anyway (the quotas' heartbeat
    row, ``core.quota_keeper.QuotaKeeper``): the health service's commit probe,
    without a row of its own."""

    @property
    def committed_at(self) -> float:
        """``time.monotonic()`` when the last heartbeat commit completed."""
        ...


_health_messages: Any = health_pb2
"""``HealthList*`` are newer than the type stubs of ``grpc_health``."""


class HealthServicer(health.aio.HealthServicer):
    """grpc's health servicer plus ``List`` (every service and its status)."""

    async def List(self, request: Any, context: Any) -> Any:
        statuses: dict[str, Any] = getattr(self, "_server_status", {})
        return _health_messages.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in statuses.items()
            }
        )


class HealthMonitor:
    """Probes ``probe`` every ``interval`` seconds and sets ``names`` accordingly.

    Three states, one log line on each change: serving; down (the probe fails
    or hangs); stalled (the probe answers, but ``heartbeat`` has not committed
    for ``stall_after`` seconds: counted in ``metrics``). A database that
    comes back is serving only once a heartbeat commits again, so a promoted
    standby that cannot commit goes from down to stalled, never SERVING.
    """

    def __init__(
        self,
        servicer: HealthServicer,
        names: Sequence[str],
        probe: Probe,
        interval: float,
        *,
        heartbeat: Heartbeat | None = None,
        stall_after: float = 0.0,
        metrics: Metrics | None = None,
    ) -> None:
        self._servicer = servicer
        self._names = tuple(names)
        self._probe = probe
        self._interval = max(0.05, interval)
        self._heartbeat = heartbeat
        self._stall_after = stall_after
        self._metrics = metrics
        self._task: asyncio.Task[None] | None = None
        self.state = SERVING_STATE
        self._failure = ""
        """Why the last probe failed ("" when it answered)."""
        self._answering_since = -math.inf
        """When the probe last began to answer after failing (never, at start)."""
        self._stalled_from = 0.0

    @property
    def serving(self) -> bool:
        return self.state == SERVING_STATE

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _set(self, status: Any) -> None:
        for name in self._names:
            await self._servicer.set(name, status)

    async def _ping(self) -> None:
        try:
            await self._probe.ping(within=self._interval)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
        else:
            if self._failure:
                self._answering_since = time.monotonic()
            self._failure = ""

    def _next_state(self) -> str:
        if self._failure:
            return DOWN_STATE
        if self._heartbeat is None or self._stall_after <= 0:
            return SERVING_STATE
        committed_at = self._heartbeat.committed_at
        if self.state == STALLED_STATE:
            return SERVING_STATE if committed_at > self._stalled_from else STALLED_STATE
        if committed_at >= self._answering_since:
            waiting_since = committed_at
        else:  # back from down: serving once a commit proves it
            waiting_since = self._answering_since
        if time.monotonic() - waiting_since > self._stall_after:
            self._stalled_from = waiting_since
            return STALLED_STATE
        return SERVING_STATE if committed_at >= self._answering_since else DOWN_STATE

    def _log_change(self, before: str, after: str) -> None:
        if after == DOWN_STATE:
            log.warning("database probe failed (%s): health NOT_SERVING", self._failure)
        elif after == STALLED_STATE:
            log.warning(
                "database commits stalled: none completed for %s (--commit-stall-after) "
                "although the database answers queries; a synchronous standby that is not "
                "connected? (docs/failover.md#what-to-clear-on-promotion): health NOT_SERVING",
                durations.format_duration(self._stall_after),
            )
        elif before == STALLED_STATE:
            log.info(
                "database commits complete again (stalled %.1fs): health SERVING",
                time.monotonic() - self._stalled_from,
            )
        else:
            log.info("database probe answered and commits complete: health SERVING")

    async def _run(self) -> None:
        await asyncio.sleep(self._interval)  # the database just answered at startup
        while self._probe.is_open:
            await self._ping()
            state = self._next_state()
            if state != self.state:
                self._log_change(self.state, state)
                if self._metrics is not None:
                    if state == STALLED_STATE:
                        self._metrics.commit_stalls.inc()
                    self._metrics.commit_stalled.set(1 if state == STALLED_STATE else 0)
                if (state == SERVING_STATE) != (self.state == SERVING_STATE):
                    await self._set(SERVING if state == SERVING_STATE else NOT_SERVING)
                self.state = state
            await asyncio.sleep(self._interval)
