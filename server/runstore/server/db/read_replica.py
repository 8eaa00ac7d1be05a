"""The standby of ``--read-database-url`` (docs/failover.md): where reads
inside ``call_scope.lagging_reads()`` go, falling back to the primary when it
cannot be reached within the call's bound, and the probe of its lag."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import asyncpg

from runstore.contract.errors import UnavailableError
from runstore.server import call_scope
from runstore.server.core.ports import Transaction
from runstore.server.db import bound
from runstore.server.db.connect_pacing import ConnectPacing
from runstore.server.metrics import DbFigures

log = logging.getLogger("runstore.server.db.postgres")  # the backend's log, as before the split

T = TypeVar("T")

_REPLICA_LAG: Final = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
    ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)
END::float8
"""

Run = Callable[
    [Callable[[Transaction], Coroutine[Any, Any, T]], float, "asyncpg.Pool | None"], Awaitable[T]
]
"""A read transaction of the backend's on ``pool`` (None: the primary's), over before a deadline."""


class ReadReplica:
    """A pool on the standby, opened by ``start`` (connecting on first use: a
    standby that is down does not stop the server) and the lag probe, which
    runs only when metrics are on."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_max: int,
        connect_timeout: float,
        operation_timeout: float,
        reconnect_pause_max: float,
        lag_probe_interval: float,
        server_settings: dict[str, str],
        reset: Callable[[asyncpg.Connection], Awaitable[None]],
    ) -> None:
        self._dsn = dsn
        self._pool_max = pool_max
        self._connect_timeout = connect_timeout
        self._operation_timeout = operation_timeout
        self._reconnect_pause_max = reconnect_pause_max
        self._lag_probe_interval = lag_probe_interval
        self._server_settings = {**server_settings, "application_name": "runstore-read"}
        self._reset = reset
        self._pool: asyncpg.Pool | None = None
        self._lag_probe: asyncio.Task[None] | None = None

    async def start(self, figures: DbFigures | None) -> None:
        self._pool = await asyncpg.create_pool(
            self._dsn,
            connect=ConnectPacing(
                longest_pause=self._reconnect_pause_max,
                what="the read database (--read-database-url)",
            ).connect,
            min_size=0,
            max_size=self._pool_max,
            timeout=min(self._connect_timeout, self._operation_timeout),
            server_settings=self._server_settings,
            reset=self._reset,
        )
        if figures is not None:
            self._lag_probe = asyncio.ensure_future(self._probe_lag(figures))

    async def close(self) -> None:
        if self._lag_probe is not None:
            self._lag_probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_probe
            self._lag_probe = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.terminate()

    def serves_now(self) -> bool:
        """Whether the read being made now goes here: it tolerates lag
        (``call_scope.lagging_reads``) and the pool is open."""
        return self._pool is not None and call_scope.lag_tolerated()

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]], run: Run[T]) -> T:
        """``fn`` on the standby; on the primary when the standby cannot be
        reached within the bound's time."""
        until = bound.deadline(self._operation_timeout)
        try:
            return await run(fn, until, self._pool)
        except UnavailableError:
            if asyncio.get_running_loop().time() >= until:
                raise
            log.warning("the read replica is unavailable; reading from the primary")
            return await run(fn, until, None)

    async def _probe_lag(self, figures: DbFigures) -> None:
        """Reads the replica's lag every ``lag_probe_interval`` seconds: how
        old the last replayed commit is while WAL remains to replay, 0 when
        it has replayed all it received (or is a primary), NaN when it does
        not answer."""
        while self._pool is not None:
            try:
                lag = await self._pool.fetchval(_REPLICA_LAG, timeout=self._operation_timeout)
                figures.replica_lag(float(lag))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("cannot read the replica's lag: %s", exc)
                figures.replica_lag(math.nan)
            await asyncio.sleep(self._lag_probe_interval)
