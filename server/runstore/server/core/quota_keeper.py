"""The background task that keeps a replica's quota state current
(docs/namespaces.md#quotas): the heartbeat rows in ``quota_replicas`` (which
replicas are alive, their Watch stream counts), the directory's refresh, and
the stored bytes (read, and recounted by one replica at a time)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from typing import Final

from runstore.server.core.model import Nanos
from runstore.server.core.namespace_model import Namespace
from runstore.server.core.namespaces import REFRESH_SECONDS, NamespaceDirectory
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.quotas import Quotas

log = logging.getLogger(__name__)

RECOUNT_SECONDS: Final = 30.0
"""Default of ``--quota-recount-seconds``: how often the stored bytes of the
namespaces with a stored_bytes quota are recounted (by one replica)."""

ALIVE_BEATS: Final = 3
"""A replica whose heartbeat row has not changed for this many heartbeat
intervals (on the reader's own clock) no longer shares the rate quotas."""

FORGET_SECONDS: Final = 600.0
"""Heartbeat rows older than this (by their writer's clock) are deleted: a
replica that stopped without removing its row."""


def _rated(row: Namespace | None) -> bool:
    return row is not None and (
        row.quota_writes_per_s is not None
        or row.quota_reads_per_s is not None
        or row.quota_watch_streams is not None
    )


def replica_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class QuotaKeeper:
    """The background task that keeps a replica's ``Quotas`` current, every
    ``interval`` seconds: it refreshes the namespace directory (so a namespace
    deleted on another replica ends its streams here within that interval),
    upserts this replica's heartbeat row while a namespace has a rate or
    watch_streams quota, and reads (and, when due, recounts) the stored bytes
    of the namespaces with a stored_bytes quota.

    Args:
        quotas: What it keeps current.
        db: The database, unmeasured (the server's own statements).
        recount_seconds: How often the stored bytes are recounted.
        replica_id: This replica's heartbeat row.
    """

    def __init__(
        self,
        quotas: Quotas,
        directory: NamespaceDirectory,
        db: Database,
        *,
        interval: float = REFRESH_SECONDS,
        recount_seconds: float = RECOUNT_SECONDS,
        replica_id: str | None = None,
    ) -> None:
        self.quotas = quotas
        self._directory = directory
        self._db = db
        self.interval = interval
        self.recount_seconds = recount_seconds
        self.replica_id = replica_id or replica_name()
        self._seen: dict[str, tuple[int, float]] = {}
        self._beating = False
        self._recounted_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="runstore-quotas")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._beating:
            self._beating = False
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._db.write(self._forget), 2.0)

    async def _loop(self) -> None:
        failing = False
        while True:
            try:
                await self.tick()
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is down: the calls see it themselves
                if not failing:
                    log.warning("quota state not refreshed (again in %ss): %r", self.interval, exc)
                failing = True
            await asyncio.sleep(self.interval)

    async def tick(self) -> None:
        """One round: the directory, the heartbeat, the stored bytes."""
        # Read unless a call's refresh just did: a namespace deleted elsewhere
        # ends its streams here within about one interval.
        if self._directory.stale(self.interval / 2):
            await self._directory.refresh()
        rows = [self._directory.settings(name) for name in self._directory.active()]
        if any(_rated(row) for row in rows) or self._beating:
            await self._heartbeat(any(_rated(row) for row in rows))
        measured = sorted(row.name for row in rows if row and row.quota_stored_bytes is not None)
        if measured:
            await self._usage(measured)

    async def _heartbeat(self, rated: bool) -> None:
        if not rated:  # the last rate or stream quota went: stop beating
            self._beating = False
            await self._db.write(self._forget)
            self.quotas.replicas, self.quotas.others_streams = 1, {}
            self._seen.clear()
            return
        self._beating = True
        now_wall = time.time_ns()
        streams = json.dumps(self.quotas.own_streams(), sort_keys=True)
        stale_before = now_wall - round(FORGET_SECONDS * 1e9)
        replica_id = self.replica_id

        async def beat(tx: Transaction) -> list[tuple[str, int, str]]:
            return await tx.quota_heartbeat(replica_id, now_wall, streams, stale_before)

        rows = await self._db.write(beat)
        now = time.monotonic()
        alive = 1
        others: dict[str, int] = {}
        seen: dict[str, tuple[int, float]] = {}
        for other, beats, published in rows:
            if other == replica_id:
                continue
            previous = self._seen.get(other)
            changed_at = now if previous is None or previous[0] != beats else previous[1]
            seen[other] = (beats, changed_at)
            if now - changed_at > ALIVE_BEATS * self.interval:
                continue
            alive += 1
            try:
                counts = json.loads(published)
            except ValueError:
                continue
            for name, count in counts.items():
                others[name] = others.get(name, 0) + int(count)
        self._seen = seen
        self.quotas.replicas, self.quotas.others_streams = alive, others

    async def _forget(self, tx: Transaction) -> None:
        await tx.forget_replica(self.replica_id)

    async def _usage(self, names: list[str]) -> None:
        now = time.monotonic()
        if (
            self._recounted_at is None
            or now - self._recounted_at >= self.recount_seconds
            or not all(self.quotas.measured(name) for name in names)
        ):
            await self.recount(names, fresh_seconds=self.recount_seconds / 2)
        else:
            self.quotas.set_usage(await self._db.read(_read_usage))

    async def recount(self, names: list[str] | None = None, *, fresh_seconds: float = 0.0) -> None:
        """Recounts ``names`` (default: every namespace with a stored_bytes
        quota) unless another replica did within ``fresh_seconds``, then reads
        the usage."""
        if names is None:
            names = sorted(
                name
                for name in self._directory.active()
                if (row := self._directory.settings(name)) and row.quota_stored_bytes is not None
            )
        now = time.time_ns()
        fresh_after = now - round(fresh_seconds * 1e9) if fresh_seconds > 0 else now + 1

        async def count(tx: Transaction) -> int:
            return await tx.recount_usage(names, now, fresh_after)

        await self._db.write(count)
        self._recounted_at = time.monotonic()
        self.quotas.set_usage(await self._db.read(_read_usage))


async def _read_usage(tx: Transaction) -> dict[str, tuple[int, Nanos]]:
    return await tx.namespace_usage()
