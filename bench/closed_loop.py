"""The measuring loop every closed-loop workload runs (``bench.driver``'s
server workloads and ``bench.peers``' libraries): each op called back to back
by a task of its own until a deadline, the calls timed once the warm-up is over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any


class ClosedLoop:
    """``ops``, one task each; ``latencies`` holds the seconds of every call
    made in a timed ``run`` (in the order they ended)."""

    def __init__(self, ops: Sequence[Callable[[], Awaitable[Any]]]) -> None:
        self._ops = ops
        self._deadline = 0.0
        self._timed = False
        self.latencies: list[float] = []

    def run(self, seconds: float, *, timed: bool) -> asyncio.Future[list[None]]:
        """Calls every op back to back for ``seconds`` from now; a call begun
        before the deadline ends. Its tasks start at once; await the result for
        them to end (the caller may read a probe meanwhile)."""
        self._deadline = time.perf_counter() + seconds
        self._timed = timed
        return asyncio.gather(*(self._worker(op) for op in self._ops))

    async def _worker(self, op: Callable[[], Awaitable[Any]]) -> None:
        while True:
            started = time.perf_counter()
            if started >= self._deadline:
                return
            await op()
            if self._timed:
                self.latencies.append(time.perf_counter() - started)
