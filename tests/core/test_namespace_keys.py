"""The namespace is part of every key (docs/namespaces.md, "Storage"): the
same session, run and record keys in two namespaces are independent objects,
down to the group commit, whose one statement may carry both namespaces' rows.

The namespace a call acts in is ``call_scope``'s; these tests name it as
the interceptor does, and insert the second namespace's row directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from runstore.contract.errors import RunstoreError
from runstore.contract.model import RunStartOutcome, SessionStatus
from runstore.contract.namespaces import DEFAULT
from runstore.server import call_scope
from runstore.server.call_scope import acting_in
from runstore.server.core.context import ContextStore
from runstore.server.core.model import RecordDraft, Session
from runstore.server.core.ports import PURGED, Database, Transaction, run_key, session_key
from runstore.server.core.store import RuntimeStore
from runstore.server.db.postgres import PostgresDatabase
from runstore.server.retention import NANOS_PER_SECOND, RetentionSettings, RetentionTask
from tests.core.test_append_groups import (
    Command,
    Served,
    World,
    _append,
    _as_one_group,
    _batch,
    _build,
    _ids,
    _note,
    served,
)
from tests.core.test_lifecycle_fast_paths import T0, _start_command

__all__ = ["served"]  # the backends' fixture, shared with the group commit tests

OTHER = "team-b"


async def _add_namespace(db: Database, name: str) -> None:
    async def fn(tx: Transaction) -> None:
        conn = tx._conn  # type: ignore[attr-defined]
        if isinstance(db, PostgresDatabase):
            await conn.execute(
                "INSERT INTO namespaces (name, state, created_at, updated_at)"
                " VALUES ($1, 'active', 1, 1) ON CONFLICT DO NOTHING",
                name,
            )
        else:
            conn.execute(
                "INSERT OR IGNORE INTO namespaces (name, state, created_at, updated_at)"
                " VALUES (?, 'active', 1, 1)",
                (name,),
            )

    await db.write(fn)


def _in(namespace: str, command: Command) -> Command:
    """``command`` as a call in ``namespace`` (its drafts are made there)."""

    async def run(store: RuntimeStore, world: World) -> Any:
        call_scope.enter_call(namespace)  # this call's task only
        return await command(store, world)

    return run


def _answer(result: Any) -> Any:
    if isinstance(result, RunstoreError):
        return (type(result).__name__, result.field)
    if isinstance(result, BaseException):
        raise result
    if isinstance(result, list):
        return [_answer(item) for item in result]
    return (result.id, result.inserted, result.session_status)


async def _state_of(db: Database, world: World, namespace: str) -> Any:
    """Each run's records, and the session's order, as seen in ``namespace``."""

    async def fn(tx: Transaction) -> Any:
        runs = {
            run: [
                (r.id, r.event_key, r.payload)
                for r in await tx.run_records(world.id(run), 0, 100, 1 << 30)
            ]
            for run in ("a", "b", "free", "e")
        }
        order = await tx.session_records(world.id("s"), 0, 1000, 1 << 30)
        positions = [position for position, _ in order]
        assert positions == list(range(1, len(order) + 1))  # dense in each namespace
        keys = [(r.run_id, r.event_key) for _, r in order if r.run_id != world.id("d")]
        return runs, keys

    with acting_in(namespace):
        return await db.read(fn)


_COMMANDS: tuple[Command, ...] = (
    _append("a", "k1"),
    _append("a", "k2"),
    _batch("b", ["x1", "x2"]),
    _append("a", "k"),  # an exact retry of the stored record
    _append("a", "k", payload=b'{"n":2}'),  # a changed retry: a conflict
    _append("free", "f1", session=""),
    _append("e", "late", session="ended"),  # its session ended
)


async def test_same_keys_in_two_namespaces_keep_their_own_ids_order_and_retries(
    served: Served,
) -> None:
    world = World(next(_ids))
    await _add_namespace(served.db, OTHER)
    await _build(served.db, world)
    with acting_in(OTHER):
        await _build(served.db, world)  # the very same IDs and keys

    commands = [_in(ns, c) for c in _COMMANDS for ns in (DEFAULT, OTHER)]
    results, groups = await _as_one_group(served, world, commands)

    answers = [_answer(result) for result in results]
    mine, theirs = answers[0::2], answers[1::2]
    assert mine == theirs  # each namespace answers as if alone
    assert mine[:4] == [
        ("2", True, mine[0][2]),
        ("3", True, mine[0][2]),
        mine[2],
        ("1", False, mine[3][2]),
    ]
    assert [r[0] for r in mine[2]] == ["1", "2"]
    assert mine[4][0] == "EventConflictError"
    if isinstance(served.db, PostgresDatabase):
        # Two groups, not one per call: the namespaces travel together (only the
        # changed retry of "k" waits for the group after its exact retry).
        assert groups == 2
    default_state = await _state_of(served.db, world, DEFAULT)
    assert default_state == await _state_of(served.db, world, OTHER)
    runs, keys = default_state
    assert [key for _, key, _ in runs["a"]] == ["k", "k1", "k2"]
    assert [key for _, key in keys] == ["k", "k1", "k2", "x1", "x2"]


async def _outcome(call: Callable[[], Awaitable[Any]]) -> Any:
    try:
        result = await call()
    except RunstoreError as error:
        return (type(error).__name__, error.field, error.permanent)
    return result


async def test_a_namespace_misses_every_row_of_another(served: Served) -> None:
    world = World(next(_ids))
    await _add_namespace(served.db, OTHER)
    await _build(served.db, world)
    store = RuntimeStore(served.db, clock=lambda: T0 + 7)
    before = await _state_of(served.db, world, DEFAULT)

    def reads(run: str, session: str) -> list[Callable[[], Awaitable[Any]]]:
        draft = RecordDraft(
            "new", run, "agent", session, "", "note", b"{}", T0, call_scope.namespace()
        )
        return [
            lambda: store.load_run(run),
            lambda: store.list_run_records(run, "", 10),
            lambda: store.list_session_run_records(session, "", 10),
            lambda: store.run_tail(run),
            lambda: store.session_tail(session),
            lambda: store.append_run_record(draft),
        ]

    async def tx_reads(tx: Transaction, run: str, session: str) -> Any:
        return (
            await tx.session(session),
            await tx.run(run),
            await tx.record_by_key(run, "k"),
            await tx.runs_by_session(session),
            await tx.context_head(run),
            await tx.memory_event_count("agent", run),
        )

    with acting_in(OTHER):  # the other namespace sees the IDs as absent
        seen = [await _outcome(call) for call in reads(world.id("a"), world.id("s"))]
        seen_tx = await served.db.read(lambda tx: tx_reads(tx, world.id("a"), world.id("s")))
    absent = [await _outcome(call) for call in reads("nowhere-a", "nowhere-s")]
    absent_tx = await served.db.read(lambda tx: tx_reads(tx, "nowhere-a", "nowhere-s"))
    assert seen == absent
    assert seen_tx == absent_tx
    assert seen[0][0] == "RunNotFoundError"
    # and the other namespace's attempts changed nothing here
    assert await _state_of(served.db, world, DEFAULT) == before


async def _set_retention(db: Database, name: str, ended_sessions_s: float) -> None:
    async def fn(tx: Transaction) -> None:
        conn = tx._conn  # type: ignore[attr-defined]
        if isinstance(db, PostgresDatabase):
            await conn.execute(
                "UPDATE namespaces SET retain_ended_sessions_s = $1 WHERE name = $2",
                ended_sessions_s,
                name,
            )
        else:
            conn.execute(
                "UPDATE namespaces SET retain_ended_sessions_s = ? WHERE name = ?",
                (ended_sessions_s, name),
            )

    await db.write(fn)


async def test_retention_runs_in_each_namespace_with_its_own_overrides(served: Served) -> None:
    session_id = f"quiet-{next(_ids)}"

    async def ended_session(tx: Transaction) -> None:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, T0))
        await tx.end_session(session_id, T0 + 1)

    async def lookup(tx: Transaction) -> Any:
        return await tx.session(session_id)

    await _add_namespace(served.db, OTHER)
    await _set_retention(served.db, OTHER, 1.0)  # the server keeps ended sessions for ever
    await served.db.write(ended_session)
    with acting_in(OTHER):
        await served.db.write(ended_session)  # the same ID, ended as long ago

    task = RetentionTask(
        RuntimeStore(served.db, clock=lambda: T0 + 7),
        ContextStore(served.db),
        served.db.retention_lock,  # type: ignore[attr-defined]
        RetentionSettings(ended_sessions=None, sessionless_runs=None, contexts=None),
        clock=lambda: T0 + 10 * NANOS_PER_SECOND,
    )
    report = await task.run_pass()

    assert report.ran and report.sessions >= 1
    assert isinstance(await served.db.read(lookup), Session)  # default: kept
    with acting_in(OTHER):
        assert await served.db.read(lookup) is PURGED  # team-b: purged, tombstoned
    assert call_scope.scope() == DEFAULT  # the pass left the caller's scope as it was


async def test_a_commit_in_one_namespace_wakes_only_its_own_watchers(served: Served) -> None:
    world = World(next(_ids))
    await _add_namespace(served.db, OTHER)
    await _build(served.db, world)
    with acting_in(OTHER):
        await _build(served.db, world)
    store = RuntimeStore(served.db, clock=lambda: T0 + 7)
    wakeups: Any = served.db.wakeups  # type: ignore[attr-defined]
    run_id, session_id = world.id("a"), world.id("s")
    with (
        wakeups.subscribe(run_key(DEFAULT, run_id)) as mine,
        wakeups.subscribe(session_key(DEFAULT, session_id)) as my_session,
        wakeups.subscribe(run_key(OTHER, run_id)) as theirs,
    ):
        with acting_in(OTHER):
            await store.append_run_record(_note(run_id, session_id, "woken"))
        # One commit wakes all its keys at once: had it touched this
        # namespace's keys, they would be set by now too.
        await asyncio.wait_for(theirs.wait(), 10)
        assert not mine.is_set() and not my_session.is_set()


async def test_the_same_run_starts_in_two_namespaces_at_once(served: Served) -> None:
    n = next(_ids)
    session_id, run_id = f"both-s{n}", f"both-r{n}"
    await _add_namespace(served.db, OTHER)

    async def session(tx: Transaction) -> None:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, T0))

    async def start(namespace: str) -> Any:
        call_scope.enter_call(namespace)  # this task only
        await served.db.write(session)
        store = RuntimeStore(served.db)
        command = _start_command(run_id, session_id, "")
        first, again = await asyncio.gather(
            store.start_root_run(command), store.start_root_run(command)
        )
        run = await store.load_run(run_id)
        # Which of the two racing starts inserts is the race's: compare as sets.
        return (
            {first.outcome, again.outcome},
            {first.started.id, again.started.id},
            sorted([first.started.inserted, again.started.inserted]),
            run.run_id,
        )

    mine, theirs = await asyncio.gather(start(DEFAULT), start(OTHER))
    # One run each: started once, the retry answers the same, in both namespaces.
    assert mine == theirs == ({RunStartOutcome.PROCEED}, {"1"}, [False, True], run_id)
