"""The token bucket of a rate quota (docs/namespaces.md#quotas): one per
namespace and kind on each replica, at that replica's share of the quota."""

from __future__ import annotations

import math
from typing import Final

QUEUE_SECONDS: Final = 5.0
"""How far ahead a rate refusal may tell a caller to come back (callers
refused together are spread one token apart, up to this)."""


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
