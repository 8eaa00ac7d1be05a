"""ListSessions and ListRuns (docs/contract.md §9.8): filters, order, pages.

Tests share one server per backend, so each test lists inside a time window
of its own (a random thousand seconds in the 19th century) or an agent ID of
its own, and sees only its rows.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.server.core import listing
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.support import Store, fails_with, run_start, ts, unique

INVALID = grpc.StatusCode.INVALID_ARGUMENT
ACTIVE, ENDED = pb.SESSION_STATUS_ACTIVE, pb.SESSION_STATUS_ENDED


def window() -> int:
    """The start, in whole seconds, of a thousand-second window no other test uses."""
    return -4_000_000_000 + random.randrange(1_000_000) * 1000


def stamp(seconds: int, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


def key(session: pb.Session) -> tuple[int, int, str]:
    return (session.created_at.seconds, session.created_at.nanos, session.id)


def run_key(run: pb.RunMeta) -> tuple[int, int, str]:
    return (run.started_at.seconds, run.started_at.nanos, run.run_id)


async def create(store: Store, session_id: str, created_at: Timestamp) -> pb.Session:
    request = sa.CreateSessionRequest(session_id=session_id, created_at=created_at)
    return (await store.admin.CreateSession(request)).session


async def end(store: Store, session_id: str) -> None:
    await store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=ts(1)))


def in_window(base: int, **fields: Any) -> dict[str, Any]:
    return {"created_after": stamp(base), "created_before": stamp(base + 1000), **fields}


async def walk(
    call: Any, request_type: Any, items: str, page_size: int, **fields: Any
) -> list[Any]:
    """Every row of a listing, page after page."""
    seen: list[Any] = []
    token = ""
    while True:
        page = await call(request_type(page_size=page_size, page_token=token, **fields))
        rows = getattr(page, items)
        assert len(rows) <= page_size
        seen.extend(rows)
        token = page.next_page_token
        if not token:
            return seen


def walk_sessions(store: Store, page_size: int, **fields: Any) -> Any:
    return walk(store.admin.ListSessions, sa.ListSessionsRequest, "sessions", page_size, **fields)


def walk_runs(store: Store, page_size: int, **fields: Any) -> Any:
    return walk(store.admin.ListRuns, sa.ListRunsRequest, "runs", page_size, **fields)


# --- ListSessions ---------------------------------------------------------------


async def test_sessions_are_listed_by_created_at_then_id_in_full_pages(store: Store) -> None:
    base = window()
    created = []
    for i in range(11):
        # Pairs share a created_at, so the ID decides their order.
        created.append(await create(store, unique("list"), stamp(base + 500 - i // 2, 7)))
    listed = await walk_sessions(store, 3, **in_window(base))
    assert [s.id for s in listed] == [s.id for s in sorted(created, key=key)]
    assert listed[0] == sorted(created, key=key)[0]  # the whole session, as LoadSession has it
    first = await store.admin.ListSessions(sa.ListSessionsRequest(page_size=3, **in_window(base)))
    assert len(first.sessions) == 3 and first.next_page_token


async def test_the_last_page_has_no_token_even_when_it_is_full(store: Store) -> None:
    base = window()
    for i in range(4):
        await create(store, unique("full"), stamp(base + i))
    first = await store.admin.ListSessions(sa.ListSessionsRequest(page_size=2, **in_window(base)))
    second = await store.admin.ListSessions(
        sa.ListSessionsRequest(page_size=2, page_token=first.next_page_token, **in_window(base))
    )
    assert len(second.sessions) == 2
    assert second.next_page_token == ""


async def test_session_status_filter(store: Store) -> None:
    base = window()
    ids = [(await create(store, unique("status"), stamp(base + i))).id for i in range(6)]
    for session_id in ids[::2]:
        await end(store, session_id)
    by_status = {}
    for statuses in ([ACTIVE], [ENDED], [ACTIVE, ENDED], []):
        listed = await walk_sessions(store, 2, **in_window(base, statuses=statuses))
        by_status[tuple(statuses)] = [s.id for s in listed]
    assert by_status[(ACTIVE,)] == ids[1::2]
    assert by_status[(ENDED,)] == ids[::2]
    assert by_status[(ACTIVE, ENDED)] == ids
    assert by_status[()] == ids
    for nothing in ([pb.SESSION_STATUS_UNSPECIFIED], [99]):
        response = await store.admin.ListSessions(
            sa.ListSessionsRequest(**in_window(base, statuses=nothing))
        )
        assert list(response.sessions) == [] and response.next_page_token == ""


async def test_created_after_is_inclusive_and_created_before_exclusive(store: Store) -> None:
    base = window()
    ids = [(await create(store, unique("range"), stamp(base + i))).id for i in range(5)]
    listed = await walk_sessions(
        store, 10, created_after=stamp(base + 1), created_before=stamp(base + 3)
    )
    assert [s.id for s in listed] == ids[1:3]
    only_after = await walk_sessions(store, 10, created_after=stamp(base + 3))
    assert [s.id for s in only_after][:2] == ids[3:]
    empty = await store.admin.ListSessions(
        sa.ListSessionsRequest(created_after=stamp(base + 3), created_before=stamp(base + 3))
    )
    assert list(empty.sessions) == []


async def test_purged_sessions_are_not_listed(store: Store) -> None:
    base = window()
    kept = await create(store, unique("kept"), stamp(base + 1))
    purged = await create(store, unique("purged"), stamp(base + 2))
    await end(store, purged.id)
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=purged.id))
    assert [s.id for s in await walk_sessions(store, 5, **in_window(base))] == [kept.id]


async def test_a_walk_sees_every_session_that_existed_exactly_once_while_rows_are_added(
    store: Store,
) -> None:
    """New sessions land before, at and after the walk's position, some with the
    very created_at of the last row a page returned, while the pages are read."""
    base = window()
    existing = [await create(store, unique("walk"), stamp(base + 10 * i)) for i in range(30)]
    fields = in_window(base)
    seen: list[pb.Session] = []
    added: list[pb.Session] = []
    token = ""
    while True:
        request = sa.ListSessionsRequest(page_size=4, page_token=token, **fields)
        page, *more = await asyncio.gather(
            store.admin.ListSessions(request),
            *(
                create(store, unique("added"), stamp(base + random.randrange(0, 300)))
                for _ in range(3)
            ),
        )
        added.extend(more)
        seen.extend(page.sessions)
        if page.sessions:
            last = page.sessions[-1].created_at
            added.append(await create(store, unique("tie"), stamp(last.seconds, last.nanos)))
        token = page.next_page_token
        if not token:
            break
    ids = [s.id for s in seen]
    assert len(ids) == len(set(ids)), "a session was listed twice"
    assert {s.id for s in existing} <= set(ids)
    assert set(ids) <= {s.id for s in existing + added}
    assert ids == [s.id for s in sorted(seen, key=key)]


async def test_bad_page_arguments_are_invalid_read_arguments(store: Store) -> None:
    base = window()
    for i in range(3):
        await create(store, unique("args"), stamp(base + i))
    first = await store.admin.ListSessions(sa.ListSessionsRequest(page_size=1, **in_window(base)))
    cases = [
        (sa.ListSessionsRequest(page_size=-1), "page_size"),
        (sa.ListSessionsRequest(page_token="not a token"), "page_token"),
        (sa.ListSessionsRequest(page_token="eyJ4IjoxfQ"), "page_token"),  # {"x":1}
        # The token of one filter with another filter.
        (
            sa.ListSessionsRequest(page_token=first.next_page_token, statuses=[ACTIVE]),
            "page_token",
        ),
        (sa.ListSessionsRequest(created_after=stamp(10**12)), "created_after"),
    ]
    for request, field in cases:
        reason = "INVALID_ARGUMENT_READ" if field.startswith("page") else "CONTRACT_VALIDATION"
        info = await fails_with(store.admin.ListSessions(request), INVALID, reason)
        assert info.metadata["field"] == field, request


def test_page_size_zero_is_the_default_and_large_is_lowered() -> None:
    assert listing.page_size(0) == listing.DEFAULT_PAGE_SIZE
    assert listing.page_size(7) == 7
    assert listing.page_size(10**9) == listing.MAX_PAGE_SIZE


async def test_a_default_page_holds_the_default_number_of_sessions(store: Store) -> None:
    base = window()
    await asyncio.gather(
        *(
            create(store, unique("many"), stamp(base + i % 900, i))
            for i in range(listing.DEFAULT_PAGE_SIZE + 1)
        )
    )
    page = await store.admin.ListSessions(sa.ListSessionsRequest(**in_window(base)))
    assert len(page.sessions) == listing.DEFAULT_PAGE_SIZE and page.next_page_token


# --- ListRuns -------------------------------------------------------------------


async def start_root(store: Store, session_id: str, agent_id: str, started_ms: int) -> pb.RunStart:
    run = run_start(session_id=session_id, agent_id=agent_id, started_ms=started_ms)
    await store.runtime.StartRootRun(run.root_request())
    return run.start


async def start_one_shot(store: Store, agent_id: str, started_ms: int) -> pb.RunStart:
    run = run_start(agent_id=agent_id, started_ms=started_ms)
    await store.runtime.StartOneShotRun(run.one_shot_request())
    return run.start


async def test_runs_are_listed_by_started_at_then_run_id_with_every_filter(store: Store) -> None:
    base_ms = window() * 1000
    agent, other_agent = unique("agent"), unique("agent")
    session = (await create(store, unique("runs"), stamp(base_ms // 1000))).id
    other_session = (await create(store, unique("runs"), stamp(base_ms // 1000))).id
    runs = []
    for i in range(4):
        runs.append(await start_root(store, session, agent, base_ms + 1000 * (i // 2)))
        runs.append(await start_root(store, other_session, other_agent, base_ms + 1000 * i))
    lone = [await start_one_shot(store, agent, base_ms + 500 + i) for i in range(3)]
    ordered = sorted(
        runs + lone, key=lambda r: (r.started_at.seconds, r.started_at.nanos, r.run_id)
    )
    window_fields = {"started_after": ts(base_ms), "started_before": ts(base_ms + 1_000_000)}

    async def ids(**fields: Any) -> list[str]:
        return [r.run_id for r in await walk_runs(store, 2, **fields)]

    assert await ids(**window_fields) == [r.run_id for r in ordered]
    assert await ids(session_id=session) == [r.run_id for r in ordered if r.session_id == session]
    assert await ids(agent_id=agent) == [r.run_id for r in ordered if r.agent_id == agent]
    assert await ids(agent_id=agent, sessionless_only=True) == [r.run_id for r in lone]
    assert await ids(session_id=session, agent_id=other_agent) == []
    assert await ids(agent_id=agent, started_after=ts(base_ms + 1000)) == [
        r.run_id
        for r in ordered
        if r.agent_id == agent and r.started_at.seconds * 1000 >= base_ms + 1000
    ]
    listed = (await walk_runs(store, 10, session_id=session))[0]
    assert listed.session_id == session and listed.status == pb.RUN_STATUS_RUNNING
    assert dict(listed.labels) == {"site": "one"}


async def test_run_status_filter_alone_and_with_session_or_agent(store: Store) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    session = (await create(store, unique("st"), stamp(base_ms // 1000))).id
    runs = [run_start(session_id=session, agent_id=agent, started_ms=base_ms + i) for i in range(6)]
    for run in runs:
        await store.runtime.StartRootRun(run.root_request())
    await store.runtime.RecordRunTerminal(runs[0].terminal_request(pb.RUN_STATUS_COMPLETED))
    await store.runtime.RecordRunTerminal(runs[1].terminal_request(pb.RUN_STATUS_FAILED))
    await store.runtime.RecordRunTerminal(runs[2].terminal_request(pb.RUN_STATUS_COMPLETED))
    await store.runtime.RecordRunSuspension(runs[3].suspension_request())
    done = [pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED]
    window_fields = {"started_after": ts(base_ms), "started_before": ts(base_ms + 1000)}
    for fields in ({"session_id": session}, {"agent_id": agent}, window_fields):
        listed = await walk_runs(store, 2, statuses=done, **fields)
        assert [r.run_id for r in listed] == [runs[0].id, runs[1].id, runs[2].id], fields
        running = await walk_runs(store, 1, statuses=[pb.RUN_STATUS_RUNNING], **fields)
        assert [r.run_id for r in running] == [runs[4].id, runs[5].id]
        every = await walk_runs(store, 4, statuses=list(pb.RunStatus.values())[1:], **fields)
        assert [r.run_id for r in every] == [run.id for run in runs]
        suspended = await walk_runs(store, 4, statuses=[pb.RUN_STATUS_SUSPENDED, 42], **fields)
        assert [r.run_id for r in suspended] == [runs[3].id]
    nothing = await store.admin.ListRuns(
        sa.ListRunsRequest(session_id=session, statuses=[pb.RUN_STATUS_UNSPECIFIED])
    )
    assert list(nothing.runs) == []


async def test_a_run_walk_sees_every_run_that_existed_exactly_once_while_runs_start(
    store: Store,
) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    session = (await create(store, unique("walk"), stamp(base_ms // 1000))).id
    existing = [await start_root(store, session, agent, base_ms + 10 * i) for i in range(24)]
    seen: list[pb.RunMeta] = []
    added: list[pb.RunStart] = []
    token = ""
    while True:
        request = sa.ListRunsRequest(agent_id=agent, page_size=5, page_token=token)
        page, *more = await asyncio.gather(
            store.admin.ListRuns(request),
            *(
                start_root(store, session, agent, base_ms + random.randrange(0, 300))
                for _ in range(3)
            ),
        )
        added.extend(more)
        seen.extend(page.runs)
        token = page.next_page_token
        if not token:
            break
    ids = [r.run_id for r in seen]
    assert len(ids) == len(set(ids)), "a run was listed twice"
    assert {r.run_id for r in existing} <= set(ids)
    assert set(ids) <= {r.run_id for r in existing + added}
    assert ids == [r.run_id for r in sorted(seen, key=run_key)]


async def test_bad_run_listing_arguments(store: Store) -> None:
    agent = unique("agent")
    for i in range(2):
        await start_one_shot(store, agent, 1_000_000 + i)
    first = await store.admin.ListRuns(
        sa.ListRunsRequest(agent_id=agent, sessionless_only=True, page_size=1)
    )
    assert first.next_page_token
    cases = [
        (sa.ListRunsRequest(session_id="s", sessionless_only=True), "sessionless_only"),
        (sa.ListRunsRequest(page_size=-5), "page_size"),
        (sa.ListRunsRequest(agent_id=agent, page_token=first.next_page_token), "page_token"),
        (sa.ListRunsRequest(page_token="%%%"), "page_token"),
        (sa.ListRunsRequest(started_before=stamp(-(10**12))), "started_before"),
    ]
    for request, field in cases:
        reason = "CONTRACT_VALIDATION" if field.startswith("started") else "INVALID_ARGUMENT_READ"
        info = await fails_with(store.admin.ListRuns(request), INVALID, reason)
        assert info.metadata["field"] == field, request
    # The same filters take the token.
    second = await store.admin.ListRuns(
        sa.ListRunsRequest(
            agent_id=agent, sessionless_only=True, page_size=1, page_token=first.next_page_token
        )
    )
    assert len(second.runs) == 1 and second.next_page_token == ""
    assert second.runs[0].run_id != first.runs[0].run_id


@pytest.mark.parametrize("page_size", [1, 1000])
async def test_an_unknown_session_or_agent_lists_nothing(store: Store, page_size: int) -> None:
    for request in (
        sa.ListRunsRequest(session_id=unique("none"), page_size=page_size),
        sa.ListRunsRequest(agent_id=unique("none"), page_size=page_size),
    ):
        response = await store.admin.ListRuns(request)
        assert list(response.runs) == [] and response.next_page_token == ""
