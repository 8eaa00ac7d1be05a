"""Group commit across calls (docs/scaling.md, "Group commit"): appends that
arrive while one is in flight go to PostgreSQL as one statement and one
commit, and every caller still gets its own outcome, exactly as alone.

A group is made to form deterministically: with one lane, a test transaction
holds the lock of a blocker run, so the blocker's append (a group of one)
waits in flight;
the appends sent meanwhile queue, and go together once it is released. Each
case builds one state twice in fresh IDs: the commands run as one group on
one copy and one after the other on the other copy, and both must answer and
store the same. On SQLite the commands are made one commit group of its
single writer (held while they queue), whose appends are one statement too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from runstore.contract.errors import RunstoreError, UnavailableError
from runstore.contract.model import AppendResult, RunStatus, SessionStatus
from runstore.server import call_arrivals, call_scope
from runstore.server.core.model import RecordDraft, Session
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from runstore.server.db import migrate, sqlite_groups
from runstore.server.db.append_groups import AppendGroups
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions, asyncpg_dsn
from runstore.server.db.sqlite import SqliteDatabase
from tests import postgres
from tests.backends import BACKENDS, opened
from tests.core.test_lifecycle_fast_paths import AGENT, T0, _state
from tests.server.test_sqlite_commit_groups import hold_the_writer

_ids = itertools.count()


@dataclass
class Served:
    db: Database
    url: str
    """The PostgreSQL URL, "" on SQLite."""


@pytest.fixture(scope="module", params=BACKENDS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    def one_lane(db: Any) -> None:
        if isinstance(db, PostgresDatabase):
            db.append_groups.lanes = 1  # the blocker's group holds the only lane

    directory = tmp_path_factory.mktemp("groups")
    async with opened(
        request.param, directory, "append-groups", pool_max=6, before_start=one_lane
    ) as it:
        yield Served(it.db, it.postgres_url)


def _note(run_id: str, session_id: str, key: str, payload: bytes = b'{"n":1}') -> RecordDraft:
    return RecordDraft(
        key, run_id, AGENT, session_id, "", "note", payload, T0, call_scope.namespace()
    )


@dataclass
class World:
    """One copy of a case's state, every ID suffixed with ``n``."""

    n: int

    def id(self, name: str) -> str:
        return f"{name}-{self.n}"


async def _build(db: Database, world: World) -> None:
    """Sessions ``s`` (active, runs a..d, done: completed) and ``ended`` (ended,
    run e still running), and a sessionless run ``free``; run a holds record
    "k", run e record "old"."""
    s, ended = world.id("s"), world.id("ended")
    k, old = _note(world.id("a"), s, "k"), _note(world.id("e"), ended, "old")  # made here: in scope

    async def fn(tx: Transaction) -> None:
        await tx.insert_session(Session(s, SessionStatus.ACTIVE, T0))
        await tx.insert_session(Session(ended, SessionStatus.ACTIVE, T0))
        for name in ("a", "b", "c", "d"):
            await tx.insert_run(_state(world.id(name), s, RunStatus.RUNNING))
        await tx.insert_run(_state(world.id("done"), s, RunStatus.COMPLETED))
        await tx.insert_run(_state(world.id("e"), ended, RunStatus.RUNNING))
        await tx.insert_run(_state(world.id("free"), "", RunStatus.RUNNING))
        await tx.append_record(k)
        await tx.append_record(old)
        await tx.end_session(ended, T0 + 1)

    await db.write(fn)


Command = Callable[[RuntimeStore, World], Awaitable[Any]]


def _append(run: str, key: str, payload: bytes = b'{"n":1}', session: str = "s") -> Command:
    def command(store: RuntimeStore, world: World) -> Awaitable[Any]:
        session_id = world.id(session) if session else ""
        return store.append_run_record(_note(world.id(run), session_id, key, payload))

    return command


def _batch(run: str, keys: Sequence[str], session: str = "s") -> Command:
    def command(store: RuntimeStore, world: World) -> Awaitable[Any]:
        session_id = world.id(session) if session else ""
        return store.append_run_records([_note(world.id(run), session_id, k) for k in keys])

    return command


def _answer(result: Any) -> Any:
    """A command's outcome, comparable between copies."""
    if isinstance(result, RunstoreError):
        return (type(result).__name__, result.field)
    if isinstance(result, BaseException):
        raise result
    if isinstance(result, AppendResult):
        return (result.id, result.inserted, result.session_status)
    return [_answer(item) for item in result]


async def _stored(db: Database, world: World) -> Any:
    async def fn(tx: Transaction) -> Any:
        positions = [
            (p, r.run_id.rsplit("-", 1)[0], r.id, r.event_key, r.payload)
            for p, r in await tx.session_records(world.id("s"), 0, 1000, 1 << 30)
        ]
        free, ended = [
            [(r.id, r.event_key) for r in await tx.run_records(world.id(run), 0, 100, 1 << 30)]
            for run in ("free", "e")
        ]
        return positions, free, ended

    return await db.read(fn)


async def _lock_run(db: Database, run_id: str) -> tuple[asyncio.Task[None], asyncio.Event]:
    """A PostgreSQL transaction that holds the lock of ``run_id``'s row (and
    nothing else) until the returned event is set."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold(tx: Transaction) -> None:
        conn = tx._conn  # type: ignore[attr-defined]
        await conn.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE", run_id)
        holding.set()
        await release.wait()

    task = asyncio.create_task(db.write(hold))
    await asyncio.wait_for(holding.wait(), 30)
    return task, release


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Bounded polling: ``condition`` holds within 10 s."""
    for _ in range(1000):
        if await condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never: {what}")


async def _lock_waits(url: str) -> int:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        waiting: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return waiting
    finally:
        await conn.close()


async def _as_one_group(
    served: Served, world: World, commands: Sequence[Command]
) -> tuple[list[Any], int]:
    """Runs ``commands`` so that they reach the database together (on
    PostgreSQL, as one group behind a blocked one); their outcomes in order,
    and how many groups the database sent for them (0 on SQLite)."""
    store = RuntimeStore(served.db, clock=lambda: T0 + 7)
    if isinstance(served.db, SqliteDatabase):
        return await _in_one_commit_group(served.db, store, world, commands)
    assert isinstance(served.db, PostgresDatabase)
    groups = served.db.append_groups
    holder, release = await _lock_run(served.db, world.id("d"))
    blocker = asyncio.create_task(store.append_run_record(_note(world.id("d"), world.id("s"), "z")))
    await _until(lambda: _lock_waits_at_least(served.url, 1), "the blocker waits for its lock")
    sent = groups.groups_sent
    calls = [asyncio.ensure_future(command(store, world)) for command in commands]

    async def all_queued() -> bool:
        return groups.waiting == len(commands)

    await _until(all_queued, "every command waits for the group in flight")
    release.set()
    await holder
    await blocker
    results = await asyncio.gather(*calls, return_exceptions=True)
    return list(results), groups.groups_sent - sent


async def _in_one_commit_group(
    db: SqliteDatabase, store: RuntimeStore, world: World, commands: Sequence[Command]
) -> tuple[list[Any], int]:
    """SQLite: the commands queue while the writer is held, so they are one
    commit group, whose appends go as one statement: the outcomes, and how
    many such statements ran."""
    statements = 0
    original = sqlite_groups.SqliteTransaction.append_group

    async def counted(self: Any, batches: Any) -> Any:
        nonlocal statements
        statements += 1
        return await original(self, batches)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite_groups.SqliteTransaction, "append_group", counted)
        held, release = await hold_the_writer(db)
        calls = [asyncio.ensure_future(command(store, world)) for command in commands]
        # Callbacks run in order: every call queues its job before the gate opens.
        asyncio.get_running_loop().call_soon(release.set)
        results = await asyncio.gather(*calls, return_exceptions=True)
        await held
    return list(results), statements


async def _lock_waits_at_least(url: str, count: int) -> bool:
    return await _lock_waits(url) >= count


async def _one_by_one(db: Database, world: World, commands: Sequence[Command]) -> list[Any]:
    store = RuntimeStore(db, clock=lambda: T0 + 7)
    if isinstance(db, PostgresDatabase):
        await store.append_run_record(_note(world.id("d"), world.id("s"), "z"))
    results: list[Any] = []
    for command in commands:
        try:
            results.append(await command(store, world))
        except RunstoreError as error:
            results.append(error)
    return results


CASES = {
    "a changed retry among new records": [
        _append("a", "k", b'{"changed":true}'),
        _append("b", "new"),
        _batch("c", ["c0", "c1", "c2"]),
        _append("a", "fresh"),
        _append("free", "f0", session=""),
    ],
    "exact retries, new records, a stopped run, an ended session": [
        _append("a", "k"),
        _append("b", "b0"),
        _append("done", "late"),
        _append("e", "after-end", session="ended"),
        _append("e", "old", session="ended"),
        _batch("c", ["c0", "c1"]),
        _append("b", "b1"),
        _batch("a", ["a2", "a3"]),
        _append("free", "f0", session=""),
    ],
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_group_answers_every_caller_as_alone(served: Served, case: str) -> None:
    commands = CASES[case]
    grouped, alone = World(next(_ids)), World(next(_ids))
    await _build(served.db, grouped)
    await _build(served.db, alone)
    results, groups = await _as_one_group(served, grouped, commands)
    expected = await _one_by_one(served.db, alone, commands)
    assert [_answer(r) for r in results] == [_answer(r) for r in expected]
    assert await _stored(served.db, grouped) == await _stored(served.db, alone)
    positions, _, _ = await _stored(served.db, grouped)
    assert [p for p, *_ in positions] == list(range(1, len(positions) + 1))
    assert groups == 1, "the commands' common cases went to the database as one statement"


async def test_a_conflict_in_a_group_fails_only_its_caller(served: Served) -> None:
    world = World(next(_ids))
    await _build(served.db, world)
    results, _ = await _as_one_group(served, world, CASES["a changed retry among new records"])
    conflict, *others = results
    assert isinstance(conflict, RunstoreError) and conflict.reason == "EVENT_CONFLICT"
    assert [_answer(r) for r in others] == [
        ("1", True, SessionStatus.ACTIVE),
        [(str(i), True, SessionStatus.ACTIVE) for i in (1, 2, 3)],
        ("2", True, SessionStatus.ACTIVE),
        ("1", True, None),
    ]


@pytest.mark.postgres
async def test_a_group_that_fails_mid_statement_writes_nothing_and_is_unavailable() -> None:
    """A statement timeout (a database failure) while the group waits for a
    lock: PostgreSQL rolls the whole statement back, so none of the group's
    records is stored, and every caller of the group gets UNAVAILABLE; the
    same calls retried then store each record once."""
    async with postgres.fresh_database("runstore_group_failure") as url:
        await migrate.upgrade(url)
        db = PostgresDatabase(url, PostgresOptions(pool_min=1, pool_max=6, statement_timeout=3))
        db.append_groups.lanes = 1
        await db.start()
        try:
            world = World(next(_ids))
            await _build(db, world)
            store = RuntimeStore(db, clock=lambda: T0 + 7)
            groups = db.append_groups
            # Group 1 (run d) waits for d's lock; group 2 forms behind it and
            # then waits for c's lock until the statement times out.
            c_holder, c_release = await _lock_run(db, world.id("c"))
            d_holder, d_release = await _lock_run(db, world.id("d"))
            first = asyncio.create_task(
                store.append_run_record(_note(world.id("d"), world.id("s"), "z"))
            )
            await _until(lambda: _lock_waits_at_least(url, 1), "the first group waits")
            commands = [
                _append("a", "a1"),
                _batch("b", ["b0", "b1"]),
                _append("free", "f0", session=""),
                _append("c", "c0"),
            ]
            calls = [asyncio.ensure_future(command(store, world)) for command in commands]

            async def all_queued() -> bool:
                return groups.waiting == len(commands)

            await _until(all_queued, "the second group waits behind the first")
            sent = groups.groups_sent
            d_release.set()
            await d_holder
            await first
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert groups.groups_sent == sent + 1
            assert all(isinstance(r, UnavailableError) for r in results), results
            c_release.set()
            await c_holder
            positions, free, _ = await _stored(db, world)
            assert [(run, key) for _, run, _, key, _ in positions] == [
                ("a", "k"),
                ("d", "z"),
            ]
            assert free == []
            retried = [_answer(await command(store, world)) for command in commands]
            assert retried == [
                ("2", True, SessionStatus.ACTIVE),
                [("1", True, SessionStatus.ACTIVE), ("2", True, SessionStatus.ACTIVE)],
                ("1", True, None),
                ("1", True, SessionStatus.ACTIVE),
            ]
        finally:
            await db.close()


async def test_groups_leave_at_once_and_never_share_a_session_in_flight() -> None:
    """The first append leaves at once (no timer); appends arriving while
    every lane is busy form the next group; an append whose session is in a
    group in flight waits for it; a group's error reaches only its callers."""
    sent: list[list[str]] = []
    gates: list[asyncio.Event] = []

    async def write_group(batches: list[Sequence[RecordDraft]]) -> list[Any]:
        sent.append([batch[0].event_key for batch in batches])
        gate = asyncio.Event()
        gates.append(gate)
        await gate.wait()
        if any(batch[0].event_key == "fails" for batch in batches):
            raise UnavailableError("database unavailable; retry")
        return [[index + 1] for index, _ in enumerate(batches)]

    groups = AppendGroups(write_group, lanes=2)

    def append(key: str, session_id: str) -> asyncio.Future[list[int] | None]:
        return asyncio.ensure_future(groups.append([_note(f"run-{key}", session_id, key)]))

    async def sent_count(count: int) -> bool:
        return len(sent) == count

    first = append("a", "s1")
    await _until(lambda: sent_count(1), "the first append leaves alone, at once")
    same_session = append("b", "s1")
    other = append("c", "s2")
    await _until(lambda: sent_count(2), "a second lane takes the next append")
    queued = [append("d", "s3"), append("fails", "s4")]
    await _until(lambda: _true(groups.waiting == 3), "every lane is busy: the rest wait")
    gates[0].set()
    assert await first == [1]
    await _until(lambda: sent_count(3), "the next group leaves when a lane is free")
    assert sent == [["a"], ["c"], ["b", "d", "fails"]]
    gates[1].set()
    gates[2].set()
    assert await other == [1]
    for call in (same_session, *queued):
        with pytest.raises(UnavailableError):
            await call


async def _true(value: bool) -> bool:
    return value


async def test_the_calls_of_one_message_commit_in_one_group() -> None:
    """The calls one AppendRunRecordCalls message carries reach the groups a
    few event-loop turns apart (each passes the chain in its own task); with
    lanes free they still go in one group, one statement and one commit
    (``call_arrivals``). One of them held up elsewhere holds the rest back
    for no longer than a turn without progress."""
    sent: list[list[str]] = []

    async def write_group(batches: list[Sequence[RecordDraft]]) -> list[Any]:
        sent.append([batch[0].event_key for batch in batches])
        return [[1] for _ in batches]

    groups = AppendGroups(write_group, lanes=2)

    async def carried(key: str, turns: int, together: call_arrivals.Together) -> Any:
        arriving = call_arrivals.Arriving(together)
        call_arrivals.CURRENT.set(arriving)
        try:
            for _ in range(turns):  # the chain's steps before the database
                await asyncio.sleep(0)
            return await groups.append([_note(f"run-{key}", f"s-{key}", key)])
        finally:
            arriving.end()

    message = call_arrivals.Together(5)
    answers = await asyncio.gather(*(carried(f"m{n}", n, message) for n in range(5)))
    assert answers == [[1]] * 5
    assert sent == [["m0", "m1", "m2", "m3", "m4"]]

    sent.clear()
    elsewhere = asyncio.Event()

    async def held_up(together: call_arrivals.Together) -> None:
        arriving = call_arrivals.Arriving(together)
        call_arrivals.CURRENT.set(arriving)
        try:
            await elsewhere.wait()  # e.g. the database bound
        finally:
            arriving.end()

    message = call_arrivals.Together(3)
    blocked = asyncio.ensure_future(held_up(message))
    answers = await asyncio.gather(carried("a", 0, message), carried("b", 1, message))
    assert answers == [[1], [1]]
    assert sent == [["a", "b"]]
    elsewhere.set()
    await blocked
