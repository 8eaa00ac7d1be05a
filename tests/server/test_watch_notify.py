"""PostgreSQL's cross-replica wake-up for Watch (§9.9): a NOTIFY after commits,
on a connection of its own (not the calls' pool), coalesced while one is being
sent and at most one every few milliseconds, and only while another replica
listens.

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

from runstore.contract.namespaces import DEFAULT
from runstore.server.core.ports import run_key, session_key
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
        original = writer_db.wakeups._notify
        committed = writer_db.wakeups.committed

        def counting(keys: Any) -> None:
            nonlocal asked
            asked += 1
            committed(keys)

        async def notify(payload: str) -> None:
            wanted = asked
            visible = await admin.fetchval(
                "SELECT count(*) FROM records WHERE event_key LIKE 'after-commit-%'"
            )
            await original(payload)
            notifier = writer_db.wakeups._notifier
            assert notifier is not None
            seen_at_notify.append((notifier.is_in_transaction(), wanted, visible))

        try:
            session = await writer.session()
            run = await writer.root(session_id=session)
            stream = session_watch(watcher, session)
            first = await stream.read()  # open, with the backlog, before the writes
            assert [record.id for record in first.events] == ["1"]
            await asyncio.wait_for(watcher_db.wakeups.listening.wait(), 30)
            monkeypatch.setattr(writer_db.wakeups, "_notify", notify)
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
        # Every commit that had asked for a wake-up was visible to others by then
        # (a notification may still carry the run's start, asked before the patch).
        assert all(visible >= wanted for _, wanted, visible in seen_at_notify)
        assert any(wanted >= 1 for _, wanted, _ in seen_at_notify)


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
        assert {run_key(DEFAULT, run.id) for run in runs} | {
            session_key(DEFAULT, session)
        } <= _keys(sent[1])
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

        async def anyone() -> bool:
            return True  # as if another replica listened

        writer_db.wakeups._notify = spy  # type: ignore[method-assign]
        writer_db.wakeups._anyone_listening = anyone  # type: ignore[method-assign]
        await append(writer, run, "once", payload=b'{"n":1}')
        await asyncio.wait_for(one_sent.wait(), 30)
        assert run_key(DEFAULT, run.id) in _keys(sent[0])
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


async def _sender_idle(db: Any) -> None:
    """Until the writer's sender has taken every queued key (bounded)."""
    wakeups = db.wakeups
    for _ in range(1000):
        if not wakeups._pending and not wakeups._has_pending.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sender never took its keys")


async def test_no_notification_while_nobody_listens_and_one_at_once_when_someone_does() -> None:
    """Appends with no replica listening cost no NOTIFY; a replica that begins
    to watch says so, and the next commit elsewhere wakes it without waiting
    for the writer's next look at who listens."""
    async with (
        postgres.fresh_database("runstore_notify") as url,
        replica(url, migrate=True, watch_poll_seconds=NEVER) as (writer, writer_db),
        replica(url, watch_poll_seconds=NEVER) as (watcher, watcher_db),
    ):
        writer_db.wakeups._listeners_seconds = NEVER  # only the announcement can tell it
        session = await writer.session()
        run = await writer.root(session_id=session)
        for index in range(20):
            await append(writer, run, f"unwatched-{index}")
        await _sender_idle(writer_db)
        assert writer_db.wakeups.notifications == 0
        assert writer_db.wakeups._notifier is not None  # it looked, once
        stream = session_watch(watcher, session)
        backlog = len((await stream.read()).events)
        await asyncio.wait_for(watcher_db.wakeups.listening.wait(), 30)
        for _ in range(500):  # the announcement reaches the writer (bounded)
            if writer_db.wakeups._others_listen:
                break
            await asyncio.sleep(0.01)
        await append(writer, run, "watched")
        (got,) = await asyncio.wait_for(collect(stream, 1), 30)
        stream.cancel()
        assert backlog == 21 and got == (run.id, "22")
        assert writer_db.wakeups.notifications >= 1


async def test_a_notification_needs_no_connection_of_the_calls_pool() -> None:
    """With every pooled connection taken, another replica's watcher is still woken."""
    async with (
        postgres.fresh_database("runstore_notify") as url,
        replica(url, migrate=True, watch_poll_seconds=NEVER) as (_writer, writer_db),
        replica(url, watch_poll_seconds=NEVER) as (_watcher, watcher_db),
    ):
        pool = writer_db._pool
        assert pool is not None
        with watcher_db.wakeups.subscribe("s:held-pool") as event:
            await asyncio.wait_for(watcher_db.wakeups.listening.wait(), 30)
            held = [await pool.acquire() for _ in range(writer_db.options.pool_max)]
            try:
                writer_db.wakeups.committed({"s:held-pool"})
                await asyncio.wait_for(event.wait(), 10)
            finally:
                for conn in held:
                    await pool.release(conn)
        admin = await asyncpg.connect(asyncpg_dsn(url))
        try:
            names = await admin.fetch(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            )
        finally:
            await admin.close()
        assert "runstore-notify" in {row["application_name"] for row in names}


async def test_notifications_leave_at_most_once_per_interval() -> None:
    """Commits in a tight loop: keys coalesce into one NOTIFY per interval at most."""
    async with (
        postgres.fresh_database("runstore_notify") as url,
        replica(url, migrate=True, watch_poll_seconds=NEVER) as (_writer, writer_db),
        replica(url, watch_poll_seconds=NEVER) as (_watcher, watcher_db),
    ):
        with watcher_db.wakeups.subscribe("s:busy") as event:
            await asyncio.wait_for(watcher_db.wakeups.listening.wait(), 30)
            wakeups = writer_db.wakeups
            loop = asyncio.get_running_loop()
            began = loop.time()
            number = 0
            while loop.time() - began < 0.3:
                number += 1
                # The same keys each time: one payload per NOTIFY, so the count is sends.
                wakeups.committed({"r:busy", "s:busy"})
                await asyncio.sleep(0)
            elapsed = loop.time() - began
            await _sender_idle(writer_db)
            await asyncio.wait_for(event.wait(), 10)
        assert number > 100, "the loop committed often"
        assert 1 <= wakeups.notifications <= elapsed / wakeups._notify_interval + 2
