"""What a store acknowledged under faults, for the tests that kill a server or
fail a database over (test_crash, test_failover): each acknowledged command,
to send again after the fault, the records it acknowledged, and a count of
acknowledgements to wait on."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runstore.v1 import types_pb2 as pb
from tests.support import Store

ResultIds = str | tuple[str, ...]
"""What an acknowledged command answered: the ID of its one result, or the IDs
of all the records it acknowledged, in the order of its response (a child
start's link on the parent, then the child's ``run_started``)."""

REACH_SECONDS = 120.0
"""A bound on waiting for a count of acknowledgements: writers that stall fail the test."""


@dataclass
class Acked:
    """An acknowledged command: how to send it again and what it answered."""

    send: Callable[[Store], Awaitable[Any]]
    result_id: Callable[[Any], ResultIds]
    record_id: ResultIds
    inserted: Callable[[Any], bool] | None = None
    """Whether an answer says it stored the command, or any of its records
    (None: not checked)."""


@dataclass
class Ledger:
    """Everything the store acknowledged, and the failures seen on the way."""

    records: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)
    """(run ID, event key) → the acknowledged record ID and the payload sent."""
    commands: list[Acked] = field(default_factory=list)
    codes: collections.Counter[str] = field(default_factory=collections.Counter)
    acked: int = 0
    acked_at: list[float] = field(default_factory=list)
    progress: asyncio.Condition = field(default_factory=asyncio.Condition)

    def acknowledge(self, record: pb.RunRecord, record_id: str) -> None:
        """``record`` was acknowledged as stored under ``record_id`` (in its
        own run: a link record under the parent run)."""
        self.records[(record.run_id, record.event_key)] = (record_id, record.payload)

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
