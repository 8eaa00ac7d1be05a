"""RetryPolicy and call_with_retry with an injected clock: no real sleeping."""

from __future__ import annotations

import pytest

from runstore.client.retry import NO_RETRY, RetryClock, RetryPolicy, call_with_retry
from runstore.contract.errors import (
    AbortedError,
    DeadlineExceededError,
    RunConflictError,
    RunstoreError,
    UnavailableError,
)


class FakeTime:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self, uniform: object = None) -> RetryClock:
        return RetryClock(
            monotonic=self.monotonic,
            sleep=self.sleep,
            uniform=uniform or (lambda low, high: high),  # type: ignore[arg-type]
        )


def failing(errors: list[RunstoreError], result: str = "ok"):  # type: ignore[no-untyped-def]
    timeouts: list[float | None] = []

    async def attempt(seconds: float | None) -> str:
        timeouts.append(seconds)
        if errors:
            raise errors.pop(0)
        return result

    return attempt, timeouts


async def test_transient_errors_are_retried_with_growing_capped_backoff() -> None:
    time = FakeTime()
    attempt, _ = failing(
        [UnavailableError(), AbortedError(), UnavailableError(), UnavailableError()]
    )
    policy = RetryPolicy(initial=0.1, maximum=0.3, multiplier=2, deadline=None)
    assert await call_with_retry(attempt, policy, attempt_timeout=1.0, clock=time.clock()) == "ok"
    assert time.sleeps == [0.1, 0.2, 0.3, 0.3]


async def test_sleeps_are_drawn_below_the_cap_full_jitter() -> None:
    time = FakeTime()
    draws: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        draws.append((low, high))
        return (low + high) / 2

    attempt, _ = failing([UnavailableError(), UnavailableError()])
    policy = RetryPolicy(initial=0.2, maximum=1.0, deadline=None)
    await call_with_retry(attempt, policy, attempt_timeout=None, clock=time.clock(uniform))
    assert draws == [(0.0, 0.2), (0.0, 0.4)]
    assert time.sleeps == [0.1, 0.2]


async def test_contract_errors_are_never_retried() -> None:
    time = FakeTime()
    attempt, timeouts = failing([RunConflictError()])
    with pytest.raises(RunConflictError):
        await call_with_retry(attempt, RetryPolicy(), attempt_timeout=1.0, clock=time.clock())
    assert len(timeouts) == 1 and time.sleeps == []


async def test_gives_up_before_a_sleep_would_pass_the_deadline() -> None:
    time = FakeTime()
    attempt, timeouts = failing([UnavailableError() for _ in range(100)])
    policy = RetryPolicy(initial=0.4, maximum=0.4, deadline=1.0)
    with pytest.raises(UnavailableError):
        await call_with_retry(attempt, policy, attempt_timeout=5.0, clock=time.clock())
    assert time.sleeps == [0.4, 0.4]  # a third sleep would end at 1.2 s > 1.0 s
    assert time.now < policy.deadline  # type: ignore[operator]
    # Each attempt's timeout was clipped to what was left of the deadline.
    assert timeouts == [1.0, pytest.approx(0.6), pytest.approx(0.2)]


async def test_max_attempts_and_no_retry() -> None:
    time = FakeTime()
    attempt, timeouts = failing([DeadlineExceededError() for _ in range(10)])
    with pytest.raises(DeadlineExceededError):
        await call_with_retry(
            attempt, RetryPolicy(max_attempts=3), attempt_timeout=None, clock=time.clock()
        )
    assert len(timeouts) == 3
    attempt, timeouts = failing([UnavailableError()])
    with pytest.raises(UnavailableError):
        await call_with_retry(attempt, NO_RETRY, attempt_timeout=None, clock=time.clock())
    assert len(timeouts) == 1


async def test_on_retry_sees_each_retry() -> None:
    time = FakeTime()
    seen: list[tuple[str, int, float]] = []
    attempt, _ = failing([UnavailableError(), AbortedError()])
    await call_with_retry(
        attempt,
        RetryPolicy(initial=0.5, deadline=None),
        attempt_timeout=None,
        clock=time.clock(),
        on_retry=lambda error, n, delay: seen.append((error.status_code, n, delay)),
    )
    assert seen == [("UNAVAILABLE", 1, 0.5), ("ABORTED", 2, 1.0)]


def test_policies_are_immutable_values_with_copies() -> None:
    policy = RetryPolicy()
    changed = policy.with_deadline(3.0).with_max_attempts(4).with_delay(initial=0.5)
    assert (policy.deadline, policy.max_attempts, policy.initial) == (30.0, None, 0.05)
    assert (changed.deadline, changed.max_attempts, changed.initial) == (3.0, 4, 0.5)
    assert changed.with_deadline(None).deadline is None
    with pytest.raises(AttributeError):
        policy.deadline = 1.0  # type: ignore[misc]
