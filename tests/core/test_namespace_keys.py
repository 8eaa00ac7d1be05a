"""The namespace is part of every key (docs/namespaces.md, "Storage"): the
same session, run and record keys in two namespaces are independent objects,
down to the group commit, whose one statement may carry both namespaces' rows.

The namespace a call acts in is ``call_namespace``'s; these tests set it as
the interceptor does, and insert the second namespace's row directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from runstore.contract.errors import RunstoreError
from runstore.server import call_namespace
from runstore.server.core.model import RecordDraft
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from runstore.server.db.postgres import PostgresDatabase
from tests.core.test_append_groups import (
    Command,
    Served,
    World,
    _append,
    _as_one_group,
    _batch,
    _build,
    _ids,
    served,
)
from tests.core.test_lifecycle_fast_paths import T0

__all__ = ["served"]  # the backends' fixture, shared with the group commit tests

OTHER = "team-b"


@contextlib.contextmanager
def acting_in(namespace: str) -> Iterator[None]:
    before = call_namespace.current()
    call_namespace.set_current(namespace)
    try:
        yield
    finally:
        call_namespace.set_current(before)


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
        call_namespace.set_current(namespace)  # this call's task only
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

    commands = [_in(ns, c) for c in _COMMANDS for ns in (call_namespace.DEFAULT, OTHER)]
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
    default_state = await _state_of(served.db, world, call_namespace.DEFAULT)
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
    before = await _state_of(served.db, world, call_namespace.DEFAULT)

    def reads(run: str, session: str) -> list[Callable[[], Awaitable[Any]]]:
        draft = RecordDraft("new", run, "agent", session, "", "note", b"{}", T0)
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
    assert await _state_of(served.db, world, call_namespace.DEFAULT) == before


@pytest.fixture(autouse=True)
def _default_namespace() -> Iterator[None]:
    with acting_in(call_namespace.DEFAULT):
        yield
