"""Quotas per namespace: how each replica enforces its share
(docs/namespaces.md#quotas).

A namespace's quotas (``Namespace.quota_*``, set with NamespaceAdmin) are
enforced whenever they are set, right after the call's namespace is decided
and before its request is parsed, from state in this process only: a refusal
costs no database work and never touches another namespace's state.

* ``writes_per_second`` and ``reads_per_second``: a token bucket
  (``quota_bucket``) per namespace and kind on each replica, at the quota
  divided by the replicas alive (burst: one second of that share, at least
  one call). Which method is which is ``quota_rules``.
* ``watch_streams``: the Watch streams open in the namespace on this replica
  (counted while open, released however the stream ends) plus the counts the
  other replicas last published.
* ``stored_bytes``: the last measurement (``namespace_usage``, recounted by one
  replica at a time) plus what this replica itself committed since; only the
  methods that add data are refused (``Rule.adds_data``).

The replicas alive and the others' stream counts come from ``quota_replicas``,
the heartbeat rows each replica upserts for itself (``quota_keeper``, every
``REFRESH_SECONDS``, with the directory's refresh). Nothing here is written on
the path of a call: there is no counter row for a namespace's appends to
queue on. A deleted namespace's state goes with it; ending its open streams
is the namespace code's (``core.namespace_streams``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from runstore.contract.errors import QuotaExceededError
from runstore.server.core.model import Nanos
from runstore.server.core.namespaces import NamespaceDirectory
from runstore.server.core.quota_bucket import TokenBucket
from runstore.server.core.quota_rules import (
    READ,
    READS_PER_SECOND,
    STORED_BYTES,
    WATCH_STREAMS,
    WRITE,
    WRITES_PER_SECOND,
    Rule,
)

SLICE_NS: Final = 10_000_000
"""This replica's own commits of data are summed per 10 ms (``Quotas.committed``)."""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class StreamLease:
    """One open Watch stream, counted against its namespace until ``close``."""

    __slots__ = ("_owner", "namespace")

    def __init__(self, owner: Quotas, namespace: str) -> None:
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
        """The namespace was deleted: its state (and metric series) go (its
        open streams are ended by ``core.namespace_streams``)."""
        self._streams.pop(namespace, None)
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
