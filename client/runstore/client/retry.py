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

A refusal (RESOURCE_EXHAUSTED: a namespace quota, an overloaded server) is
never retried silently: each retry of one is a WARNING record on the
``runstore.client`` logger naming the quota and the wait, and the policy's
``refusal_deadline`` (60 s by default) bounds how long refusals are retried
before the refusal itself is raised (docs/clients/python.md#retries).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar

from runstore.client.handshake import TLSHandshakeError
from runstore.contract.errors import (
    OverloadedError,
    QuotaExceededError,
    RunstoreError,
    TransientError,
)

log = logging.getLogger(__name__)

REFUSAL_LOGGER: Final = "runstore.client"
"""The logger every retried refusal is reported on, at WARNING."""

refusal_log = logging.getLogger(REFUSAL_LOGGER)

RetryCallback: TypeAlias = Callable[[RunstoreError, int, float], None]
"""``on_retry(error, attempt, sleep)``: called before each retry's sleep with
the error that failed ``attempt`` (1 for the first) and the seconds the client
is about to wait."""

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
    refusal_deadline: float | None = 60.0
    """Seconds refusals (a quota, an overloaded server) are retried, from the
    first refusal in a row, before that refusal is raised: for a call within
    ``deadline`` too, for a Watch instead of it (a Watch's ``deadline`` bounds
    reconnects through outages). None retries refusals for as long as the
    rest of the policy allows."""

    def with_deadline(self, deadline: float | None) -> RetryPolicy:
        return dataclasses.replace(self, deadline=deadline)

    def with_max_attempts(self, max_attempts: int | None) -> RetryPolicy:
        return dataclasses.replace(self, max_attempts=max_attempts)

    def with_refusal_deadline(self, refusal_deadline: float | None) -> RetryPolicy:
        return dataclasses.replace(self, refusal_deadline=refusal_deadline)

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
"""What every client uses unless given ``retry=``."""
NO_RETRY = RetryPolicy(max_attempts=1)
"""One attempt: every failure, a refusal included, is raised at once."""


def is_retryable(error: BaseException) -> bool:
    """Transient runstore errors only; never a contract error (§11.1), nor a
    TLS mistake that looks like an outage (``TLSHandshakeError``), nor a
    ``stored_bytes`` quota, which no wait clears (docs/namespaces.md#quotas)."""
    if isinstance(error, QuotaExceededError):
        return error.retryable
    return isinstance(error, TransientError) and not isinstance(error, TLSHandshakeError)


def is_refusal(error: RunstoreError) -> bool:
    """The server refused the call for now (RESOURCE_EXHAUSTED: a quota or an
    operating limit), as opposed to failing it."""
    return isinstance(error, QuotaExceededError | OverloadedError)


def refusal_text(error: RunstoreError, delay: float) -> str:
    """One line about a retried refusal: what refused (the quota's name from
    the ErrorInfo metadata) and how long the client waits."""
    if isinstance(error, QuotaExceededError) and error.quota:
        limit = f" (limit {error.limit})" if error.limit else ""
        what = f"namespace {error.namespace!r} is at its {error.quota} quota{limit}"
    else:
        what = error.message
    return f"refused: {what}; retrying in {delay:.1f}s"


def report_retry(
    error: RunstoreError, attempt: int, delay: float, on_retry: RetryCallback | None
) -> None:
    """Tells about a retry before its sleep: a refusal at WARNING on
    ``runstore.client`` (never silent), an outage at DEBUG; then ``on_retry``."""
    if is_refusal(error):
        refusal_log.warning(
            "%s",
            refusal_text(error, delay),
            extra={"runstore_reason": error.reason, "runstore_retry_in": delay},
        )
    else:
        log.debug("retrying after %s (attempt %d, sleeping %.3fs)", error.reason, attempt, delay)
    if on_retry is not None:
        on_retry(error, attempt, delay)


def refused_too_long(policy: RetryPolicy, refused_for: float, delay: float) -> bool:
    """Whether another wait of ``delay`` would retry refusals past the policy's
    ``refusal_deadline``; ``refused_for``: seconds since the first refusal in a row."""
    return policy.refusal_deadline is not None and refused_for + delay >= policy.refusal_deadline


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
    on_retry: RetryCallback | None = None,
) -> T:
    """Runs ``attempt(seconds_allowed)`` until it succeeds, fails permanently, or the
    policy gives up; then the last error is raised as it is."""
    started = clock.monotonic()
    caps = policy.backoff_caps()
    attempts = 0
    refused_since: float | None = None
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
            if not is_refusal(error):
                refused_since = None
            else:
                if refused_since is None:
                    refused_since = clock.monotonic()
                if refused_too_long(policy, clock.monotonic() - refused_since, delay):
                    raise
            report_retry(error, attempts, delay, on_retry)
            await clock.sleep(delay)
