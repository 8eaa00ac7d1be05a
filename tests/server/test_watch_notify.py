"""PostgreSQL's cross-replica wake-up for Watch (§9.9): one NOTIFY after each
commit, on a connection of its own, coalesced while one is being sent.

The watchers' replicas here re-read only every hour, so the periodic re-read
cannot stand in for a notification that was never sent (the re-read itself is
tested with a lost notification in ``test_watch_replicas``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from runstore.server.db import postgres as postgres_backend
from runstore.server.db.postgres import asyncpg_dsn
from runstore.v1 import runtime_store_pb2 as rs
from tests import postgres
from tests.server.test_watch import append, collect, session_watch
from tests.server.test_watch_replicas import replica
from tests.support import fails

pytestmark = pytest.mark.postgres

NEVER = 3600.0
"""A poll interval no test waits for."""


def _keys(payload: str) -> set[str]:
    _origin, keys = json.loads(payload)
    return set(keys)


async def test_a_commit_wakes_a_watcher_on_another_replica_by_notify_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The NOTIFY runs once the record's transaction has committed (another
    connection already sees the record) and outside any transaction, and it
    is what wakes the other replica's watcher."""
    async with (
        postgres.fresh_database("runstore_notify") as url,
        replica(url, migrate=True, watch_poll_seconds=NEVER) as (writer, writer_db),
        replica(url, watch_poll_seconds=NEVER) as (watcher, watcher_db),
    ):
        admin = await asyncpg.connect(asyncpg_dsn(url))
        asked = 0
        seen_at_notify: list[tuple[bool, int, int]] = []
        original = postgres_backend._PostgresTransaction.notify
        committed = writer_db.wakeups.committed

        def counting(keys: Any) -> None:
            nonlocal asked
            asked += 1
            committed(keys)

        async def notify(self: Any, payload: str) -> None:
            wanted = asked
            visible = await admin.fetchval(
                "SELECT count(*) FROM records WHERE event_key LIKE 'after-commit-%'"
            )
            seen_at_notify.append((self._conn.is_in_transaction(), wanted, visible))
            await original(self, payload)

        try:
            session = await writer.session()
            run = await writer.root(session_id=session)
            stream = session_watch(watcher, session)
            first = await stream.read()  # open, with the backlog, before the writes
            assert [record.id for record in first.events] == ["1"]
            await asyncio.wait_for(watcher_db.wakeups.listening.wait(), 30)
            monkeypatch.setattr(postgres_backend._PostgresTransaction, "notify", notify)
            monkeypatch.setattr(writer_db.wakeups, "committed", counting)
            for index in range(3):
                await append(writer, run, f"after-commit-{index}")
            got = await asyncio.wait_for(collect(stream, 3), 30)
            stream.cancel()
        finally:
            await admin.close()
        assert got == [(run.id, str(i)) for i in range(2, 5)]
        assert seen_at_notify, "the writer sent NOTIFY"
        assert not any(in_transaction for in_transaction, _, _ in seen_at_notify)
        # Every commit that had asked for a wake-up was visible to others by then.
        assert all(visible >= wanted >= 1 for _, wanted, visible in seen_at_notify)


async def test_commits_during_one_notify_are_coalesced_into_the_next() -> None:
    """While one NOTIFY is on its way, later commits' keys pile up and leave
    in one notification, which wakes the other replica's watchers of all of them."""
    async with (
        postgres.fresh_database("runstore_notify") as url,
        replica(url, migrate=True, watch_poll_seconds=NEVER) as (writer, writer_db),
        replica(url, watch_poll_seconds=NEVER) as (watcher, watcher_db),
    ):
        session = await writer.session()
        trigger = await writer.root(session_id=session)
        runs = [await writer.root(session_id=session) for _ in range(5)]
        stream = session_watch(watcher, session)
        backlog = len((await stream.read()).events)
        await asyncio.wait_for(watcher_db.wakeups.listening.wait(), 30)

        real = writer_db.wakeups._notify
        sent: list[str] = []
        first_held = asyncio.Event()
        release = asyncio.Event()
        second_sent = asyncio.Event()

        async def held(payload: str) -> None:
            sent.append(payload)
            if len(sent) == 1:
                first_held.set()
                await release.wait()
            await real(payload)
            if len(sent) == 2:
                second_sent.set()

        writer_db.wakeups._notify = held  # type: ignore[method-assign]
        await append(writer, trigger, "trigger")
        await asyncio.wait_for(first_held.wait(), 30)
        for index, run in enumerate(runs):
            await append(writer, run, f"piled-{index}")
        release.set()
        await asyncio.wait_for(second_sent.wait(), 30)
        got = await asyncio.wait_for(collect(stream, 1 + len(runs)), 30)
        stream.cancel()
        assert len(sent) == 2, "five commits during one NOTIFY leave in one more"
        assert {f"r:{run.id}" for run in runs} | {f"s:{session}"} <= _keys(sent[1])
        assert sorted(run_id for run_id, _ in got) == sorted(
            [trigger.id, *(run.id for run in runs)]
        )
        assert backlog == 1 + len(runs)  # the started records were the backlog


async def test_a_failed_write_sends_no_notification() -> None:
    """Only a commit asks for a wake-up: a refused append (the same key with
    another payload) leaves nothing to send."""
    async with (
        postgres.fresh_database("runstore_notify") as url,
        replica(url, migrate=True, watch_poll_seconds=NEVER) as (writer, writer_db),
    ):
        run = await writer.root()
        sent: list[str] = []
        one_sent = asyncio.Event()

        async def spy(payload: str) -> None:
            sent.append(payload)
            one_sent.set()

        writer_db.wakeups._notify = spy  # type: ignore[method-assign]
        await append(writer, run, "once", payload=b'{"n":1}')
        await asyncio.wait_for(one_sent.wait(), 30)
        assert f"r:{run.id}" in _keys(sent[0])
        sent.clear()
        failure = await fails(
            writer.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record("once", payload=b'{"n":2}'))
            )
        )
        assert failure.reason == "EVENT_CONFLICT"
        # committed() queues keys synchronously and the sender records them
        # before its first await, so a queued wake-up would show in one of both.
        assert not sent and not writer_db.wakeups._pending
