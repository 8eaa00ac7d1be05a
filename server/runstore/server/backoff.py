"""The server's one jittered exponential backoff: how long to wait after the
n-th failure in a row before trying again.

Every retry loop of the server that waits between attempts (paced
reconnects, the LISTEN connection, a transaction that lost a race, a
namespace purge's batches) takes its pause here. The pause grows as
``base * 2**failures`` up to ``longest``, and a share of it (``jitter``) is
random, so replicas that failed together (a database restart, two replicas
purging one namespace) do not try again together. A loop keeps its own
failure count and its own structure; ``backoff`` and ``tenacity`` drive a
call they wrap, which none of these loops is.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Backoff:
    """Pauses that double with each failure, up to ``longest``, a ``jitter``
    share of each one random (0: none, 1: anywhere from nothing to the full
    pause). ``uniform(a, b)`` draws the random part (a seeded
    ``random.Random().uniform`` in a test)."""

    base: float
    longest: float
    jitter: float = 0.5
    uniform: Callable[[float, float], float] = field(default=random.uniform, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter {self.jitter} is not within [0, 1]")
        if self.base <= 0 or self.longest < self.base:
            raise ValueError(f"backoff from {self.base} to {self.longest} s")

    def ceiling(self, failures: int) -> float:
        """The longest pause after ``failures`` failures in a row (at least one)."""
        return min(self.longest, self.base * 2.0 ** min(max(failures, 1), 60))

    def pause(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row: the ceiling's
        fixed share plus a random draw of the rest."""
        ceiling = self.ceiling(failures)
        random_share = ceiling * self.jitter
        return ceiling - random_share + self.uniform(0.0, random_share)
