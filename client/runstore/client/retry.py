"""Retrying transient failures with capped exponential backoff and full jitter.

Only transient errors are retried (``TransientError``: UNAVAILABLE, ABORTED,
DEADLINE_EXCEEDED, a server-side CANCELLED, INTERNAL/TRANSIENT,
RESOURCE_EXHAUSTED/OVERLOADED, whose backoff gives an overloaded server room, and
RESOURCE_EXHAUSTED/QUOTA_EXCEEDED but for ``stored_bytes``); a contract
error is raised at once. A delay the server asks for (``google.rpc.RetryInfo``,
``RunstoreError.retry_delay``) is the least a sleep waits. Every attempt
sends the identical command, which the store's exact-retry rules make safe
(§8). The total deadline is measured on a monotonic clock; the client stops
before a sleep would pass it and clips each attempt's own timeout to the time
left.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from runstore.client.handshake import TLSHandshakeError
from runstore.contract.errors import QuotaExceededError, RunstoreError, TransientError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a client retries transient failures. Immutable; ``with_*`` copy."""

    initial: float = 0.05
    """Cap of the first backoff, in seconds."""
    maximum: float = 2.0
    """Largest backoff cap, in seconds."""
    multiplier: float = 2.0
    """Growth of the cap after each failed attempt."""
    deadline: float | None = 30.0
    """Total seconds for all attempts of one call; None for no limit."""
    max_attempts: int | None = None
    """Attempts at most (1 disables retries); None for no limit."""

    def with_deadline(self, deadline: float | None) -> RetryPolicy:
        return dataclasses.replace(self, deadline=deadline)

    def with_max_attempts(self, max_attempts: int | None) -> RetryPolicy:
        return dataclasses.replace(self, max_attempts=max_attempts)

    def with_delay(
        self,
        initial: float | None = None,
        maximum: float | None = None,
        multiplier: float | None = None,
    ) -> RetryPolicy:
        return dataclasses.replace(
            self,
            initial=self.initial if initial is None else initial,
            maximum=self.maximum if maximum is None else maximum,
            multiplier=self.multiplier if multiplier is None else multiplier,
        )

    def backoff_caps(self) -> Iterator[float]:
        """The growing caps; each sleep is drawn uniformly below its cap."""
        cap = self.initial
        while True:
            yield min(cap, self.maximum)
            cap *= self.multiplier


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(max_attempts=1)


def is_retryable(error: BaseException) -> bool:
    """Transient runstore errors only; never a contract error (§11.1), nor a
    TLS mistake that looks like an outage (``TLSHandshakeError``), nor a
    ``stored_bytes`` quota, which no wait clears (docs/namespaces.md#quotas)."""
    if isinstance(error, QuotaExceededError):
        return error.retryable
    return isinstance(error, TransientError) and not isinstance(error, TLSHandshakeError)


def backoff_delay(error: RunstoreError, drawn: float) -> float:
    """The sleep before a retry: the jittered draw below the growing cap, after
    the delay the server asked for (RetryInfo) when it asked for one. Added,
    not the larger of the two: callers refused together (every one told the
    same next-token time) spread out as their caps grow, instead of all
    coming back at that instant."""
    asked = error.retry_delay
    return drawn if asked is None else asked + drawn


@dataclass(frozen=True, slots=True)
class RetryClock:
    """Time, sleep and randomness, injectable so tests never really sleep."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    uniform: Callable[[float, float], float] = random.uniform


SYSTEM_CLOCK = RetryClock()


async def call_with_retry(
    attempt: Callable[[float | None], Awaitable[T]],
    policy: RetryPolicy,
    *,
    attempt_timeout: float | None,
    clock: RetryClock = SYSTEM_CLOCK,
    on_retry: Callable[[RunstoreError, int, float], None] | None = None,
) -> T:
    """Runs ``attempt(seconds_allowed)`` until it succeeds, fails permanently, or the
    policy gives up; then the last error is raised as it is."""
    started = clock.monotonic()
    caps = policy.backoff_caps()
    attempts = 0
    while True:
        attempts += 1
        remaining = (
            None if policy.deadline is None else policy.deadline - (clock.monotonic() - started)
        )
        timeout = attempt_timeout
        if remaining is not None:
            timeout = remaining if timeout is None else min(timeout, remaining)
        try:
            return await attempt(timeout)
        except RunstoreError as error:
            if not is_retryable(error):
                raise
            if policy.max_attempts is not None and attempts >= policy.max_attempts:
                raise
            delay = backoff_delay(error, clock.uniform(0.0, next(caps)))
            elapsed = clock.monotonic() - started
            if policy.deadline is not None and elapsed + delay >= policy.deadline:
                raise
            log.debug(
                "retrying after %s (attempt %d, sleeping %.3fs)", error.reason, attempts, delay
            )
            if on_retry is not None:
                on_retry(error, attempts, delay)
            await clock.sleep(delay)
