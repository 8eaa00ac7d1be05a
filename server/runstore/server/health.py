"""Health that tells the truth: the gRPC health service follows the database.

A background task probes the database cheaply (a trivial query on a
connection of its own, at most once per interval) and reports every service
``NOT_SERVING`` while the probe fails or hangs, ``SERVING`` again once it
answers, so a load balancer stops routing to a replica that can only fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from grpc_health.v1 import health, health_pb2

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@runtime_checkable
class Probe(Protocol):
    """A database the health service can check."""

    @property
    def is_open(self) -> bool: ...

    async def ping(self, within: float) -> None:
        """Raises unless the database answers within ``within`` seconds."""
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
    """Probes ``probe`` every ``interval`` seconds and sets ``names`` accordingly."""

    def __init__(
        self, servicer: HealthServicer, names: Sequence[str], probe: Probe, interval: float
    ) -> None:
        self._servicer = servicer
        self._names = tuple(names)
        self._probe = probe
        self._interval = max(0.05, interval)
        self._task: asyncio.Task[None] | None = None
        self.serving = True

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

    async def _run(self) -> None:
        await asyncio.sleep(self._interval)  # the database just answered at startup
        while self._probe.is_open:
            try:
                await self._probe.ping(within=self._interval)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.serving:
                    log.warning(
                        "database probe failed (%s: %s): health NOT_SERVING",
                        type(exc).__name__,
                        exc,
                    )
                    self.serving = False
                    await self._set(NOT_SERVING)
            else:
                if not self.serving:
                    log.info("database probe answered: health SERVING")
                    self.serving = True
                    await self._set(SERVING)
            await asyncio.sleep(self._interval)
