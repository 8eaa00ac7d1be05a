"""``/metrics`` after a known mix of calls: exact counts, codes, reasons, on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.app import (
    RunningServer,
    Telemetry,
    build_server,
    create_stores,
    open_database,
)
from runstore.server.config import ServerConfig
from runstore.server.metrics import Metrics, MetricsEndpoint
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests import postgres
from tests.chain_kinds import chain_kind
from tests.support import Store, outcome, run_start, ts, unique

__all__ = ["chain_kind"]  # autouse: every server's chain of both kinds

RUNTIME = "runstore.v1.RuntimeStore"
ADMIN = "runstore.v1.SessionAdmin"


@dataclass
class Scrape:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """The sum over every series of ``name`` that has ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)

    def names(self, name: str) -> list[frozenset[tuple[str, str]]]:
        return [ls for (n, ls) in self.samples if n == name]


def scrape(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(samples)


async def settled_scrape(port: int) -> Scrape:
    """A scrape once every call the server started has been counted as handled.

    grpc.aio sends an aborted call's status from inside ``context.abort``, before
    the exception unwinds through the chain that counts it: a caller can hold
    its answer a moment before ``/metrics`` does. Bounded: 10 s at most.
    """
    figures = await asyncio.to_thread(scrape, port)
    for _ in range(1000):
        started = figures.total("grpc_server_started_total")
        if started == figures.total("grpc_server_handled_total"):
            return figures
        await asyncio.sleep(0.01)
        figures = await asyncio.to_thread(scrape, port)
    raise AssertionError(f"calls still unaccounted for after 10 s: {figures.samples}")


@asynccontextmanager
async def measured_server(
    database_url: str, running_out: list[RunningServer] | None = None
) -> AsyncIterator[tuple[Store, int]]:
    """A server with metrics on, its own registry and ``/metrics`` on an
    ephemeral port (the server itself appended to ``running_out``)."""
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        migrate=True,
        metrics_listen="127.0.0.1:0",
        # The health monitor's probes are writer transactions too: kept out of
        # the counted window so the exact figures below are the calls' own
        # (and so are the quota keeper's heartbeats and retention's passes:
        # neither runs below).
        health_probe_interval=3600.0,
    )
    telemetry = Telemetry(metrics=Metrics("9.9.9-test"))
    assert telemetry.metrics is not None
    endpoint = MetricsEndpoint(telemetry.metrics, "127.0.0.1:0")
    async with AsyncExitStack() as stack:
        stack.callback(endpoint.close)
        db = await stack.enter_async_context(open_database(config, telemetry))
        stores = dataclasses.replace(create_stores(config, db), quotas=None, retention=None)
        running = await build_server(config, stores, telemetry=telemetry)
        stack.push_async_callback(running.server.stop, None)
        if running_out is not None:
            running_out.append(running)
        target = f"127.0.0.1:{running.port}"
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        yield Store(channel, target=target), endpoint.port


async def test_a_known_mix_of_calls_is_counted_exactly(database_url: str) -> None:
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    async with measured_server(database_url) as (store, port):
        session_id = await store.session()  # CreateSession OK (1 write)
        run = run_start(session_id=session_id)
        await store.runtime.StartRootRun(run.root_request())  # OK, appends "started"
        appends = [rs.AppendRunRecordRequest(record=run.record(f"k{i}")) for i in range(3)]
        for request in appends:
            await store.runtime.AppendRunRecord(request)  # OK, 3 records
        assert await outcome(store.runtime.AppendRunRecord(appends[0])) == "ok"  # exact retry
        for _ in range(2):
            missing = rs.LoadRunRequest(run_id=unique("missing"))
            assert await outcome(store.runtime.LoadRun(missing)) == "RUN_NOT_FOUND"
        bad = sa.CreateSessionRequest(session_id="", created_at=ts(1))
        assert await outcome(store.admin.CreateSession(bad)) == "CONTRACT_VALIDATION"
        purged = await store.session()  # CreateSession OK
        await store.end(purged)  # EndSession OK
        await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=purged))

        # A server stream the caller leaves after its first message: Canceled.
        health = health_pb2_grpc.HealthStub(store.channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        first = await watch.read()
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        figures = await settled_scrape(port)  # the server notices the cancellation on its own

    def handled(service: str, method: str, code: str) -> float:
        return figures.value(
            "grpc_server_handled_total",
            grpc_service=service,
            grpc_method=method,
            grpc_type="unary",
            grpc_code=code,
        )

    def started(service: str, method: str) -> float:
        return figures.value(
            "grpc_server_started_total", grpc_service=service, grpc_method=method, grpc_type="unary"
        )

    assert started(ADMIN, "CreateSession") == 3
    assert handled(ADMIN, "CreateSession", "OK") == 2
    assert handled(ADMIN, "CreateSession", "InvalidArgument") == 1
    assert started(RUNTIME, "StartRootRun") == 1
    assert handled(RUNTIME, "StartRootRun", "OK") == 1
    assert handled(RUNTIME, "AppendRunRecord", "OK") == 4
    assert started(RUNTIME, "LoadRun") == 2
    assert handled(RUNTIME, "LoadRun", "NotFound") == 2
    assert handled(ADMIN, "EndSession", "OK") == 1
    assert handled(ADMIN, "PurgeSession", "OK") == 1
    # Every handled code of these methods is accounted for above.
    assert figures.total("grpc_server_handled_total", grpc_service=RUNTIME) == 7
    assert figures.total("grpc_server_handled_total", grpc_service=ADMIN) == 5
    assert (
        figures.value(
            "grpc_server_handled_total",
            grpc_service="grpc.health.v1.Health",
            grpc_method="Watch",
            grpc_type="server_stream",
            grpc_code="Canceled",
        )
        == 1
    )
    # Health's Watch writes its messages with context.write: each is counted.
    health_sent = figures.value(
        "grpc_server_msg_sent_total",
        grpc_service="grpc.health.v1.Health",
        grpc_method="Watch",
        grpc_type="server_stream",
    )
    assert health_sent >= 1

    labels = {"grpc_service": RUNTIME, "grpc_method": "AppendRunRecord", "grpc_type": "unary"}
    assert figures.value("grpc_server_handling_seconds_count", **labels) == 4
    assert figures.value("grpc_server_handling_seconds_bucket", **labels, le="+Inf") == 4
    assert figures.value("grpc_server_handling_seconds_sum", **labels) > 0

    errors = {"namespace": "default"}
    assert figures.value("runstore_errors_total", **errors, reason="RUN_NOT_FOUND") == 2
    assert figures.value("runstore_errors_total", **errors, reason="CONTRACT_VALIDATION") == 1
    # The cancelled stream carries no ErrorInfo; health acts in no namespace.
    assert figures.value("runstore_errors_total", namespace="", reason="NONE") == 1
    assert figures.total("runstore_errors_total") == 4
    assert figures.total("runstore_calls_in_flight") == 0
    # Every call once in runstore_calls_total, by namespace and code.
    assert figures.total("runstore_calls_total") == figures.total("grpc_server_handled_total")
    calls = {"namespace": "default", "grpc_service": RUNTIME}
    assert (
        figures.value("runstore_calls_total", **calls, grpc_method="LoadRun", grpc_code="NotFound")
        == 2
    )
    assert (
        figures.value(
            "runstore_calls_total", **calls, grpc_method="AppendRunRecord", grpc_code="OK"
        )
        == 4
    )
    health = {"grpc_service": "grpc.health.v1.Health", "grpc_method": "Watch"}
    assert figures.value("runstore_calls_total", namespace="", **health, grpc_code="Canceled") == 1

    # 1 started record + 3 appends; the exact retry appended nothing.
    assert figures.value("runstore_records_appended_total", namespace="default") == 4
    assert figures.value("runstore_sessions_purged_total") == 1
    assert figures.value("runstore_build_info", version="9.9.9-test") == 1

    writes = figures.value("runstore_db_transaction_seconds_count", backend=backend, kind="write")
    appends_fast = figures.value(
        "runstore_db_transaction_seconds_count", backend=backend, kind="append"
    )
    reads = figures.value("runstore_db_transaction_seconds_count", backend=backend, kind="read")
    # CreateSession ×2 (the bad one is refused before the database), StartRootRun,
    # EndSession, PurgeSession: writes; the appends take the one-statement path
    # (the retry falls back to a write); LoadRun ×2: reads.
    assert appends_fast == 4
    assert writes == 6
    assert reads == 2
    assert figures.total("runstore_db_retries_total") == 0
    if backend == "sqlite":
        batches = figures.value("runstore_sqlite_batch_size_count")
        assert 1 <= batches <= writes + appends_fast
        assert figures.value("runstore_sqlite_batch_size_sum") == writes + appends_fast
        assert figures.value("runstore_sqlite_sync_seconds_count") >= 1
    else:
        idle = figures.value("runstore_pg_pool_connections", state="idle")
        in_use = figures.value("runstore_pg_pool_connections", state="in_use")
        assert idle >= 1
        assert in_use == 0


async def test_the_lifecycle_fast_paths_count_what_the_full_rules_counted(
    database_url: str,
) -> None:
    """Each lifecycle call's common case, now one write of its own
    (``core.fast_paths``), is still one write transaction and counts every
    record it stores, the link on a parent included."""
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    async with measured_server(database_url) as (store, port):
        root = await store.root()  # CreateSession, StartRootRun: 2 writes, 1 record
        child = run_start(session_id=root.start.session_id, parent_run_id=root.id, agent_id="child")
        await store.runtime.StartChildRun(child.child_request(root.start.agent_id))  # 2
        await store.runtime.RecordRunCancellation(root.cancellation_request())  # 1
        await store.runtime.RecordRunSuspension(child.suspension_request())  # 1
        one_shot = await store.one_shot()  # 1
        one_shot_child = run_start(parent_run_id=one_shot.id, agent_id="child")
        await store.runtime.StartOneShotChildRun(
            one_shot_child.one_shot_child_request(one_shot.start.agent_id)
        )  # 2
        figures = await settled_scrape(port)

    assert figures.value("runstore_records_appended_total", namespace="default") == 8
    transactions = {
        kind: figures.value("runstore_db_transaction_seconds_count", backend=backend, kind=kind)
        for kind in ("write", "append", "read")
    }
    assert transactions == {"write": 7, "append": 0, "read": 0}
    assert figures.total("runstore_db_retries_total") == 0


@pytest.mark.postgres
async def test_lost_races_on_postgres_are_counted_as_retries() -> None:
    """PostgreSQL only: SQLite has one writer and never retries."""
    async with postgres.fresh_database() as url, measured_server(url) as (store, port):
        # Many replicas' worth of racers on one new session: the losers' unique
        # violations are retried (and then see the winner's row).
        for _ in range(5):
            session_id = unique("race")
            request = sa.CreateSessionRequest(session_id=session_id, created_at=ts(1000))
            results = await asyncio.gather(
                *(outcome(store.admin.CreateSession(request)) for _ in range(16))
            )
            assert set(results) == {"ok"}
        figures = await settled_scrape(port)
    assert figures.value("runstore_db_retries_total", backend="postgres") >= 1


async def test_a_batch_is_one_call_and_counts_each_record(database_url: str) -> None:
    async with measured_server(database_url) as (store, port):
        run = await store.root()  # 1 record: run_started
        batch = rs.AppendRunRecordsRequest(records=[run.record(f"k{i}") for i in range(4)])
        await store.runtime.AppendRunRecords(batch)  # the one-statement path: 4 records
        await store.runtime.AppendRunRecords(batch)  # exact retry: nothing appended
        changed = rs.AppendRunRecordsRequest(
            records=[run.record("k9"), run.record("k0", payload=b'{"other":1}')]
        )
        assert await outcome(store.runtime.AppendRunRecords(changed)) == "EVENT_CONFLICT"
        figures = await settled_scrape(port)

    labels = {"grpc_service": RUNTIME, "grpc_method": "AppendRunRecords", "grpc_type": "unary"}
    assert figures.value("grpc_server_handled_total", **labels, grpc_code="OK") == 2
    assert figures.value("grpc_server_handled_total", **labels, grpc_code="AlreadyExists") == 1
    conflicts = figures.value("runstore_errors_total", namespace="default", reason="EVENT_CONFLICT")
    assert conflicts == 1
    assert figures.value("runstore_records_appended_total", namespace="default") == 5


async def test_messages_are_counted_one_by_one_on_streams_too(database_url: str) -> None:
    """go-grpc-prometheus's ``grpc_server_msg_received_total`` and
    ``grpc_server_msg_sent_total``: one per request and per response message,
    each message of a stream counted, so stream panels are not empty."""
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with measured_server(database_url) as (store, port):
        run = await store.root()
        for key in ("a", "b"):
            await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record(key)))
        await store.runtime.RecordRunTerminal(run.terminal_request())
        missing = rs.LoadRunRequest(run_id=unique("missing"))
        assert await outcome(store.runtime.LoadRun(missing)) == "RUN_NOT_FOUND"

        # A finished run's watch sends its backlog and ends: every message read.
        watch = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=run.id))
        watched = 0
        while await watch.read() is not grpc.aio.EOF:
            watched += 1
        assert await watch.code() == grpc.StatusCode.OK

        # A bidi stream: three requests, three answers.
        reflection = reflection_pb2_grpc.ServerReflectionStub(store.channel)
        asks = [reflection_pb2.ServerReflectionRequest(list_services="") for _ in range(3)]
        answers = [answer async for answer in reflection.ServerReflectionInfo(iter(asks))]
        assert len(answers) == 3
        figures = await settled_scrape(port)

    def messages(direction: str, method: str, kind: str, service: str = RUNTIME) -> float:
        return figures.value(
            f"grpc_server_msg_{direction}_total",
            grpc_service=service,
            grpc_method=method,
            grpc_type=kind,
        )

    assert messages("received", "AppendRunRecord", "unary") == 2
    assert messages("sent", "AppendRunRecord", "unary") == 2
    # A failed unary call received its request and sent no message.
    assert messages("received", "LoadRun", "unary") == 1
    assert messages("sent", "LoadRun", "unary") == 0
    assert watched >= 1
    assert messages("received", "WatchRunRecords", "server_stream") == 1
    assert messages("sent", "WatchRunRecords", "server_stream") == watched
    reflection_service = "grpc.reflection.v1alpha.ServerReflection"
    for direction in ("received", "sent"):
        assert messages(direction, "ServerReflectionInfo", "bidi_stream", reflection_service) == 3


NAMESPACED = ("runstore_calls_total", "runstore_errors_total", "runstore_calls_in_flight")


async def test_calls_count_in_their_namespace_and_a_purged_one_leaves_no_series(
    database_url: str,
) -> None:
    """``namespace`` on the runstore_* call metrics and records appended: a
    call in team-a counts there; one refused for an unknown namespace, and
    NamespaceAdmin's (acting in none), under ""; once team-a's purge has
    finished, none of its series is left (the label stays bounded)."""
    name = unique("team-a")
    running: list[RunningServer] = []
    async with measured_server(database_url, running) as (store, port):
        await store.namespaces.CreateNamespace(
            na.CreateNamespaceRequest(namespace=na.Namespace(name=name))
        )
        in_team = ((NAMESPACE_KEY, name),)
        session_id = unique("session")
        create = sa.CreateSessionRequest(session_id=session_id, created_at=ts(1))
        await store.admin.CreateSession(create, metadata=in_team)
        run = run_start(session_id=session_id)
        await store.runtime.StartRootRun(run.root_request(), metadata=in_team)
        append = rs.AppendRunRecordRequest(record=run.record("k"))
        await store.runtime.AppendRunRecord(append, metadata=in_team)
        missing = rs.LoadRunRequest(run_id=unique("missing"))
        assert await outcome(store.runtime.LoadRun(missing, metadata=in_team)) == "RUN_NOT_FOUND"
        nowhere = ((NAMESPACE_KEY, unique("nowhere")),)
        refused = store.admin.CreateSession(create, metadata=nowhere)
        assert await outcome(refused) == "NAMESPACE_NOT_FOUND"
        during = await settled_scrape(port)

        await store.namespaces.DeleteNamespace(na.DeleteNamespaceRequest(name=name))
        namespaces = running[0].namespaces
        assert namespaces is not None
        await asyncio.wait_for(namespaces.wait_purged(name), timeout=60)
        after = await settled_scrape(port)

    def calls(figures: Scrape, namespace: str, service: str, method: str, code: str) -> float:
        return figures.value(
            "runstore_calls_total",
            namespace=namespace,
            grpc_service=service,
            grpc_method=method,
            grpc_code=code,
        )

    assert calls(during, name, ADMIN, "CreateSession", "OK") == 1
    assert calls(during, name, RUNTIME, "StartRootRun", "OK") == 1
    assert calls(during, name, RUNTIME, "AppendRunRecord", "OK") == 1
    assert calls(during, name, RUNTIME, "LoadRun", "NotFound") == 1
    assert during.value("runstore_errors_total", namespace=name, reason="RUN_NOT_FOUND") == 1
    assert during.value("runstore_records_appended_total", namespace=name) == 2
    assert during.value("runstore_calls_in_flight", namespace=name) == 0
    # Refused before a namespace was decided: "", never the header's value.
    assert calls(during, "", ADMIN, "CreateSession", "NotFound") == 1
    assert during.value("runstore_errors_total", namespace="", reason="NAMESPACE_NOT_FOUND") == 1
    values = {dict(labels)["namespace"] for metric in NAMESPACED for labels in during.names(metric)}
    assert values <= {"", "default", name}
    namespace_admin = "runstore.v1.NamespaceAdmin"
    assert calls(during, "", namespace_admin, "CreateNamespace", "OK") == 1
    assert during.total("runstore_calls_total", grpc_service=namespace_admin) == 1
    # The go-grpc-prometheus series keep their own labels, without a namespace.
    assert all(
        "namespace" not in dict(labels) for labels in during.names("grpc_server_handled_total")
    )

    for metric in (*NAMESPACED, "runstore_records_appended_total"):
        assert during.names(metric)
        assert all(dict(labels)["namespace"] != name for labels in after.names(metric)), metric
    assert calls(after, "", namespace_admin, "DeleteNamespace", "OK") == 1
