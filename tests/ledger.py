"""What a store acknowledged under faults, for the tests that kill a server or
fail a database over (test_crash, test_failover): each acknowledged command,
to send again after the fault, and a count of acknowledgements to wait on."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support import Store

REACH_SECONDS = 120.0
"""A bound on waiting for a count of acknowledgements: writers that stall fail the test."""


@dataclass
class Acked:
    """An acknowledged command: how to send it again and what it answered."""

    send: Callable[[Store], Awaitable[Any]]
    result_id: Callable[[Any], str]
    record_id: str
    inserted: Callable[[Any], bool] | None = None
    """Whether an answer says it stored the command (None: not checked)."""


@dataclass
class Ledger:
    """Everything the store acknowledged, and the failures seen on the way."""

    records: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)
    commands: list[Acked] = field(default_factory=list)
    codes: collections.Counter[str] = field(default_factory=collections.Counter)
    acked: int = 0
    acked_at: list[float] = field(default_factory=list)
    progress: asyncio.Condition = field(default_factory=asyncio.Condition)

    def first_ack_after(self, moment: float) -> float:
        return min(t for t in self.acked_at if t > moment)

    async def ack(self) -> None:
        self.acked_at.append(time.monotonic())
        async with self.progress:
            self.acked += 1
            self.progress.notify_all()

    async def reach(self, count: int, tasks: list[asyncio.Future[None]]) -> None:
        """Waits for ``count`` acknowledgements; a task (writer, watcher) that
        failed fails this, and so does waiting longer than ``REACH_SECONDS``."""

        async def counted() -> None:
            async with self.progress:
                await self.progress.wait_for(lambda: self.acked >= count)

        waiter = asyncio.ensure_future(asyncio.wait_for(counted(), REACH_SECONDS))
        await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                task.result()  # raises the task's failure
        await waiter
