"""The namespace directory keeps what this replica changed while a read of
the table was in flight: that read's snapshot may predate the change, and must
neither hide a namespace just created here (its calls would be NOT_FOUND and
its streams ended) nor bring back one just deleted here."""

from __future__ import annotations

import asyncio
from typing import Any

from runstore.server.core.namespace_model import ACTIVE, Namespace
from runstore.server.core.namespaces import NamespaceDirectory


def _row(name: str) -> Namespace:
    return Namespace(name=name, state=ACTIVE, created_at=1, updated_at=1)


class _SlowTable:
    """A database whose read of the namespaces answers a snapshot taken when
    the read began, once the test lets it finish."""

    def __init__(self, rows: list[Namespace]) -> None:
        self.rows = rows
        self.reading = asyncio.Event()
        self.finish = asyncio.Event()

    async def read(self, fn: Any) -> list[Namespace]:
        snapshot = list(self.rows)
        self.reading.set()
        await self.finish.wait()
        return snapshot


async def test_a_namespace_created_during_a_read_stays_active_and_is_not_gone() -> None:
    table = _SlowTable([])
    directory = NamespaceDirectory(table)  # type: ignore[arg-type]
    gone: list[str] = []
    directory.on_gone(gone.append)
    reading = asyncio.ensure_future(directory.refresh())
    await table.reading.wait()
    table.rows.append(_row("team-a"))  # committed after the read's snapshot
    directory.created("team-a", _row("team-a"))
    table.finish.set()
    await reading
    assert await directory.is_active("team-a")
    assert directory.settings("team-a") == _row("team-a")
    assert gone == []


async def test_a_namespace_deleted_during_a_read_stays_deleted() -> None:
    table = _SlowTable([_row("team-b")])
    directory = NamespaceDirectory(table)  # type: ignore[arg-type]
    table.finish.set()
    await directory.refresh()
    assert await directory.is_active("team-b")
    table.finish.clear()
    table.reading.clear()
    reading = asyncio.ensure_future(directory.refresh())
    await table.reading.wait()
    directory.deleted("team-b")  # the read's snapshot still has it
    table.finish.set()
    await reading
    assert not await directory.is_active("team-b")
    assert directory.settings("team-b") is None


async def test_a_later_read_sees_the_table_again() -> None:
    table = _SlowTable([])
    directory = NamespaceDirectory(table)  # type: ignore[arg-type]
    table.finish.set()
    directory.created("team-c", _row("team-c"))  # no read in flight: nothing kept
    await directory.refresh()
    assert not await directory.is_active("team-c")  # the table says it is not there
