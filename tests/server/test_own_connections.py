"""The connections a replica opens outside its pool (LISTEN, NOTIFY, the
retention lock) are closed or terminated, never left for the garbage
collector: a close that fails or is cancelled terminates the connection."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from runstore.server.db.connect_pacing import close_connection
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions
from tests import postgres


class _Connection:
    """A connection whose close never finishes (or fails), as a frozen or
    gone database makes it."""

    def __init__(self, failure: BaseException | None = None) -> None:
        self.closing = asyncio.Event()
        self.terminated = False
        self._failure = failure

    async def close(self) -> None:
        self.closing.set()
        if self._failure is not None:
            raise self._failure
        await asyncio.Event().wait()

    def terminate(self) -> None:
        self.terminated = True


async def test_a_cancelled_close_terminates_the_connection_and_stays_cancelled() -> None:
    conn = _Connection()
    closing = asyncio.ensure_future(close_connection(conn, 60))
    await conn.closing.wait()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert conn.terminated


async def test_a_failed_close_terminates_the_connection_and_is_not_raised() -> None:
    conn = _Connection(OSError("connection reset"))
    await close_connection(conn, 60)
    assert conn.terminated


async def test_a_close_past_its_time_terminates_the_connection() -> None:
    conn = _Connection()
    await close_connection(conn, 0.01)
    assert conn.terminated


@pytest.mark.postgres
async def test_closing_the_database_while_the_listen_connection_hangs_terminates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wake-up listener's connection hangs in its close (a database that
    stopped answering): closing the database cancels the listener, and the
    connection is terminated rather than left open until garbage collection
    (which surfaces as an "unclosed connection" ResourceWarning)."""
    async with postgres.fresh_database("runstore_own_conns") as url:
        db = PostgresDatabase(url, PostgresOptions(pool_min=1, pool_max=2))
        await db.start()
        try:
            with db.wakeups.subscribe("any"):
                await asyncio.wait_for(db.wakeups.listening.wait(), 30)
            hanging: list[asyncpg.Connection] = []

            async def close(self: asyncpg.Connection, **_options: Any) -> None:
                hanging.append(self)
                await asyncio.Event().wait()

            monkeypatch.setattr(asyncpg.Connection, "close", close)
            closed = asyncio.ensure_future(db.wakeups.close())
            await asyncio.wait_for(closed, 30)
        finally:
            monkeypatch.undo()
            await db.close()
        assert hanging, "the listener's connection was not closed at all"
        assert all(conn.is_closed() for conn in hanging)
