"""Quotas per namespace: the rules, and how each replica enforces its share
(docs/namespaces.md#quotas).

A namespace's quotas (``Namespace.quota_*``, set with NamespaceAdmin) are
enforced whenever they are set, right after the call's namespace is decided
and before its request is parsed, from state in this process only: a refusal
costs no database work and never touches another namespace's state.

* ``writes_per_second`` and ``reads_per_second``: a token bucket per
  namespace and kind on each replica, at the quota divided by the replicas
  alive (burst: one second of that share, at least one call). Which method is
  which is ``METHODS``.
* ``watch_streams``: the Watch streams open in the namespace on this replica
  (counted while open, released however the stream ends) plus the counts the
  other replicas last published.
* ``stored_bytes``: the last measurement (``namespace_usage``, recounted by one
  replica at a time) plus what this replica itself committed since; only the
  methods that add data are refused (``Rule.adds_data``).

The replicas alive and the others' stream counts come from ``quota_replicas``,
the heartbeat rows each replica upserts for itself (``QuotaKeeper``, every
``REFRESH_SECONDS``, with the directory's refresh). Nothing here is written on
the path of a call: there is no counter row for a namespace's appends to
queue on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from runstore.contract.errors import QuotaExceededError
from runstore.server.core.model import Nanos
from runstore.server.core.namespace_model import Namespace
from runstore.server.core.namespaces import REFRESH_SECONDS, NamespaceDirectory, namespace_deleted
from runstore.server.core.ports import Database, Transaction
from runstore.server.stream_ending import EndableStream

log = logging.getLogger(__name__)

WRITE: Final = "write"
READ: Final = "read"
WATCH: Final = "watch"

WRITES_PER_SECOND: Final = "writes_per_second"
READS_PER_SECOND: Final = "reads_per_second"
WATCH_STREAMS: Final = "watch_streams"
STORED_BYTES: Final = "stored_bytes"

RECOUNT_SECONDS: Final = 30.0
"""Default of ``--quota-recount-seconds``: how often the stored bytes of the
namespaces with a stored_bytes quota are recounted (by one replica)."""

ALIVE_BEATS: Final = 3
"""A replica whose heartbeat row has not changed for this many heartbeat
intervals (on the reader's own clock) no longer shares the rate quotas."""

QUEUE_SECONDS: Final = 5.0
"""How far ahead a rate refusal may tell a caller to come back (callers
refused together are spread one token apart, up to this)."""

SLICE_NS: Final = 10_000_000
"""This replica's own commits of data are summed per 10 ms (``Quotas.committed``)."""

FORGET_SECONDS: Final = 600.0
"""Heartbeat rows older than this (by their writer's clock) are deleted: a
replica that stopped without removing its row."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What a method counts against: ``kind`` (write, read or watch), and
    whether it adds stored data (refused at the stored_bytes quota)."""

    kind: str
    adds_data: bool = False


_WRITE = Rule(WRITE)
_ADDS = Rule(WRITE, adds_data=True)
_READ = Rule(READ)
_WATCH = Rule(WATCH)

METHODS: Final[Mapping[str, Rule]] = {
    # RuntimeStore
    "/runstore.v1.RuntimeStore/LoadSessionStatus": _READ,
    "/runstore.v1.RuntimeStore/StartRootRun": _ADDS,
    "/runstore.v1.RuntimeStore/StartChildRun": _ADDS,
    "/runstore.v1.RuntimeStore/StartOneShotRun": _ADDS,
    "/runstore.v1.RuntimeStore/StartOneShotChildRun": _ADDS,
    "/runstore.v1.RuntimeStore/StartSynchronousRun": _ADDS,
    "/runstore.v1.RuntimeStore/AppendRunRecord": _ADDS,
    "/runstore.v1.RuntimeStore/AppendRunRecords": _ADDS,
    # Lifecycle changes that stop or end a run pass the stored_bytes quota,
    # so work in flight can finish (its checkpoint or outcome is bounded).
    "/runstore.v1.RuntimeStore/RecordRunCancellation": _WRITE,
    "/runstore.v1.RuntimeStore/RecordRunSuspension": _WRITE,
    "/runstore.v1.RuntimeStore/RecordRunTerminal": _WRITE,
    "/runstore.v1.RuntimeStore/RepairRunSuspension": _WRITE,
    "/runstore.v1.RuntimeStore/RepairRunTerminal": _WRITE,
    "/runstore.v1.RuntimeStore/LoadRun": _READ,
    "/runstore.v1.RuntimeStore/LoadRunSuspension": _READ,
    "/runstore.v1.RuntimeStore/ListRunRecords": _READ,
    "/runstore.v1.RuntimeStore/ListSessionRunRecords": _READ,
    "/runstore.v1.RuntimeStore/ListRunTranscriptRecords": _READ,
    # Seeds: uploads add data; publishing and settling only mark an attempt.
    "/runstore.v1.RuntimeStore/BeginRunSeed": _ADDS,
    "/runstore.v1.RuntimeStore/AppendRunSeed": _ADDS,
    "/runstore.v1.RuntimeStore/PublishRunSeed": _WRITE,
    "/runstore.v1.RuntimeStore/FindRunPreparation": _READ,
    "/runstore.v1.RuntimeStore/SettleRunPreparation": _WRITE,
    "/runstore.v1.RuntimeStore/ListRunPreparationRecords": _READ,
    "/runstore.v1.RuntimeStore/LoadRunSeed": _READ,
    "/runstore.v1.RuntimeStore/ListRunSeedRecords": _READ,
    "/runstore.v1.RuntimeStore/WatchSessionRunRecords": _WATCH,
    "/runstore.v1.RuntimeStore/WatchRunRecords": _WATCH,
    # SessionAdmin
    "/runstore.v1.SessionAdmin/CreateSession": _ADDS,
    "/runstore.v1.SessionAdmin/LoadSession": _READ,
    "/runstore.v1.SessionAdmin/EndSession": _WRITE,
    "/runstore.v1.SessionAdmin/PurgeSession": _WRITE,
    "/runstore.v1.SessionAdmin/ListRunsBySession": _READ,
    "/runstore.v1.SessionAdmin/ListSessions": _READ,
    "/runstore.v1.SessionAdmin/ListRuns": _READ,
    "/runstore.v1.SessionAdmin/PurgeEndedSessions": _WRITE,
    "/runstore.v1.SessionAdmin/PurgeSessionlessRuns": _WRITE,
    # MemoryStore
    "/runstore.v1.MemoryStore/LoadRun": _READ,
    "/runstore.v1.MemoryStore/AppendEvents": _ADDS,
    "/runstore.v1.MemoryStore/DeleteRun": _WRITE,
    # ContextStore
    "/runstore.v1.ContextStore/GetContext": _READ,
    "/runstore.v1.ContextStore/SaveContext": _ADDS,
    "/runstore.v1.ContextStore/DeleteContext": _WRITE,
    "/runstore.v1.ContextStore/AppendTranscript": _ADDS,
    "/runstore.v1.ContextStore/ListTranscript": _READ,
}
"""Every method of the namespaced services and what it counts against
(a test fails when a service gains a method missing here)."""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class TokenBucket:
    """``rate`` tokens a second, holding at most ``burst`` (one second of the
    rate, at least one); time is whatever clock the caller reads.

    A refusal says when to come back, and those refused together are told
    times one token apart (up to ``QUEUE_SECONDS`` ahead), not all the same
    instant: callers that honour it return spread out, about one per free
    token, instead of as a herd that is refused again."""

    __slots__ = ("at", "burst", "queued", "rate", "tokens")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        self.tokens = self.burst
        self.at = now
        self.queued = now
        """The time told to the last refused caller, plus one token's time."""

    def set_rate(self, rate: float, now: float) -> None:
        if rate == self.rate:
            return
        self._fill(now)
        self.rate = rate
        self.burst = max(1.0, rate)
        self.tokens = min(self.tokens, self.burst)

    def _fill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now

    def take(self, now: float) -> float:
        """0 when a token was taken; otherwise the seconds to wait before
        trying again (infinite at rate 0)."""
        self._fill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        if self.rate <= 0:
            return math.inf
        token = (1.0 - self.tokens) / self.rate
        wait = min(max(token, self.queued - now), max(token, QUEUE_SECONDS))
        self.queued = now + wait + 1.0 / self.rate
        return wait


class StreamLease(EndableStream):
    """One open Watch stream, counted against its namespace until ``close``;
    ``end`` stops it when its namespace is deleted."""

    __slots__ = ("_owner", "namespace")

    def __init__(self, owner: Quotas, namespace: str) -> None:
        super().__init__()
        self._owner = owner
        self.namespace = namespace

    def close(self) -> None:
        self._owner._release(self)


class Quotas:
    """The quota state of one replica: rate buckets, open streams, stored
    bytes, and what the heartbeat says of the other replicas.

    Args:
        directory: The active namespaces and their quotas.
        clock: Monotonic seconds for the buckets and the replicas' liveness
            (injectable: tests need no sleeps).
        wall: UTC nanoseconds, for when usage was measured.
    """

    def __init__(
        self,
        directory: NamespaceDirectory,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], Nanos] = time.time_ns,
    ) -> None:
        self._directory = directory
        self._clock = clock
        self._wall = wall
        self.replicas = 1
        """Replicas alive sharing the rate quotas (this one included)."""
        self.others_streams: dict[str, int] = {}
        """Watch streams the other replicas alive last published, per namespace."""
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._streams: dict[str, set[StreamLease]] = {}
        self._usage: dict[str, tuple[int, Nanos]] = {}
        self._committed: dict[str, dict[int, tuple[int, Nanos]]] = {}
        self.refusals: Any = None
        """``runstore_quota_refusals_total`` (a labelled Counter), when metrics are on."""
        directory.on_gone(self._gone)

    @staticmethod
    def rule(method: str) -> Rule | None:
        return METHODS.get(method)

    # --- On the path of a call ---------------------------------------------------

    def admit(self, rule: Rule, namespace: str, size: int) -> QuotaExceededError | None:
        """The refusal of a unary call of ``rule`` in ``namespace`` carrying a
        request of ``size`` bytes, or None (a rate token is then taken)."""
        row = self._directory.settings(namespace)
        if row is None:
            return None
        if rule.adds_data and row.quota_stored_bytes is not None:
            limit = row.quota_stored_bytes
            if self.stored_bytes(namespace) + size > limit:
                return self._refused(namespace, STORED_BYTES, limit, None)
        if rule.kind == WRITE:
            quota, rate = WRITES_PER_SECOND, row.quota_writes_per_s
        elif rule.kind == READ:
            quota, rate = READS_PER_SECOND, row.quota_reads_per_s
        else:
            return None
        if rate is None:
            return None
        share = rate / self.replicas
        now = self._clock()
        bucket = self._buckets.get((namespace, quota))
        if bucket is None:
            bucket = self._buckets[(namespace, quota)] = TokenBucket(share, now)
        else:
            bucket.set_rate(share, now)
        wait = bucket.take(now)
        if wait == 0.0:
            return None
        return self._refused(namespace, quota, rate, None if math.isinf(wait) else wait)

    def committed(self, namespace: str, size: int) -> None:
        """A call that adds data succeeded here: ``size`` bytes more until a
        measurement includes it (only for a namespace with a stored_bytes
        quota). Kept in slices of ``SLICE_NS``: the bytes and the last commit
        time of each, so memory stays bounded at any rate."""
        row = self._directory.settings(namespace)
        if row is None or row.quota_stored_bytes is None:
            return
        now = self._wall()
        slices = self._committed.setdefault(namespace, {})
        key = now // SLICE_NS
        bytes_so_far, _ = slices.get(key, (0, 0))
        slices[key] = (bytes_so_far + size, now)

    def stored_bytes(self, namespace: str) -> int:
        """The last measurement plus what this replica committed after it
        began (a slice with a commit after it counts whole: a commit may be
        counted twice until the next measurement, never missed)."""
        measured, at = self._usage.get(namespace, (0, 0))
        own = self._committed.get(namespace, {})
        return measured + sum(size for size, last in own.values() if last >= at)

    def measured(self, namespace: str) -> bool:
        return namespace in self._usage

    def open_stream(self, namespace: str) -> StreamLease | QuotaExceededError:
        """A lease for a new Watch stream in ``namespace``, or the refusal."""
        row = self._directory.settings(namespace)
        limit = None if row is None else row.quota_watch_streams
        own = self._streams.setdefault(namespace, set())
        if limit is not None and len(own) + self.others_streams.get(namespace, 0) >= limit:
            return self._refused(namespace, WATCH_STREAMS, limit, None)
        lease = StreamLease(self, namespace)
        own.add(lease)
        return lease

    def open_streams(self, namespace: str) -> int:
        return len(self._streams.get(namespace, ()))

    def _release(self, lease: StreamLease) -> None:
        own = self._streams.get(lease.namespace)
        if own is not None:
            own.discard(lease)

    def _refused(
        self, namespace: str, quota: str, limit: float, wait: float | None
    ) -> QuotaExceededError:
        if self.refusals is not None:
            self.refusals.labels(namespace, quota).inc()
        after = "" if wait is None else f"; retry in {wait:.3f}s"
        return QuotaExceededError(
            f"namespace {namespace!r} is at its {quota} quota ({_number(limit)}){after}",
            retry_delay=wait,
            details={"namespace": namespace, "quota": quota, "limit": _number(limit)},
        )

    def _gone(self, namespace: str) -> None:
        """The namespace was deleted: its open streams end with NOT_FOUND and
        its state (and metric series) go."""
        refusal = namespace_deleted(namespace)
        for lease in list(self._streams.pop(namespace, ())):
            lease.end(refusal)
        for quota in (WRITES_PER_SECOND, READS_PER_SECOND):
            self._buckets.pop((namespace, quota), None)
        self._usage.pop(namespace, None)
        self._committed.pop(namespace, None)
        if self.refusals is not None:
            for quota in (WRITES_PER_SECOND, READS_PER_SECOND, WATCH_STREAMS, STORED_BYTES):
                with contextlib.suppress(KeyError):
                    self.refusals.remove(namespace, quota)

    # --- What the keeper learns --------------------------------------------------

    def own_streams(self) -> dict[str, int]:
        return {name: len(leases) for name, leases in self._streams.items() if leases}

    def set_usage(self, usage: Mapping[str, tuple[int, Nanos]]) -> None:
        """A new read of ``namespace_usage``; the slices of what this replica
        committed wholly before each measurement began are forgotten."""
        self._usage = dict(usage)
        for namespace, slices in self._committed.items():
            at = self._usage.get(namespace, (0, 0))[1]
            for key in [key for key, (_, last) in slices.items() if last < at]:
                del slices[key]


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
        always: Beat whatever the quotas: the heartbeat is the health
            service's commit probe too (``health.Heartbeat``, ``committed_at``).
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
        always: bool = False,
    ) -> None:
        self.quotas = quotas
        self._directory = directory
        self._db = db
        self.interval = interval
        self.recount_seconds = recount_seconds
        self.replica_id = replica_id or replica_name()
        self._seen: dict[str, tuple[int, float]] = {}
        self._beating = False
        self._always = always
        self.committed_at = time.monotonic()
        """When the last heartbeat committed (``time.monotonic()``; first: now)."""
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
                if not failing:  # unless the database's state line said it
                    level = (
                        logging.DEBUG if getattr(exc, "cause_logged", False) else logging.WARNING
                    )
                    log.log(
                        level, "quota state not refreshed (again in %ss): %r", self.interval, exc
                    )
                failing = True
            await asyncio.sleep(self.interval)

    async def tick(self) -> None:
        """One round: the directory, the heartbeat, the stored bytes."""
        # Read unless a call's refresh just did: a namespace deleted elsewhere
        # ends its streams here within about one interval.
        if self._directory.stale(self.interval / 2):
            await self._directory.refresh()
        rows = [self._directory.settings(name) for name in self._directory.active()]
        if self._always or any(_rated(row) for row in rows) or self._beating:
            await self._heartbeat(self._always or any(_rated(row) for row in rows))
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
        now = self.committed_at = time.monotonic()
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
