"""A fast path that loses a race to a concurrent writer of the same session
falls back to the full rules, for each of them (docs/contract.md §9.2.1,
§9.2.2, §9.3, §9.3.1, §9.4.1, §9.4.2, §9.4.3).

On PostgreSQL the race is made to happen: a writer holds the session's lock
with a new record of another run of the session written but not committed;
the command's one statement then waits for that lock, and once the writer
commits it carries the session position it read in its own snapshot, which
the writer's record now holds. The statement fails with a unique violation,
the database answers that it wrote nothing, and the full rules store the
command after the writer's record. Without that fallback the command would
fail with the driver's error.

SQLite has one writer, so the same two writes are serialised and never
collide: the fast path stores the command, before or after the other write.
On both backends every position of the session is taken once, densely.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from runstore.contract import lifecycle
from runstore.contract.model import RunStatus, SessionStatus
from runstore.server import call_scope
from runstore.server.core import fast_paths
from runstore.server.core.model import (
    GuardedChange,
    OneShotChildRunStart,
    RecordDraft,
    RunCancellation,
    RunEnding,
    RunState,
    RunSuspension,
    RunTerminal,
    Session,
)
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from runstore.server.db.postgres import asyncpg_dsn
from tests.backends import BACKENDS, opened
from tests.core.test_change_fast_paths import CHECKPOINT, REASON, Change
from tests.core.test_change_fast_paths import _record as _change_record
from tests.core.test_child_start_fast_path import _command as _child_command
from tests.core.test_lifecycle_fast_paths import (
    AGENT,
    T0,
    _completion,
    _note,
    _start_command,
    _state,
)

_ids = itertools.count()

KINDS = ["append", "batch", "start", "child", "cancel", "suspend", "end"]
NEW_RUN = ("start", "child")
"""The kinds whose command creates its run."""


class Watched:
    """The database, with what each fast path answered."""

    def __init__(self, inner: Database) -> None:
        self._inner = inner
        self.answers: list[tuple[str, bool]] = []
        """(fast path, whether it stored) in call order."""

    async def write(self, fn: Any) -> Any:
        return await self._inner.write(fn)

    async def read(self, fn: Any) -> Any:
        return await self._inner.read(fn)

    def _answer(self, kind: str, result: Any) -> Any:
        self.answers.append((kind, result is not None))
        return result

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        return self._answer("append", await self._inner.append_if_writable(record))

    async def append_records_if_writable(self, batch: Any) -> list[int] | None:
        return self._answer("batch", await self._inner.append_records_if_writable(batch))

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        return self._answer("start", await self._inner.start_if_new(run, started))

    async def end_if_running(self, ending: RunEnding) -> int | None:
        return self._answer("end", await self._inner.end_if_running(ending))

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        return self._answer("child", await self._inner.start_child_if_new(run, link, started))

    async def change_if_running(self, change: GuardedChange) -> int | None:
        kind = "cancel" if change.preconditions == fast_paths.CANCEL else "suspend"
        return self._answer(kind, await self._inner.change_if_running(change))


@pytest.fixture(scope="module", params=BACKENDS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Database, str]]:
    """The database and, for PostgreSQL, its URL (to watch its lock waits)."""
    directory = tmp_path_factory.mktemp("collisions")
    async with opened(request.param, directory, "collisions", pool_max=4) as it:
        yield it.db, it.postgres_url


def _command(
    kind: str, store: RuntimeStore, run_id: str, session_id: str, parent_id: str
) -> Awaitable[Any]:
    """The command of fast path ``kind`` on ``run_id`` (a new run for a start,
    a child of ``parent_id`` for a child start)."""
    if kind == "append":
        return store.append_run_record(_note(run_id, session_id, "new"))
    if kind == "batch":
        return store.append_run_records([_note(run_id, session_id, f"new{i}") for i in range(3)])
    if kind == "start":
        return store.start_root_run(_start_command(run_id, session_id, ""))
    if kind == "child":
        child = _child_command(run_id, session_id, parent_id, "")
        assert child.parent_linked is not None
        link = replace(child.parent_linked, agent_id=AGENT)
        return store.start_child_run(replace(child, parent_linked=link))
    if kind == "cancel":
        intent = _change_record("cancel", run_id, session_id, Change())
        return store.record_run_cancellation(RunCancellation(run_id, REASON, intent))
    if kind == "suspend":
        suspended = _change_record("suspend", run_id, session_id, Change())
        return store.record_run_suspension(RunSuspension(run_id, CHECKPOINT, suspended))
    ending = RecordDraft(
        "done",
        run_id,
        AGENT,
        session_id,
        "",
        lifecycle.RUN_COMPLETED,
        _completion(RunStatus.COMPLETED, ""),
        T0 + 5_000_000,
        call_scope.namespace(),
    )
    return store.record_run_terminal(RunTerminal(run_id, RunStatus.COMPLETED, ending))


async def _until_a_statement_waits_for_a_lock(url: str) -> None:
    """Bounded polling of the server's view: some backend of this database is
    blocked on a lock (the fast path's statement, behind the held session)."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        for _ in range(1000):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting:
                return
            await asyncio.sleep(0.01)
        pytest.fail("the fast path's statement never waited for the session's lock")
    finally:
        await conn.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_fast_path_that_loses_a_race_falls_back_to_the_full_rules(
    served: tuple[Database, str], kind: str
) -> None:
    db, url = served
    n = next(_ids)
    session_id, writer, target = f"race-s{n}", f"race-w{n}", f"race-t{n}"
    run_id = f"race-n{n}" if kind in NEW_RUN else target

    firsts = {existing: _note(existing, session_id, "first") for existing in (writer, target)}
    concurrent = _note(writer, session_id, "concurrent")

    async def build(tx: Transaction) -> None:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, T0))
        for existing in (writer, target):
            await tx.insert_run(_state(existing, session_id, RunStatus.RUNNING))
            await tx.append_record(firsts[existing])

    await db.write(build)
    watched = Watched(db)
    store = RuntimeStore(watched, clock=lambda: T0 + 7)
    holding, release = asyncio.Event(), asyncio.Event()

    def concurrent_write(pause: bool) -> Callable[[Transaction], Awaitable[None]]:
        async def fn(tx: Transaction) -> None:
            # Locks the session, then the writer's run, as every writer does.
            await tx.record_target(writer, "", for_update=True)
            await tx.append_record(concurrent)
            if pause:
                holding.set()
                await release.wait()

        return fn

    if url:
        other = asyncio.create_task(db.write(concurrent_write(pause=True)))
        await asyncio.wait_for(holding.wait(), 30)
        command = asyncio.create_task(_command(kind, store, run_id, session_id, target))
        await _until_a_statement_waits_for_a_lock(url)
        release.set()
        await other
        result = await command
        assert watched.answers == [(kind, False)], "the fast path collided and wrote nothing"
    else:
        result, _ = await asyncio.gather(
            _command(kind, store, run_id, session_id, target),
            db.write(concurrent_write(pause=False)),
        )
        assert watched.answers == [(kind, True)], "one writer: the fast path never collides"

    async def look(tx: Transaction) -> tuple[list[tuple[int, str, str]], RunState | None]:
        rows = await tx.session_records(session_id, 0, 100, 1 << 30)
        return [(p, r.run_id, r.event_key) for p, r in rows], await tx.run(run_id)

    positions, run = await db.read(look)
    new_records = [
        (run_id, key)
        for key in {
            "append": ["new"],
            "batch": ["new0", "new1", "new2"],
            "start": ["started"],
            "child": ["started"],
            "cancel": ["done"],
            "suspend": ["done"],
            "end": ["done"],
        }[kind]
    ]
    if kind == "child":
        new_records.insert(0, (target, "linked"))
    assert [p for p, _, _ in positions] == list(range(1, len(positions) + 1)), positions
    assert sorted((r, k) for _, r, k in positions) == sorted(
        [(writer, "first"), (target, "first"), (writer, "concurrent"), *new_records]
    )
    if url:
        # The full rules ran after the writer committed: the command comes last.
        assert [(r, k) for _, r, k in positions[-len(new_records) :]] == new_records
    first_id = 1 if kind in NEW_RUN else 2
    ids = [str(first_id + i) for i in range(len(new_records))]
    if kind == "batch":
        assert [r.id for r in result] == ids and all(r.inserted for r in result)
    elif kind == "start":
        assert (result.started.id, result.started.inserted) == ("1", True)
    elif kind == "child":
        assert (result.started.id, result.started.inserted) == ("1", True)
        assert (result.parent_record.id, result.parent_record.inserted) == ("2", True)
    else:
        assert (result.id, result.inserted, result.session_status) == (
            ids[0],
            True,
            SessionStatus.ACTIVE,
        )
    assert run is not None
    assert run.status is {"end": RunStatus.COMPLETED, "suspend": RunStatus.SUSPENDED}.get(
        kind, RunStatus.RUNNING
    )


async def test_a_one_shot_child_start_that_loses_a_race_for_its_parent_falls_back(
    served: tuple[Database, str],
) -> None:
    """Sessionless, the race is for the parent's next record ID: a writer holds
    the parent's lock with a record of the parent written but not committed;
    the child's one statement waits for that lock and then collides with the
    writer's record ID. The full rules store the child after the writer's record."""
    db, url = served
    n = next(_ids)
    parent_id, run_id = f"race-op{n}", f"race-oc{n}"
    first, concurrent = _note(parent_id, "", "first"), _note(parent_id, "", "concurrent")
    command = _child_command(run_id, "", parent_id, "")
    assert command.parent_linked is not None
    start = OneShotChildRunStart(
        command.run, replace(command.parent_linked, agent_id=AGENT), command.started
    )

    async def build(tx: Transaction) -> None:
        await tx.insert_run(_state(parent_id, "", RunStatus.RUNNING))
        await tx.append_record(first)

    await db.write(build)
    watched = Watched(db)
    store = RuntimeStore(watched, clock=lambda: T0 + 7)
    holding, release = asyncio.Event(), asyncio.Event()

    async def concurrent_write(tx: Transaction) -> None:
        await tx.record_target(parent_id, "", for_update=True)
        await tx.append_record(concurrent)
        if url:
            holding.set()
            await release.wait()

    if url:
        other = asyncio.create_task(db.write(concurrent_write))
        await asyncio.wait_for(holding.wait(), 30)
        child = asyncio.create_task(store.start_one_shot_child_run(start))
        await _until_a_statement_waits_for_a_lock(url)
        release.set()
        await other
        result = await child
        assert watched.answers == [("child", False)], "the fast path collided and wrote nothing"
    else:
        result, _ = await asyncio.gather(
            store.start_one_shot_child_run(start), db.write(concurrent_write)
        )
        assert watched.answers == [("child", True)], "one writer: the fast path never collides"

    parent_records = await db.read(lambda tx: tx.run_records(parent_id, 0, 100, 1 << 30))
    keys = [(r.id, r.event_key) for r in parent_records]
    assert sorted(keys) == [(1, "first"), (2, keys[1][1]), (3, keys[2][1])]
    assert {k for _, k in keys[1:]} == {"concurrent", "linked"}
    if url:
        assert keys[2] == (3, "linked"), "the full rules ran after the writer committed"
    assert (result.started.id, result.started.inserted) == ("1", True)
    assert (result.parent_record.inserted, result.parent_record.session_status) == (True, None)
