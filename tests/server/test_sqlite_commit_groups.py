"""Group commit on SQLite: concurrent writes share one transaction, yet each
write stays atomic and a failure never takes another write down with it."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runstore.contract.errors import InternalError, RunstoreError, ValidationError
from runstore.contract.model import SessionStatus
from runstore.server.core.model import Session
from runstore.server.core.ports import Transaction
from runstore.server.db import migrate
from runstore.server.db.sqlite import SqliteDatabase, SqliteOptions

pytestmark = pytest.mark.usefixtures("acting_in_default")  # direct database work


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    await migrate.upgrade(url)
    database = SqliteDatabase(tmp_path / "batch.db", SqliteOptions(write_group_limit=64))
    await database.start()
    try:
        yield database
    finally:
        await database.close()


def create(session_id: str):  # type: ignore[no-untyped-def]
    async def fn(tx: Transaction) -> str:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))
        return session_id

    return fn


def create_then_fail(session_id: str, error: Exception):  # type: ignore[no-untyped-def]
    async def fn(tx: Transaction) -> str:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, 1))
        raise error

    return fn


async def exists(db: SqliteDatabase, session_id: str) -> bool:
    async def fn(tx: Transaction) -> bool:
        return await tx.session(session_id) is not None

    return await db.read(fn)


async def hold_the_writer(db: SqliteDatabase) -> tuple[asyncio.Future[str], threading.Event]:
    """Occupies the writer thread until released, so later writes queue up and
    are taken as one batch."""
    inside, release = threading.Event(), threading.Event()

    async def gate(tx: Transaction) -> str:
        inside.set()
        release.wait()
        return "gate"

    held = asyncio.ensure_future(db.write(gate))
    await asyncio.to_thread(inside.wait)
    return held, release


async def test_a_failing_write_in_a_batch_is_undone_alone(db: SqliteDatabase) -> None:
    ids = [f"ok-{i}" for i in range(10)]
    runs: collections.Counter[str] = collections.Counter()

    def counted(session_id: str):  # type: ignore[no-untyped-def]
        inner = create(session_id)

        async def fn(tx: Transaction) -> str:
            runs[session_id] += 1
            return await inner(tx)

        return fn

    functions = [counted(i) for i in ids[:5]]
    functions.append(create_then_fail("bad-contract", ValidationError("nope")))
    functions.append(create_then_fail("bad-bug", KeyError("surprise")))
    functions += [counted(i) for i in ids[5:]]
    held, release = await hold_the_writer(db)
    writes = [asyncio.ensure_future(db.write(fn)) for fn in functions]
    # Callbacks run in order: every write task queues its job before the gate opens.
    asyncio.get_running_loop().call_soon(release.set)
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    assert await held == "gate"
    assert outcomes[:5] == ids[:5] and outcomes[7:] == ids[5:]
    # The writes before each failure were redone once per failure: one batch.
    assert [runs[i] for i in ids] == [3] * 5 + [1] * 5
    assert isinstance(outcomes[5], ValidationError)
    assert isinstance(outcomes[6], InternalError)
    for session_id in ids:
        assert await exists(db, session_id)
    assert not await exists(db, "bad-contract")
    assert not await exists(db, "bad-bug")


async def test_a_database_failure_fails_the_whole_batch_and_keeps_nothing(
    db: SqliteDatabase,
) -> None:
    async def duplicate(tx: Transaction) -> None:
        await tx.insert_session(Session("dup", SessionStatus.ACTIVE, 1))
        await tx.insert_session(Session("dup", SessionStatus.ACTIVE, 1))  # primary key

    held, release = await hold_the_writer(db)
    writes = [
        asyncio.ensure_future(db.write(fn)) for fn in (create("before"), duplicate, create("after"))
    ]
    asyncio.get_running_loop().call_soon(release.set)
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    await held
    assert all(isinstance(outcome, RunstoreError) for outcome in outcomes)
    assert not any(o.permanent for o in outcomes if isinstance(o, RunstoreError))
    for session_id in ("before", "dup", "after"):
        assert not await exists(db, session_id)
    assert await db.write(create("later")) == "later"  # the writer carries on
