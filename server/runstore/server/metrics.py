"""Prometheus metrics: the calls (go-grpc-prometheus names) and runstore's own.

Off by default. With ``--metrics-listen HOST:PORT`` one ``Metrics`` is made for
the process and served as Prometheus text at ``/metrics``. Per-call figures are
recorded by the call interceptor (``interceptors.calls``), database figures by
the database layer through ``DbFigures`` (``db.measured`` and the backends).
When metrics are off nothing of this module is on the path of a call: no
object exists to record into, and the backends skip their timers.

Names and label values follow go-grpc-prometheus, so existing gRPC dashboards
work unchanged: ``grpc_type`` is ``unary``, ``server_stream``, ``client_stream``
or ``bidi_stream`` and ``grpc_code`` is spelled as Go spells ``codes.Code``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final
from wsgiref.simple_server import WSGIServer

import grpc
import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from runstore.server import call_scope

SECONDS_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Histogram buckets of call and transaction seconds: runstore answers in
well under a millisecond to seconds, so the low end is finer than Go's default."""

BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128)
"""Histogram buckets of SQLite group-commit batch sizes (at most 64 by default)."""

GO_CODE_NAMES: Final = {
    grpc.StatusCode.OK: "OK",
    grpc.StatusCode.CANCELLED: "Canceled",
    grpc.StatusCode.UNKNOWN: "Unknown",
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.DEADLINE_EXCEEDED: "DeadlineExceeded",
    grpc.StatusCode.NOT_FOUND: "NotFound",
    grpc.StatusCode.ALREADY_EXISTS: "AlreadyExists",
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "ResourceExhausted",
    grpc.StatusCode.FAILED_PRECONDITION: "FailedPrecondition",
    grpc.StatusCode.ABORTED: "Aborted",
    grpc.StatusCode.OUT_OF_RANGE: "OutOfRange",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
    grpc.StatusCode.INTERNAL: "Internal",
    grpc.StatusCode.UNAVAILABLE: "Unavailable",
    grpc.StatusCode.DATA_LOSS: "DataLoss",
    grpc.StatusCode.UNAUTHENTICATED: "Unauthenticated",
}
"""Each gRPC code as Go's ``codes.Code.String()`` spells it (``Canceled``, one l)."""

# Series Go's client does not have; dashboards built for go-grpc-prometheus do
# not expect them.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def grpc_type(request_streaming: bool, response_streaming: bool) -> str:
    """go-grpc-prometheus's ``grpc_type`` of a method."""
    if request_streaming:
        return "bidi_stream" if response_streaming else "client_stream"
    return "server_stream" if response_streaming else "unary"


@dataclass(frozen=True, slots=True)
class MethodFigures:
    """The label children of one method, made once and reused by every call."""

    service: str
    method: str
    type: str
    started: Counter
    handling: Histogram
    received: Counter
    """``grpc_server_msg_received_total``: every request message, streamed ones each."""
    sent: Counter
    """``grpc_server_msg_sent_total``: every response message, streamed ones each."""
    _metrics: Metrics
    _handled: dict[grpc.StatusCode, Counter] = field(default_factory=dict)
    _calls: dict[tuple[grpc.StatusCode, str], Counter] = field(default_factory=dict)

    def handled(self, code: grpc.StatusCode) -> Counter:
        """The ``grpc_server_handled_total`` child of ``code``, looked up once per code."""
        child = self._handled.get(code)
        if child is None:
            child = self._metrics.handled.labels(
                self.service, self.method, self.type, GO_CODE_NAMES.get(code, "Unknown")
            )
            self._handled[code] = child
        return child

    def calls(self, code: grpc.StatusCode, namespace: str) -> Counter:
        """The ``runstore_calls_total`` child of ``code`` in ``namespace`` (a
        resolved namespace, or ""), looked up once per pair."""
        child = self._calls.get((code, namespace))
        if child is None:
            child = self._metrics.calls.labels(
                namespace, self.service, self.method, GO_CODE_NAMES.get(code, "Unknown")
            )
            self._calls[code, namespace] = child
        return child

    def errors_in(self, namespace: str, reason: str) -> Counter:
        """The ``runstore_errors_total`` child of ``reason`` in ``namespace``."""
        return self._metrics.errors_in(namespace, reason)

    def forget(self, namespace: str) -> None:
        """Drops this method's children of ``namespace`` (purged)."""
        for code, name in [key for key in self._calls if key[1] == namespace]:
            del self._calls[code, name]
            _remove(
                self._metrics.calls,
                namespace,
                self.service,
                self.method,
                GO_CODE_NAMES.get(code, "Unknown"),
            )


class _InFlight(dict[str, int]):
    """Counts by namespace; the first count of a namespace makes its gauge child."""

    def __init__(self, gauge: Gauge) -> None:
        super().__init__()
        self._gauge = gauge

    def __missing__(self, namespace: str) -> int:
        self[namespace] = 0
        self._gauge.labels(namespace).set_function(lambda: self.get(namespace, 0))
        return 0


def _remove(metric: Counter | Gauge, *labels: str) -> None:
    """``metric``'s child of ``labels`` removed, if it exists."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


class Metrics:
    """Every collector of one server process, in a registry of its own."""

    def __init__(self, version: str) -> None:
        self.registry = CollectorRegistry()
        call_labels = ("grpc_service", "grpc_method", "grpc_type")
        self.started = Counter(
            "grpc_server_started_total",
            "Total number of RPCs started on the server.",
            call_labels,
            registry=self.registry,
        )
        self.handled = Counter(
            "grpc_server_handled_total",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            (*call_labels, "grpc_code"),
            registry=self.registry,
        )
        self.msg_received = Counter(
            "grpc_server_msg_received_total",
            "Total number of RPC stream messages received on the server.",
            call_labels,
            registry=self.registry,
        )
        self.msg_sent = Counter(
            "grpc_server_msg_sent_total",
            "Total number of gRPC stream messages sent by the server.",
            call_labels,
            registry=self.registry,
        )
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level "
            "handled by the server.",
            call_labels,
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.calls = Counter(
            "runstore_calls_total",
            'Calls completed, by namespace ("" before one is decided, and for '
            "services that act in none), method and gRPC code.",
            ("namespace", "grpc_service", "grpc_method", "grpc_code"),
            registry=self.registry,
        )
        self.errors = Counter(
            "runstore_errors_total",
            "Calls that failed, by namespace and the reason of their ErrorInfo.",
            ("namespace", "reason"),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "runstore_calls_in_flight",
            "Calls being served now, by namespace (counted once their namespace is decided).",
            ("namespace",),
            registry=self.registry,
        )
        self.transaction_seconds = Histogram(
            "runstore_db_transaction_seconds",
            "Database transactions (kind write, read or append), waiting for the "
            "database included.",
            ("backend", "kind"),
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.retries = Counter(
            "runstore_db_retries_total",
            "Transactions run again after a lost race (deadlock, serialisation "
            "failure, concurrent insert) or a connection that died before COMMIT.",
            ("backend",),
            registry=self.registry,
        )
        self.sqlite_batch_size = Histogram(
            "runstore_sqlite_batch_size",
            "Write transactions committed together by the SQLite writer (group commit).",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.sqlite_sync_seconds = Histogram(
            "runstore_sqlite_sync_seconds",
            "fdatasync of the SQLite WAL that makes committed batches durable.",
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.pg_pool_connections = Gauge(
            "runstore_pg_pool_connections",
            "PostgreSQL pool connections by state (idle, in_use).",
            ("state",),
            registry=self.registry,
        )
        self.replica_lag = Gauge(
            "runstore_replica_lag_seconds",
            "How far the read replica (--read-database-url) is behind: the age of its last "
            "replayed commit while WAL remains to replay, 0 when caught up, NaN when it does "
            "not answer.",
            registry=self.registry,
        )
        self.records_appended = Counter(
            "runstore_records_appended_total",
            "Run records committed (lifecycle records included; exact retries not), by namespace.",
            ("namespace",),
            registry=self.registry,
        )
        self.sessions_purged = Counter(
            "runstore_sessions_purged_total", "Sessions purged.", registry=self.registry
        )
        self.runs_purged = Counter(
            "runstore_runs_purged_total",
            "Sessionless runs deleted by retention (one-shot children included), on demand "
            "(PurgeSessionlessRuns) or by the retention task.",
            registry=self.registry,
        )
        self.contexts_purged = Counter(
            "runstore_contexts_purged_total",
            "Context keys deleted by the retention task (--retain-contexts).",
            registry=self.registry,
        )
        self.seed_attempts_expired = Counter(
            "runstore_seed_attempts_expired_total",
            "Seed attempts deleted unpublished or abandoned after --seed-attempt-ttl.",
            registry=self.registry,
        )
        self.retention_passes = Counter(
            "runstore_retention_passes_total",
            "Retention task passes by outcome: done, skipped (another replica held the "
            "retention lock) or failed.",
            ("outcome",),
            registry=self.registry,
        )
        self.retention_pass_seconds = Histogram(
            "runstore_retention_pass_seconds",
            "Duration of the retention task's passes that ran (done or failed).",
            buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0),
            registry=self.registry,
        )
        self.retention_last_success = Gauge(
            "runstore_retention_last_success_timestamp_seconds",
            "Unix time the last retention pass of this replica finished without error "
            "(alert when it falls behind: 0 until the first).",
            registry=self.registry,
        )
        self.quota_refusals = Counter(
            "runstore_quota_refusals_total",
            "Calls refused with QUOTA_EXCEEDED by this replica, by namespace and quota "
            "(writes_per_second, reads_per_second, watch_streams, stored_bytes); a deleted "
            "namespace's series are removed.",
            ("namespace", "quota"),
            registry=self.registry,
        )
        self.commit_stalled = Gauge(
            "runstore_database_commit_stalled",
            "1 while the database answers queries but this replica's heartbeat has not "
            "committed for --commit-stall-after (health NOT_SERVING), else 0.",
            registry=self.registry,
        )
        self.commit_stalls = Counter(
            "runstore_database_commit_stalls_total",
            "Commit stalls this replica has declared (see runstore_database_commit_stalled).",
            registry=self.registry,
        )
        self.build_info = Gauge(
            "runstore_build_info",
            "Always 1; the label says which runstore version serves.",
            ("version",),
            registry=self.registry,
        )
        self.build_info.labels(version).set(1)
        self._methods: dict[str, MethodFigures] = {}
        self._lock = threading.Lock()
        # Label children by namespace, made once: no labels() on a call's path.
        self.calls_in_flight: dict[str, int] = _InFlight(self.in_flight)
        """Calls in flight by namespace: plain ints (a call changes one without a
        lock; only the event loop writes them), read by the gauge at scrape time."""
        self._errors: dict[tuple[str, str], Counter] = {}
        self._appended: dict[str, Counter] = {}

    def errors_in(self, namespace: str, reason: str) -> Counter:
        """The ``runstore_errors_total`` child of ``reason`` in ``namespace``."""
        child = self._errors.get((namespace, reason))
        if child is None:
            child = self._errors[namespace, reason] = self.errors.labels(namespace, reason)
        return child

    def appended_in(self, namespace: str) -> Counter:
        """The ``runstore_records_appended_total`` child of ``namespace``."""
        child = self._appended.get(namespace)
        if child is None:
            child = self._appended[namespace] = self.records_appended.labels(namespace)
        return child

    def forget_namespace(self, namespace: str) -> None:
        """Removes every series of ``namespace``, once its purge has finished:
        the label's values stay bounded by the namespaces that exist."""
        if namespace in self.calls_in_flight:
            del self.calls_in_flight[namespace]
            _remove(self.in_flight, namespace)
        for name, reason in [key for key in self._errors if key[0] == namespace]:
            del self._errors[name, reason]
            _remove(self.errors, namespace, reason)
        if namespace in self._appended:
            del self._appended[namespace]
            _remove(self.records_appended, namespace)
        for figures in list(self._methods.values()):
            figures.forget(namespace)

    def method(self, full_method: str, type: str) -> MethodFigures:
        """The figures of ``/package.Service/Method``."""
        figures = self._methods.get(full_method)
        if figures is None:
            service, _, method = full_method.lstrip("/").rpartition("/")
            with self._lock:
                figures = MethodFigures(
                    service,
                    method,
                    type,
                    self.started.labels(service, method, type),
                    self.handling.labels(service, method, type),
                    self.msg_received.labels(service, method, type),
                    self.msg_sent.labels(service, method, type),
                    self,
                )
                self._methods[full_method] = figures
        return figures

    def for_backend(self, backend: str) -> DbFigures:
        return DbFigures(self, backend)

    def scrape(self) -> str:
        """The text a scrape of ``/metrics`` returns."""
        return prometheus_client.generate_latest(self.registry).decode()


class DbFigures:
    """What the database layer records, with its backend's labels bound once."""

    def __init__(self, metrics: Metrics, backend: str) -> None:
        self.backend = backend
        self._transactions = {
            kind: metrics.transaction_seconds.labels(backend, kind)
            for kind in ("write", "read", "append")
        }
        self._retries = metrics.retries.labels(backend)
        self._batch = metrics.sqlite_batch_size
        self._sync = metrics.sqlite_sync_seconds
        self._appended_in = metrics.appended_in
        self._purged = metrics.sessions_purged
        self._runs_purged = metrics.runs_purged
        self._contexts_purged = metrics.contexts_purged
        self._pool = metrics.pg_pool_connections
        self._replica_lag = metrics.replica_lag

    def transaction(self, kind: str, seconds: float) -> None:
        self._transactions[kind].observe(seconds)

    def retried(self) -> None:
        self._retries.inc()

    def sqlite_batch(self, size: int) -> None:
        self._batch.observe(size)

    def sqlite_sync(self, seconds: float) -> None:
        self._sync.observe(seconds)

    def committed(
        self,
        records_appended: int,
        sessions_purged: int,
        runs_purged: int = 0,
        contexts_purged: int = 0,
    ) -> None:
        if records_appended:
            # Counted in the task of the call (or purge) that awaited the commit,
            # whichever task ran the group it committed in.
            self._appended_in(call_scope.namespace()).inc(records_appended)
        if sessions_purged:
            self._purged.inc(sessions_purged)
        if runs_purged:
            self._runs_purged.inc(runs_purged)
        if contexts_purged:
            self._contexts_purged.inc(contexts_purged)

    def replica_lag(self, seconds: float) -> None:
        self._replica_lag.set(seconds)

    def watch_pool(self, idle: Callable[[], int], in_use: Callable[[], int]) -> None:
        """Pool gauges read at scrape time (nothing is recorded per call)."""
        self._pool.labels("idle").set_function(idle)
        self._pool.labels("in_use").set_function(in_use)


class MetricsEndpoint:
    """``/metrics`` over HTTP on its own thread (prometheus-client's server)."""

    def __init__(self, metrics: Metrics, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        self._server: WSGIServer
        self._server, self._thread = prometheus_client.start_http_server(
            int(port), addr=host.strip("[]"), registry=metrics.registry
        )

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
