"""Quotas per namespace (docs/namespaces.md#quotas), through in-process
servers on both backends: each quota refuses at its limit with its ErrorInfo
(and RetryInfo for the rates) and recovers; one namespace's quotas never
refuse another's calls; two replicas over one PostgreSQL database share a rate
and the Watch-stream cap; a deleted namespace's open Watch streams end with
NAMESPACE_NOT_FOUND, on the deleting replica and on another one. The rate
buckets run on an injected clock: no test sleeps for tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.client import (
    QuotaExceededError,
    RemoteNamespaceAdmin,
    RemoteSessionAdmin,
    RemoteStore,
    RetryClock,
)
from runstore.client.retry import NO_RETRY, RetryPolicy, call_with_retry, is_retryable
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.app import Telemetry
from runstore.server.carried_calls import CARRIED_METHOD
from runstore.server.core.namespaces import REFRESH_SECONDS, NamespaceDirectory, NamespaceStore
from runstore.server.core.quota_bucket import QUEUE_SECONDS, TokenBucket
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.quota_rules import METHODS
from runstore.server.core.quotas import Quotas
from runstore.server.db import migrate
from runstore.server.metrics import Metrics
from runstore.v1 import (
    context_store_pb2,
    memory_store_pb2,
    runtime_store_pb2,
    session_admin_pb2,
)
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from tests import backends, postgres
from tests.seeds import Upload, declaration
from tests.support import (
    Failure,
    Store,
    fails,
    failure_of,
    now_ms,
    run_start,
    started_record,
    ts,
    unique,
    until,
)

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


class FakeClock:
    """Monotonic seconds that move only when a test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Replica:
    store: Store
    target: str
    keeper: QuotaKeeper
    namespaces: NamespaceStore
    clock: FakeClock
    metrics: Metrics
    database_url: str

    @property
    def quotas(self) -> Quotas:
        return self.keeper.quotas

    def md(self, namespace: str) -> tuple[tuple[str, str], ...]:
        return ((NAMESPACE_KEY, namespace),)


@dataclass
class Cluster:
    url: str
    stack: AsyncExitStack
    replicas: list[Replica] = field(default_factory=list)

    async def replica(self) -> Replica:
        return await _replica(self.stack, self.url)


async def _replica(stack: AsyncExitStack, url: str, *, live: bool = False) -> Replica:
    """A server whose quota state runs on a fake clock; its keeper ticks only
    when the test says (its loop's next round is an hour away). ``live``: the
    server's own clock and keeper, as ``runstore serve`` runs them."""
    clock = FakeClock()

    def on_the_fake_clock(stores: Any, db: Any) -> Any:
        if live:
            assert stores.namespaces is not None and stores.quotas is not None
            return stores
        directory = NamespaceDirectory(db.backend, clock=clock)
        quotas = Quotas(directory, clock=clock, refusals=metrics.quota_refusals)
        keeper = QuotaKeeper(quotas, directory, db.backend, interval=3600)
        namespaces = NamespaceStore(db.calls, directory, purged=metrics.forget_namespace)
        return dataclasses.replace(stores, namespaces=namespaces, quotas=keeper)

    metrics = Metrics("test")
    # Watch streams re-read their cursor rarely: a stream ends because its
    # namespace went, not because a poll found its run purged.
    server = await stack.enter_async_context(
        backends.served(
            url,
            stores=on_the_fake_clock,
            telemetry=Telemetry(metrics=metrics),
            watch_poll_seconds=600,
        )
    )
    keeper, namespaces = server.stores.quotas, server.stores.namespaces
    return Replica(
        server.store, server.target, keeper, namespaces, clock, metrics, server.database_url
    )


@pytest.fixture(scope="module", params=backends.BACKENDS)
async def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(
            backends.database(request.param, tmp_path_factory.mktemp("quotas"))
        )
        served = Cluster(url, stack)
        served.replicas.append(await served.replica())
        yield served


@pytest.fixture
def one(cluster: Cluster) -> Replica:
    return cluster.replicas[0]


@pytest.fixture(scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[Replica]]:
    """Two replicas over one PostgreSQL database."""
    postgres.require_postgres()
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(postgres.fresh_database())
        yield [await _replica(stack, url), await _replica(stack, url)]


async def _namespace(replica: Replica, **quotas: Any) -> str:
    name = unique("q")[:40]
    async with RemoteNamespaceAdmin(replica.target, retry=NO_RETRY) as admin:
        await admin.create_namespace(name, **quotas)
    return name


def _session(replica: Replica, namespace: str) -> Awaitable[Any]:
    return replica.store.admin.CreateSession(
        sa.CreateSessionRequest(session_id=unique("s"), created_at=ts(now_ms())),
        metadata=replica.md(namespace),
    )


def _read(replica: Replica, namespace: str) -> Awaitable[Any]:
    return replica.store.admin.ListSessions(
        sa.ListSessionsRequest(page_size=1), metadata=replica.md(namespace)
    )


def retry_delay(failure_error: grpc.aio.AioRpcError) -> float | None:
    status = rpc_status.from_call(failure_error)
    assert status is not None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.ToNanoseconds() / 1e9
    return None


async def refused(call: Awaitable[Any]) -> tuple[Failure, float | None]:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return failure_of(error), retry_delay(error)
    raise AssertionError("the call was not refused")


def _assert_quota(failure: Failure, namespace: str, quota: str, limit: str) -> None:
    assert (failure.code, failure.reason, failure.domain) == (
        EXHAUSTED,
        "QUOTA_EXCEEDED",
        "runstore",
    )
    assert failure.metadata["namespace"] == namespace
    assert failure.metadata["quota"] == quota
    assert failure.metadata["limit"] == limit
    assert failure.metadata["permanent"] == "false"


# --- The rules -------------------------------------------------------------------


def test_every_method_of_the_namespaced_services_has_a_rule() -> None:
    """Each but AppendRunRecordCalls, whose carried calls take a token each
    (docs/limits.md "Coalesced appends")."""
    carrier = "/runstore.v1.RuntimeStore/AppendRunRecordCalls"
    methods = {
        f"/{service.full_name}/{method.name}"
        for module, name in (
            (runtime_store_pb2, "RuntimeStore"),
            (session_admin_pb2, "SessionAdmin"),
            (memory_store_pb2, "MemoryStore"),
            (context_store_pb2, "ContextStore"),
        )
        for service in [module.DESCRIPTOR.services_by_name[name]]
        for method in service.methods
    }
    # The carrier takes no token of its own: each call it carries is served
    # through the chain and takes AppendRunRecord's.
    assert carrier in methods and carrier not in METHODS
    assert METHODS[CARRIED_METHOD].kind == "write"
    assert set(METHODS) == methods - {carrier}
    watches = {method for method, rule in METHODS.items() if rule.kind == "watch"}
    assert watches == {
        "/runstore.v1.RuntimeStore/WatchRunRecords",
        "/runstore.v1.RuntimeStore/WatchSessionRunRecords",
    }


def test_a_bucket_holds_one_second_of_its_rate_at_least_one_token() -> None:
    bucket = TokenBucket(4.0, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [0.0] * 4
    assert bucket.take(0.0) == pytest.approx(0.25)
    assert bucket.take(0.25) == 0.0
    bucket.set_rate(0.5, now=0.25)
    assert bucket.burst == 1.0
    assert bucket.take(0.25) == pytest.approx(2.0)
    assert bucket.take(2.25) == 0.0
    assert TokenBucket(0.0, now=0.0).take(0.0) == 0.0  # the one token of its burst
    empty = TokenBucket(0.0, now=0.0)
    empty.take(0.0)
    assert empty.take(1e9) == float("inf")


def test_callers_refused_together_are_told_times_one_token_apart() -> None:
    bucket = TokenBucket(4.0, now=0.0)
    for _ in range(4):
        assert bucket.take(0.0) == 0.0
    assert [bucket.take(0.0) for _ in range(3)] == [0.25, 0.5, 0.75]
    # Each comes back at its time and finds its token.
    assert [bucket.take(t) for t in (0.25, 0.5, 0.75)] == [0.0, 0.0, 0.0]
    # A caller that never waits cannot push the others beyond QUEUE_SECONDS.
    for _ in range(1000):
        bucket.take(0.75)
    assert bucket.take(0.75) <= QUEUE_SECONDS


# --- Each quota at its limit, and recovering -------------------------------------


async def test_the_write_quota_refuses_at_its_limit_with_retry_info_and_recovers(
    one: Replica,
) -> None:
    name = await _namespace(one, quota_writes_per_s=2.0)
    other = await _namespace(one)
    await _session(one, name)
    await _session(one, name)
    failure, delay = await refused(_session(one, name))
    _assert_quota(failure, name, "writes_per_second", "2")
    assert delay == pytest.approx(0.5)
    # Reads are not writes; another namespace is not this one.
    await _read(one, name)
    for _ in range(5):
        await _session(one, other)
    one.clock.advance(0.5)
    await _session(one, name)
    failure, _ = await refused(_session(one, name))
    assert failure.metadata["quota"] == "writes_per_second"
    refusals = one.metrics.registry.get_sample_value(
        "runstore_quota_refusals_total", {"namespace": name, "quota": "writes_per_second"}
    )
    assert refusals == 2


async def test_the_read_quota_refuses_at_its_limit_and_recovers(one: Replica) -> None:
    name = await _namespace(one, quota_reads_per_s=1.0)
    await _read(one, name)
    failure, delay = await refused(_read(one, name))
    _assert_quota(failure, name, "reads_per_second", "1")
    assert delay == pytest.approx(1.0)
    await _session(one, name)  # writes are not reads
    one.clock.advance(1.0)
    await _read(one, name)


async def test_a_quota_of_zero_refuses_every_call_it_counts(one: Replica) -> None:
    name = await _namespace(one, quota_writes_per_s=0.0)
    await _session(one, name)  # the bucket's one token
    failure, delay = await refused(_session(one, name))
    _assert_quota(failure, name, "writes_per_second", "0")
    assert delay is None  # no token ever comes


async def _one_shot(replica: Replica, namespace: str, payload: bytes = b"{}") -> Any:
    run = run_start()
    await replica.store.runtime.StartOneShotRun(
        run.one_shot_request(), metadata=replica.md(namespace)
    )
    await replica.store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("r1", payload=payload)),
        metadata=replica.md(namespace),
    )
    return run


async def _first_batch(stream: Any) -> Any:
    return await asyncio.wait_for(stream.read(), 10)


async def test_the_watch_stream_quota_counts_open_streams_and_releases_on_cancel(
    one: Replica,
) -> None:
    name = await _namespace(one, quota_watch_streams=1)
    run = await _one_shot(one, name)
    watch = rs.WatchRunRecordsRequest(run_id=run.id)
    first = one.store.runtime.WatchRunRecords(watch, metadata=one.md(name))
    assert len((await _first_batch(first)).events) == 2
    assert one.quotas.open_streams(name) == 1
    second = one.store.runtime.WatchRunRecords(watch, metadata=one.md(name))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _first_batch(second)
    failure = failure_of(caught.value)
    _assert_quota(failure, name, "watch_streams", "1")
    assert retry_delay(caught.value) is None
    # Another namespace's streams are not counted against this one.
    other = await _namespace(one, quota_watch_streams=1)
    other_run = await _one_shot(one, other)
    elsewhere = one.store.runtime.WatchRunRecords(
        rs.WatchRunRecordsRequest(run_id=other_run.id), metadata=one.md(other)
    )
    await _first_batch(elsewhere)
    elsewhere.cancel()
    first.cancel()
    await until(lambda: one.quotas.open_streams(name) == 0, "the cancelled stream is released")
    again = one.store.runtime.WatchRunRecords(watch, metadata=one.md(name))
    assert len((await _first_batch(again)).events) == 2
    again.cancel()


async def test_the_stored_bytes_quota_refuses_new_data_lets_runs_end_and_recovers(
    one: Replica,
) -> None:
    name = await _namespace(one, quota_stored_bytes=100_000)
    first = await _one_shot(one, name, payload=b"x" * 3000)
    async with RemoteNamespaceAdmin(one.target, retry=NO_RETRY) as admin:
        await admin.update_namespace(name, quota_stored_bytes=3000)
    await one.keeper.recount()
    assert one.quotas.stored_bytes(name) > 3000  # the payloads, the started record's
    big = rs.AppendRunRecordRequest(record=first.record("r2", payload=b"y"))
    failure, delay = await refused(one.store.runtime.AppendRunRecord(big, metadata=one.md(name)))
    _assert_quota(failure, name, "stored_bytes", "3000")
    assert delay is None
    failure, _ = await refused(
        one.store.runtime.StartOneShotRun(run_start().one_shot_request(), metadata=one.md(name))
    )
    assert failure.metadata["quota"] == "stored_bytes"
    failure, _ = await refused(_session(one, name))
    assert failure.metadata["quota"] == "stored_bytes"
    # Work in flight may end.
    await one.store.runtime.RecordRunTerminal(first.terminal_request(), metadata=one.md(name))
    # Raising the quota applies at once on this replica.
    async with RemoteNamespaceAdmin(one.target, retry=NO_RETRY) as admin:
        await admin.update_namespace(name, quota_stored_bytes=20_000)
    second = await _one_shot(one, name, payload=b"z" * 12_000)
    # What this replica committed since the measurement counts before the
    # next recount: it does not overshoot by waiting for one.
    failure, _ = await refused(
        one.store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=second.record("r2", payload=b"w" * 7000)),
            metadata=one.md(name),
        )
    )
    assert failure.metadata["quota"] == "stored_bytes"
    # Deleting data frees room once recounted.
    await one.store.runtime.RecordRunTerminal(second.terminal_request(), metadata=one.md(name))
    purged = await one.store.admin.PurgeSessionlessRuns(
        sa.PurgeSessionlessRunsRequest(finished_before=ts(now_ms() + 60_000), limit=10),
        metadata=one.md(name),
    )
    assert len(purged.purged_run_ids) == 2
    await one.keeper.recount()
    assert one.quotas.stored_bytes(name) == 0
    await _one_shot(one, name, payload=b"v" * 15_000)


class _Namespaced:
    """A RuntimeStore stub whose every call sends one namespace (for ``Upload``)."""

    def __init__(self, replica: Replica, namespace: str) -> None:
        self._stub = replica.store.runtime
        self._metadata = replica.md(namespace)

    def __getattr__(self, method: str) -> Any:
        call = getattr(self._stub, method)
        return lambda request: call(request, metadata=self._metadata)


async def test_seed_uploads_count_as_writes(one: Replica) -> None:
    """Begin, append and publish of a seed and a preparation's settlement are
    writes (docs/namespaces.md#quotas)."""
    name = await _namespace(one, quota_writes_per_s=2.0)
    upload = Upload(cast(Any, _Namespaced(one, name)), declaration())
    await upload.begin()
    await upload.history()
    failure, delay = await refused(upload.compiled())
    _assert_quota(failure, name, "writes_per_second", "2")
    assert delay == pytest.approx(0.5)
    one.clock.advance(0.5)
    await upload.compiled()
    failure, _ = await refused(upload.publish())
    assert failure.metadata["quota"] == "writes_per_second"
    one.clock.advance(0.5)
    await upload.publish()
    one.clock.advance(0.5)
    await _Namespaced(one, name).SettleRunPreparation(upload.settle())
    failure, _ = await refused(_Namespaced(one, name).SettleRunPreparation(upload.settle()))
    assert failure.metadata["quota"] == "writes_per_second"


async def test_seed_records_count_in_stored_bytes_and_their_uploads_are_refused(
    one: Replica,
) -> None:
    """A seed's records and a preparation's parts are stored bytes: measured,
    refused past the quota (a publication still goes through), freed when
    their run is purged."""
    name = await _namespace(one, quota_stored_bytes=1_000_000)
    runtime = cast(Any, _Namespaced(one, name))
    upload = Upload(runtime, declaration())
    await upload.begin()
    await upload.history(b'[{"role":"user","parts":[{"text":"' + b"h" * 6000 + b'"}]}]')
    await upload.compiled(b"c" * 4000)
    await one.keeper.recount()
    assert one.quotas.stored_bytes(name) >= 10_000
    async with RemoteNamespaceAdmin(one.target, retry=NO_RETRY) as admin:
        await admin.update_namespace(name, quota_stored_bytes=5000)
    failure, delay = await refused(upload.compiled(b"more"))
    _assert_quota(failure, name, "stored_bytes", "5000")
    assert delay is None
    failure, _ = await refused(Upload(runtime, declaration()).begin())
    assert failure.metadata["quota"] == "stored_bytes"
    await upload.publish()  # marks the attempt, adds nothing
    # The seeded run started, ended and purged takes its seed with it.
    run = run_start(run_id=upload.run_id, agent_id="agent", seed_end_id=str(upload.seed_end))
    async with RemoteNamespaceAdmin(one.target, retry=NO_RETRY) as admin:
        await admin.update_namespace(name, quota_stored_bytes=1_000_000)
    await runtime.StartSynchronousRun(
        sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    )
    await runtime.RecordRunTerminal(run.terminal_request())
    purged = await one.store.admin.PurgeSessionlessRuns(
        sa.PurgeSessionlessRunsRequest(finished_before=ts(now_ms() + 60_000), limit=10),
        metadata=one.md(name),
    )
    assert list(purged.purged_run_ids) == [run.id]
    await one.keeper.recount()
    assert one.quotas.stored_bytes(name) == 0


async def test_a_seed_declarations_rendered_prompts_count_in_stored_bytes(one: Replica) -> None:
    """BeginRunSeed stores its declaration's rendered prompts, labels and all:
    bytes a namespace holds, measured in bytes (not characters) before any
    seed record is appended, so further uploads are refused past the quota."""
    name = await _namespace(one, quota_stored_bytes=1_000_000)
    runtime = cast(Any, _Namespaced(one, name))
    labels = {f"label-{index}": "é" * 1000 for index in range(12)}  # 2 bytes a character
    prompt = sd.RenderedPrompt(
        prompt_id="greeting", version="v1", scope=sd.PromptScope(labels=labels)
    )
    upload = Upload(runtime, declaration(rendered_prompts=[prompt]))
    await upload.begin()
    await one.keeper.recount()
    assert one.quotas.stored_bytes(name) >= 12 * 2000
    async with RemoteNamespaceAdmin(one.target, retry=NO_RETRY) as admin:
        await admin.update_namespace(name, quota_stored_bytes=20_000)
    failure, _ = await refused(Upload(runtime, declaration()).begin())
    _assert_quota(failure, name, "stored_bytes", "20000")


async def test_quotas_of_one_namespace_never_refuse_another(one: Replica) -> None:
    noisy = await _namespace(
        one, quota_writes_per_s=1.0, quota_reads_per_s=1.0, quota_stored_bytes=0
    )
    quiet = await _namespace(one)
    failure, _ = await refused(_session(one, noisy))
    assert failure.metadata["quota"] == "stored_bytes"
    await _read(one, noisy)
    failure, _ = await refused(_read(one, noisy))
    assert failure.metadata["quota"] == "reads_per_second"
    for _ in range(10):
        await _session(one, quiet)
        await _read(one, quiet)


# --- The typed client --------------------------------------------------------------


async def test_the_client_backs_off_at_least_the_retry_info_delay(one: Replica) -> None:
    name = await _namespace(one, quota_writes_per_s=1.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        one.clock.advance(seconds)  # the server's tokens refill as the client waits

    clock = RetryClock(sleep=sleep, uniform=lambda low, high: low)
    async with RemoteSessionAdmin(one.target, namespace=name, clock=clock) as admin:
        await admin.create_session(unique("s"), _now())
        await admin.create_session(unique("s"), _now())
    assert len(slept) == 1 and slept[0] >= 1.0


async def test_the_client_does_not_retry_a_stored_bytes_refusal(one: Replica) -> None:
    name = await _namespace(one, quota_stored_bytes=0)
    attempts: list[float] = []
    clock = RetryClock(sleep=lambda seconds: _record(attempts, seconds))
    async with RemoteSessionAdmin(one.target, namespace=name, clock=clock) as admin:
        with pytest.raises(QuotaExceededError) as caught:
            await admin.create_session(unique("s"), _now())
    assert (caught.value.namespace, caught.value.quota, caught.value.limit) == (
        name,
        "stored_bytes",
        "0",
    )
    assert not caught.value.retryable and not is_retryable(caught.value)
    assert attempts == []


async def _record(into: list[float], seconds: float) -> None:
    into.append(seconds)


def _now() -> datetime:
    return datetime.now(UTC)


async def test_call_with_retry_waits_the_retry_delay_then_its_jittered_backoff() -> None:
    slept: list[float] = []
    calls = 0

    async def attempt(_: float | None) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise QuotaExceededError(
                retry_delay=1.5, details={"quota": "writes_per_second", "namespace": "a"}
            )
        return "ok"

    clock = RetryClock(
        sleep=lambda seconds: _record(slept, seconds), uniform=lambda low, high: high
    )
    policy = RetryPolicy(initial=0.05)
    assert await call_with_retry(attempt, policy, attempt_timeout=None, clock=clock) == "ok"
    assert slept == [pytest.approx(1.55)]


# --- Deleting a namespace ends its Watch streams ---------------------------------


async def _learns(replica: Replica, name: str) -> None:
    """The replica's directory reads the table until it has ``name`` (a read
    its keeper began before the namespace existed may still be in flight)."""
    for _ in range(10):
        replica.clock.advance(3600)  # its directory is stale: the next refresh reads
        await replica.keeper.tick()
        if name in replica.namespaces.directory.active():
            return
    raise AssertionError(f"{name} never seen")


async def _deleted_ends_watch(watcher: Replica, deleter: Replica, tick: bool) -> None:
    name = await _namespace(deleter)
    if watcher is not deleter:
        await _learns(watcher, name)
    run = await _one_shot(watcher, name)
    stream = watcher.store.runtime.WatchRunRecords(
        rs.WatchRunRecordsRequest(run_id=run.id), metadata=watcher.md(name)
    )
    await _first_batch(stream)
    async with RemoteNamespaceAdmin(deleter.target, retry=NO_RETRY) as admin:
        await admin.delete_namespace(name)
    if tick:
        watcher.clock.advance(3600)
        await watcher.keeper.tick()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _first_batch(stream)
    failure = failure_of(caught.value)
    assert (failure.code, failure.reason) == (grpc.StatusCode.NOT_FOUND, "NAMESPACE_NOT_FOUND")
    assert failure.metadata["namespace"] == name
    await until(lambda: watcher.quotas.open_streams(name) == 0, "the ended stream is released")


async def test_deleting_a_namespace_ends_its_watch_streams_at_once(one: Replica) -> None:
    await _deleted_ends_watch(one, one, tick=False)


@pytest.mark.postgres
async def test_another_replica_ends_the_streams_of_a_deleted_namespace_at_its_refresh(
    pair: list[Replica],
) -> None:
    await _deleted_ends_watch(pair[1], pair[0], tick=True)


@pytest.mark.postgres
async def test_another_replica_ends_them_within_its_refresh_interval_unasked() -> None:
    """As served: no call reaches the watching replica, its own refresh (the
    keeper's, every REFRESH_SECONDS) finds the namespace gone: the first read
    of the directory begun after the delete ends the stream. Counted in
    refreshes, not seconds: a loaded machine slows both alike."""
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(postgres.fresh_database())
        deleter = await _replica(stack, url, live=True)
        watcher = await _replica(stack, url, live=True)
        name = await _namespace(deleter)
        await until(
            lambda: name in watcher.namespaces.directory.active(), "the watcher sees it created"
        )
        run = await _one_shot(watcher, name)
        stream = watcher.store.runtime.WatchRunRecords(
            rs.WatchRunRecordsRequest(run_id=run.id), metadata=watcher.md(name)
        )
        await _first_batch(stream)
        directory = watcher.namespaces.directory
        refresh = directory.refresh
        after_delete: list[bool] = []
        """One entry per refresh begun after the delete: True once it finished."""
        deleted = False

        async def counted() -> None:
            mine = len(after_delete) if deleted else None
            if mine is not None:
                after_delete.append(False)
            await refresh()
            if mine is not None:
                after_delete[mine] = True

        directory.refresh = counted  # type: ignore[method-assign]
        async with RemoteNamespaceAdmin(deleter.target, retry=NO_RETRY) as admin:
            await admin.delete_namespace(name)
        deleted = True
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async with asyncio.timeout(REFRESH_SECONDS * 30):
                await _first_batch(stream)
        assert failure_of(caught.value).reason == "NAMESPACE_NOT_FOUND"
        assert after_delete.count(True) <= 1, after_delete


# --- Two replicas over one PostgreSQL database -------------------------------------


async def _beat(replicas: list[Replica]) -> None:
    """Each replica's heartbeat, twice round: every one then sees every other."""
    for _ in range(2):
        for replica in replicas:
            replica.clock.advance(3600)
            await replica.keeper.tick()


@pytest.mark.postgres
async def test_two_replicas_each_enforce_half_of_a_rate_quota(pair: list[Replica]) -> None:
    first, second = pair
    name = await _namespace(first, quota_writes_per_s=4.0)
    await _learns(second, name)
    await _beat(pair)
    assert (first.quotas.replicas, second.quotas.replicas) == (2, 2)
    for replica in pair:
        await _session(replica, name)
        await _session(replica, name)
        failure, delay = await refused(_session(replica, name))
        _assert_quota(failure, name, "writes_per_second", "4")
        assert delay == pytest.approx(0.5)  # a token of 2 a second
    # A replica that stops beating no longer takes its share.
    await second.keeper.stop()
    await _beat([first])
    assert first.quotas.replicas == 1
    second.keeper.start()
    await _beat(pair)
    assert first.quotas.replicas == 2


@pytest.mark.postgres
async def test_the_watch_stream_quota_counts_the_streams_of_every_replica(
    pair: list[Replica],
) -> None:
    first, second = pair
    name = await _namespace(first, quota_watch_streams=1)
    await _learns(second, name)
    await _beat(pair)
    run = await _one_shot(first, name)
    watch = rs.WatchRunRecordsRequest(run_id=run.id)
    open_here = first.store.runtime.WatchRunRecords(watch, metadata=first.md(name))
    await _first_batch(open_here)
    await _beat(pair)
    assert second.quotas.others_streams.get(name) == 1
    elsewhere = second.store.runtime.WatchRunRecords(watch, metadata=second.md(name))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _first_batch(elsewhere)
    _assert_quota(failure_of(caught.value), name, "watch_streams", "1")
    open_here.cancel()
    await until(lambda: first.quotas.open_streams(name) == 0, "the cancelled stream is released")
    await _beat(pair)
    again = second.store.runtime.WatchRunRecords(watch, metadata=second.md(name))
    await _first_batch(again)
    again.cancel()


@pytest.mark.postgres
async def test_the_stored_bytes_measurement_is_shared_through_the_database(
    pair: list[Replica],
) -> None:
    first, second = pair
    name = await _namespace(first, quota_stored_bytes=100_000)
    await _one_shot(first, name, payload=b"x" * 1200)
    async with RemoteNamespaceAdmin(first.target, retry=NO_RETRY) as admin:
        await admin.update_namespace(name, quota_stored_bytes=1000)
    await first.keeper.recount()
    await _learns(second, name)  # and reads the usage the first one measured
    assert second.quotas.stored_bytes(name) >= 1200
    failure, _ = await refused(_session(second, name))
    _assert_quota(failure, name, "stored_bytes", "1000")


async def test_an_unknown_namespace_is_not_found_before_any_quota(one: Replica) -> None:
    """A namespace that does not exist is NOT_FOUND before any quota."""
    failure = await fails(_session(one, "no-such-namespace"))
    assert failure.reason == "NAMESPACE_NOT_FOUND"


async def test_appends_touch_no_counter_row(one: Replica) -> None:
    """No hot row: the usage row changes only at a recount, the heartbeat
    rows only at a heartbeat, whatever the namespace appends meanwhile."""
    name = await _namespace(one, quota_stored_bytes=10**9, quota_writes_per_s=10**6)
    await _beat([one])
    await one.keeper.recount()

    usage_before = await _rows(one, USAGE, name=name)
    beats_before = await _rows(one, HEARTBEATS)
    assert usage_before and beats_before  # the recount and the heartbeat wrote them
    run = await _one_shot(one, name)
    for index in range(20):
        await one.store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record(f"n{index}", payload=b"p" * 100)),
            metadata=one.md(name),
        )
    assert await _rows(one, USAGE, name=name) == usage_before
    assert await _rows(one, HEARTBEATS) == beats_before
    assert one.quotas.stored_bytes(name) >= usage_before[0][0] + 20 * 100


USAGE = "SELECT stored_bytes, measured_at FROM namespace_usage WHERE name = :name"
HEARTBEATS = "SELECT replica_id, beats, seen_at, streams FROM quota_replicas ORDER BY replica_id"


async def _rows(replica: Replica, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows ``sql`` reads from the replica's database, on a connection of
    the test's own: what is stored, not what the server's code says it stored."""
    engine = create_async_engine(migrate.async_url(replica.database_url), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return [tuple(row) for row in await connection.execute(text(sql), params)]
    finally:
        await engine.dispose()


async def test_the_typed_watch_backs_off_at_the_watch_stream_quota(one: Replica) -> None:
    """The Python client's Watch iterator reconnects once a stream is free."""
    name = await _namespace(one, quota_watch_streams=1)
    run = await _one_shot(one, name)
    holder = one.store.runtime.WatchRunRecords(
        rs.WatchRunRecordsRequest(run_id=run.id), metadata=one.md(name)
    )
    await _first_batch(holder)
    refusals: list[str] = []

    async def sleep(_: float) -> None:
        # Backing off: meanwhile the other stream of the namespace ends.
        holder.cancel()
        await until(lambda: one.quotas.open_streams(name) == 0, "the held stream is released")

    store = RemoteStore(
        one.target,
        namespace=name,
        clock=RetryClock(sleep=sleep),
        on_retry=lambda error, *_: refusals.append(error.reason),
    )
    async with store:
        records = store.watch_run_records(run.id)
        first = await asyncio.wait_for(anext(records), 10)
        await records.aclose()
    assert first.event_key == "started"
    assert refusals == ["QUOTA_EXCEEDED"]
