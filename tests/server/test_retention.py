"""Retention on demand: ``PurgeEndedSessions`` and ``runstore sessions purge
--ended-before``, on both backends, with two servers over one database.

Each test's sessions end in a window of its own far in the past, so its cut-off
reaches only its own sessions.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from runstore.v1 import session_admin_pb2 as sa
from tests.cli.test_admin_cli import runstore
from tests.support import Store, fails, failure_of, run_start, serving, ts, unique

DAY_MS = 86_400_000


_windows = itertools.count()


def window() -> int:
    """The start (ms) of a 200-day window in the 1700s no other test uses, each
    older than the last: what earlier tests left behind ended after any later
    cut-off (and each test session has fresh databases)."""
    return -8_000_000_000_000 - next(_windows) * 200 * DAY_MS


@pytest.fixture
async def second(database_url: str, store: Store) -> AsyncIterator[Store]:
    """Another server over the same database: a second replica."""
    async with serving(database_url, migrate=False) as replica:
        yield replica


async def ended_session(store: Store, ended_ms: int, *, running: bool = False) -> str:
    session_id = unique("retain")
    await store.admin.CreateSession(
        sa.CreateSessionRequest(session_id=session_id, created_at=ts(ended_ms - DAY_MS))
    )
    run = run_start(session_id=session_id, started_ms=ended_ms - DAY_MS + 1)
    await store.runtime.StartRootRun(run.root_request())
    if not running:
        await store.runtime.RecordRunTerminal(run.terminal_request())
    await store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=ts(ended_ms)))
    return session_id


async def exists(store: Store, session_id: str) -> bool:
    """True while the session loads; False once purged (its tombstone answers)."""
    try:
        await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))
    except grpc.aio.AioRpcError as err:
        assert failure_of(err).reason == "SESSION_PURGED", err
        return False
    return True


async def purge(store: Store, ended_before_ms: int, limit: int) -> sa.PurgeEndedSessionsResponse:
    return await store.admin.PurgeEndedSessions(
        sa.PurgeEndedSessionsRequest(ended_before=ts(ended_before_ms), limit=limit)
    )


async def test_purges_only_ended_quiescent_sessions_before_the_cut_off(store: Store) -> None:
    base = window()
    cut = base + 10 * DAY_MS
    old = [await ended_session(store, base + i * DAY_MS) for i in range(3)]
    at_cut = await ended_session(store, cut)  # not before the cut-off: kept
    busy = await ended_session(store, base + 4 * DAY_MS, running=True)  # a running run: kept
    active = await store.session()

    first = await purge(store, cut, 2)
    assert list(first.purged_session_ids) == old[:2] and first.more
    second_batch = await purge(store, cut, 2)
    assert list(second_batch.purged_session_ids) == old[2:] and not second_batch.more
    assert not (await purge(store, cut, 2)).purged_session_ids

    for session_id in old:
        assert not await exists(store, session_id)  # the contract's purge: a tombstone
    for session_id in (at_cut, busy, active):
        assert await exists(store, session_id)
    runs = await store.admin.ListRunsBySession(sa.ListRunsBySessionRequest(session_id=busy))
    assert len(runs.runs) == 1


async def test_bad_requests_name_their_field(store: Store) -> None:
    missing = await fails(store.admin.PurgeEndedSessions(sa.PurgeEndedSessionsRequest(limit=5)))
    assert (missing.code, missing.metadata.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "ended_before",
    )
    too_many = await fails(purge(store, window(), 1001))
    assert (too_many.code, too_many.metadata.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "limit",
    )


async def test_two_replicas_purging_at_once_purge_each_session_once(
    store: Store, second: Store
) -> None:
    base = window()
    cut = base + 100 * DAY_MS
    targets = await asyncio.gather(
        *(ended_session(store, base + i * DAY_MS // 10) for i in range(40))
    )
    kept = [
        await ended_session(store, base + DAY_MS, running=True),
        await ended_session(second, cut + 1),
    ]
    purged: list[str] = []

    async def drain(replica: Store) -> None:
        while True:
            batch = await purge(replica, cut, 3)
            purged.extend(batch.purged_session_ids)
            if not batch.more:
                return

    await asyncio.gather(*(drain(replica) for replica in (store, second, store, second)))
    assert sorted(purged) == sorted(targets)  # every one, none twice, nothing else
    for session_id in kept:
        assert await exists(store, session_id)


async def test_cli_purges_in_batches_up_to_the_limit(store: Store) -> None:
    base = window()
    cut = base + 10 * DAY_MS
    old = [await ended_session(store, base + i * DAY_MS) for i in range(3)]
    cut_iso = _iso(cut)

    unconfirmed = await runstore(store, "sessions", "purge", "--ended-before", cut_iso, stdin="n\n")
    assert unconfirmed.code == 1
    assert [await exists(store, session_id) for session_id in old] == [True] * 3

    limited = await runstore(
        store, "sessions", "purge", "--ended-before", cut_iso, "--limit", "2", "--yes", "--json"
    )
    assert limited.code == 0, limited.err
    assert [line["id"] for line in limited.lines()] == old[:2]
    rest = await runstore(store, "sessions", "purge", "--ended-before", cut_iso, "--yes")
    assert rest.code == 0, rest.err
    assert f"purged session {old[2]}" in rest.out and "purged 1 sessions" in rest.out

    both = await runstore(store, "sessions", "purge", "x", "--ended-before", cut_iso, "--yes")
    assert both.code == 2 and "not both" in both.err


def _iso(ms: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.isoformat().replace("+00:00", "Z")
