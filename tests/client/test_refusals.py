"""No silent retry (docs/clients/python.md#retries): a Watch refused by its
namespace's ``watch_streams`` quota, against a real server at a quota of 1, is
reported on every retry (``on_retry`` and a WARNING record on
``runstore.client``), given up after the policy's ``refusal_deadline`` with
the refusal as the error, and gets through once the stream holding the quota
ends. Time is an injected clock: nothing sleeps."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import pytest

from runstore.client import (
    NO_RETRY,
    OverloadedError,
    QuotaExceededError,
    RemoteNamespaceAdmin,
    RemoteStore,
    RetryClock,
    RetryPolicy,
    RunStart,
    RunStatus,
    UnavailableError,
    records,
)
from runstore.client.retry import REFUSAL_LOGGER, call_with_retry
from runstore.contract.errors import RunstoreError
from tests.support import Store, unique


class FakeTime:
    """Monotonic seconds that move only when the client sleeps (it yields to
    the loop instead); draws are always the cap."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)

    def clock(self) -> RetryClock:
        return RetryClock(monotonic=lambda: self.now, sleep=self.sleep, uniform=lambda _a, b: b)


@dataclass
class Quota1:
    namespace: str
    run: RunStart
    holder: RemoteStore


@asynccontextmanager
async def watch_quota_of_one(store: Store) -> AsyncIterator[Quota1]:
    """A namespace at ``watch_streams`` 1, a running run in it, and a client
    whose open Watch holds the namespace's one stream."""
    name = unique("wq")[:40]
    async with AsyncExitStack() as stack:
        admin = await stack.enter_async_context(RemoteNamespaceAdmin(store.target, retry=NO_RETRY))
        await admin.create_namespace(name, quota_watch_streams=1)
        holder = await stack.enter_async_context(
            RemoteStore(store.target, namespace=name, retry=NO_RETRY)
        )
        run = RunStart(run_id=unique("run"), agent_id="a", session_id="", started_at=records.now())
        await holder.start_one_shot_run(records.one_shot_run_start(run))
        yield Quota1(name, run, holder)


async def test_a_watch_refused_by_its_quota_is_reported_then_given_up_after_60s(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async with watch_quota_of_one(store) as quota:
        holding = quota.holder.watch_run_records(quota.run.run_id)
        assert (await anext(holding)).type == "run_started"  # the one stream is open
        time = FakeTime()
        reported: list[tuple[RunstoreError, int, float]] = []
        refused = RemoteStore(
            store.target,
            namespace=quota.namespace,
            clock=time.clock(),
            on_retry=lambda error, attempt, delay: reported.append((error, attempt, delay)),
        )
        async with refused:
            with (
                caplog.at_level(logging.WARNING, logger=REFUSAL_LOGGER),
                pytest.raises(QuotaExceededError) as caught,
            ):
                async for _ in refused.watch_run_records(quota.run.run_id):
                    pytest.fail("the watch got past its namespace's quota")
        await holding.aclose()
    assert (caught.value.quota, caught.value.namespace) == ("watch_streams", quota.namespace)
    # Given up after the default refusal_deadline (60 s of the fake clock),
    # not the 30 s deadline that bounds reconnects through an outage.
    assert RetryPolicy().refusal_deadline == 60.0
    assert 30.0 < sum(time.sleeps) < 60.0 <= sum(time.sleeps) + 2.0
    # Every wait reported, once, by the callback and by a WARNING record.
    assert [delay for _, _, delay in reported] == time.sleeps
    assert [attempt for _, attempt, _ in reported] == list(range(1, len(time.sleeps) + 1))
    assert all(isinstance(error, QuotaExceededError) for error, _, _ in reported)
    warnings = [r for r in caplog.records if r.name == REFUSAL_LOGGER]
    assert len(warnings) == len(time.sleeps)
    for record, delay in zip(warnings, time.sleeps, strict=True):
        assert record.levelno == logging.WARNING
        message = record.getMessage()
        assert "watch_streams quota (limit 1)" in message and quota.namespace in message
        assert f"retrying in {delay:.1f}s" in message


async def test_a_refused_watch_gets_through_once_the_quota_frees(store: Store) -> None:
    async with watch_quota_of_one(store) as quota:
        holding = quota.holder.watch_run_records(quota.run.run_id)
        await anext(holding)
        time = FakeTime()
        retries: list[int] = []
        freed = False

        async def free_it_after_two(error: RunstoreError, attempt: int, _: float) -> None:
            nonlocal freed
            retries.append(attempt)
            if attempt == 2 and not freed:
                freed = True
                await holding.aclose()

        def on_retry(error: RunstoreError, attempt: int, delay: float) -> None:
            pending.append(asyncio.ensure_future(free_it_after_two(error, attempt, delay)))

        pending: list[asyncio.Future[None]] = []
        async with RemoteStore(
            store.target,
            namespace=quota.namespace,
            clock=time.clock(),
            on_retry=on_retry,
            retry=RetryPolicy(refusal_deadline=None),
        ) as watcher:
            watching = watcher.watch_run_records(quota.run.run_id)
            assert (await anext(watching)).type == "run_started"
            await asyncio.gather(*pending)
            await quota.holder.record_run_terminal(
                records.run_terminal(quota.run, RunStatus.COMPLETED)
            )
            rest = [record.type async for record in watching]
    assert freed and retries[:2] == [1, 2]
    assert rest == ["run_completed"]


async def test_a_call_refused_is_reported_and_bounded_by_the_refusal_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A unary call: each refusal a WARNING, given up once ``refusal_deadline``
    would pass (before ``deadline``); an outage in between starts it over and
    is not a warning."""
    time = FakeTime()
    errors: list[RunstoreError] = [
        QuotaExceededError(
            details={"namespace": "ns", "quota": "writes_per_second", "limit": "5"},
            retry_delay=1.0,
        ),
        UnavailableError(),
        *[OverloadedError() for _ in range(10)],
    ]
    attempts = 0

    async def attempt(_: float | None) -> str:
        nonlocal attempts
        attempts += 1
        raise errors.pop(0)

    policy = RetryPolicy(initial=1.0, maximum=1.0, deadline=100.0, refusal_deadline=3.5)
    with caplog.at_level(logging.DEBUG, logger=REFUSAL_LOGGER), pytest.raises(OverloadedError):
        await call_with_retry(attempt, policy, attempt_timeout=None, clock=time.clock())
    # 2.0 (1 s asked + the 1 s draw), 1.0 for the outage, then refusals of
    # 1.0 each until the fourth would reach 3.5 s of refusals in a row.
    assert time.sleeps == [2.0, 1.0, 1.0, 1.0, 1.0]
    assert attempts == 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == (
        "refused: namespace 'ns' is at its writes_per_second quota (limit 5); retrying in 2.0s"
    )
    assert len(warnings) == 4 and all("overloaded" in text for text in warnings[1:])
