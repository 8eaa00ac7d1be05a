"""Seed attempts that never finish: deleted after ``--seed-attempt-ttl``.

An attempt begun and never published, or closed by SettleRunPreparation,
holds its records until it expires (docs/contract.md §9.7). The retention
task's loop runs one expiry pass every ``--retention-interval``, in every
active namespace, in bounded batches; each attempt is re-checked under its
run's seed lock, so one being published at that moment is kept, and replicas
running passes at once delete each attempt once. Deleted attempts are counted
by ``runstore_seed_attempts_expired_total``.

Once an abandoned attempt expires, its ID is free again: a first BeginRunSeed
arriving later than the TTL is no longer refused (docs/configuration.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from runstore.server import call_scope
from runstore.server.call_scope import ALL_NAMESPACES
from runstore.server.config import ServerConfig, parse_duration
from runstore.server.core.model import Nanos
from runstore.server.core.store import RuntimeStore
from runstore.server.metrics import Metrics

BATCH: Final = 100
NANOS_PER_SECOND: Final = 1_000_000_000


class SeedExpiry:
    """Deletes attempts older than ``ttl`` seconds; ``run_pass`` is one pass.

    Args:
        runtime: The store whose rules delete (``expire_seed_attempts``).
        ttl: Seconds an unpublished or abandoned attempt is kept.
        clock: UTC nanoseconds "now".
        metrics: Counts the attempts deleted (metrics on).
    """

    def __init__(
        self,
        runtime: RuntimeStore,
        ttl: float,
        *,
        clock: Callable[[], Nanos] = time.time_ns,
        batch: int = BATCH,
        metrics: Metrics | None = None,
    ) -> None:
        self._runtime = runtime
        self.ttl = ttl
        self._clock = clock
        self._batch = batch
        self.metrics = metrics

    @classmethod
    def from_config(
        cls, runtime: RuntimeStore, config: ServerConfig, metrics: Metrics | None = None
    ) -> SeedExpiry:
        return cls(runtime, parse_duration(config.seed_attempt_ttl), metrics=metrics)

    async def run_pass(self) -> int:
        """Every active namespace's expired attempts, in that namespace's keys;
        returns how many were deleted."""
        cut = self._clock() - round(self.ttl * NANOS_PER_SECOND)
        total = 0
        with call_scope.acting_in(ALL_NAMESPACES):
            namespaces = await self._runtime.namespace_retention()
        for namespace in namespaces:
            with call_scope.acting_in(namespace.name):
                while True:
                    count, more = await self._runtime.expire_seed_attempts(cut, self._batch)
                    total += count
                    if self.metrics is not None and count:
                        self.metrics.seed_attempts_expired.inc(count)
                    if not more:
                        break
        return total
