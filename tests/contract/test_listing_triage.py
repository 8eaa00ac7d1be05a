"""Triage in ListRuns and ListSessions (docs/contract.md §9.8): newest first,
ID and agent prefixes, labels, root-only, status counts, and a failed run's
failure, end and duration on its RunMeta.

Tests share one server per backend: each lists inside IDs or a time window of
its own.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import grpc
import pytest

from runstore.client import RemoteSessionAdmin, RunFailureSummary, RunStatus, SyncRemoteSessionAdmin
from runstore.contract import lifecycle
from runstore.server.core import listing
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.contract.test_listings import create, stamp, walk_runs, walk_sessions, window
from tests.support import Store, fails_with, run_start, ts, unique

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NEWEST = sa.LIST_ORDER_NEWEST_FIRST


async def started(store: Store, base_ms: int, count: int, **fields: Any) -> list[Any]:
    """``count`` sessionless runs started a millisecond apart from ``base_ms``."""
    runs = []
    for i in range(count):
        run = run_start(started_ms=base_ms + i, **fields)
        await store.runtime.StartOneShotRun(run.one_shot_request())
        runs.append(run)
    return runs


def in_window(base_ms: int) -> dict[str, Any]:
    return {"started_after": ts(base_ms), "started_before": ts(base_ms + 1_000_000)}


async def test_runs_newest_first_page_through_every_run_once(store: Store) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    runs = await started(store, base_ms, 7, agent_id=agent)
    # Two runs in one millisecond: the ID breaks the tie, descending too.
    runs += await started(store, base_ms + 3, 1, agent_id=agent)
    expected = sorted(runs, key=lambda r: (r.start.started_at.ToNanoseconds(), r.id), reverse=True)
    for fields in ({"agent_id": agent}, in_window(base_ms)):
        listed = await walk_runs(store, 3, order=NEWEST, **fields)
        assert [r.run_id for r in listed] == [r.id for r in expected], fields
    oldest = await walk_runs(store, 3, order=sa.LIST_ORDER_OLDEST_FIRST, agent_id=agent)
    assert [r.run_id for r in oldest] == [r.id for r in reversed(expected)]


async def test_newest_first_with_several_statuses_merges_descending(store: Store) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    runs = await started(store, base_ms, 6, agent_id=agent)
    for run in runs[::2]:
        await store.runtime.RecordRunTerminal(run.terminal_request(pb.RUN_STATUS_FAILED))
    for run in runs[1:4:2]:
        await store.runtime.RecordRunTerminal(run.terminal_request(pb.RUN_STATUS_COMPLETED))
    statuses = [pb.RUN_STATUS_FAILED, pb.RUN_STATUS_COMPLETED]
    for fields in ({"agent_id": agent}, in_window(base_ms)):
        listed = await walk_runs(store, 2, order=NEWEST, statuses=statuses, **fields)
        assert [r.run_id for r in listed] == [r.id for r in reversed(runs[:5])], fields


async def test_run_id_exact_and_prefix_and_agent_prefix(store: Store) -> None:
    base_ms = window() * 1000
    stem = unique("triage")
    agent_stem = unique("agents")
    first = await started(store, base_ms, 3, agent_id=f"{agent_stem}-a")
    second = await started(store, base_ms + 10, 2, agent_id=f"{agent_stem}-b")
    named = []
    for i, suffix in enumerate(["x1", "x2", "y1"]):
        run = run_start(run_id=f"{stem}-{suffix}", started_ms=base_ms + 20 + i)
        await store.runtime.StartOneShotRun(run.one_shot_request())
        named.append(run)
    # A run whose ID only contains the stem is not a prefix match.
    inner = run_start(run_id=f"z{stem}-x3", started_ms=base_ms + 30)
    await store.runtime.StartOneShotRun(inner.one_shot_request())

    async def ids(**fields: Any) -> list[str]:
        return [r.run_id for r in await walk_runs(store, 2, **fields)]

    assert await ids(run_id=named[1].id) == [named[1].id]
    assert await ids(run_id=named[1].id, order=NEWEST) == [named[1].id]
    assert await ids(run_id_prefix=f"{stem}-x") == [named[0].id, named[1].id]
    assert await ids(run_id_prefix=f"{stem}-x", order=NEWEST) == [named[1].id, named[0].id]
    assert await ids(run_id_prefix=stem) == [r.id for r in named]
    assert await ids(agent_id_prefix=agent_stem) == [r.id for r in first + second]
    assert await ids(agent_id_prefix=f"{agent_stem}-b", order=NEWEST) == [
        r.id for r in reversed(second)
    ]
    assert await ids(agent_id_prefix=f"{agent_stem}-c") == []


async def test_label_filters_need_every_pair_exactly(store: Store) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    spellings = [
        {"team": "red", "tier": "1"},
        {"team": "red"},
        {"team": "redder", "tier": "1"},
        {"team": "blue", "note": '"team": "red"'},
        {"tëam": "rød", "x": "a,b"},
    ]
    runs = []
    for i, labels in enumerate(spellings):
        run = run_start(agent_id=agent, labels=labels, started_ms=base_ms + i)
        await store.runtime.StartOneShotRun(run.one_shot_request())
        runs.append(run)

    async def ids(labels: dict[str, str]) -> list[str]:
        return [r.run_id for r in await walk_runs(store, 2, agent_id=agent, labels=labels)]

    assert await ids({"team": "red"}) == [runs[0].id, runs[1].id]
    assert await ids({"team": "red", "tier": "1"}) == [runs[0].id]
    assert await ids({"tier": "1"}) == [runs[0].id, runs[2].id]
    assert await ids({"tëam": "rød"}) == [runs[4].id]
    assert await ids({"x": "a,b"}) == [runs[4].id]
    assert await ids({"team": "re"}) == []


async def test_root_only_leaves_children_out(store: Store) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    session = (await create(store, unique("roots"), stamp(base_ms // 1000))).id
    root = run_start(session_id=session, agent_id=agent, started_ms=base_ms)
    await store.runtime.StartRootRun(root.root_request())
    child = run_start(
        session_id=session, agent_id=agent, parent_run_id=root.id, started_ms=base_ms + 1
    )
    await store.runtime.StartChildRun(child.child_request(agent))
    every = [r.run_id for r in await walk_runs(store, 5, session_id=session)]
    roots = [r.run_id for r in await walk_runs(store, 5, session_id=session, root_only=True)]
    assert every == [root.id, child.id] and roots == [root.id]


async def test_parent_run_id_lists_exactly_a_runs_children_in_pages(store: Store) -> None:
    """Its children, none of its grandchildren, none of another run's, in start
    order both ways; a token only with its own parent; not with root_only."""
    base_ms = window() * 1000
    agent = unique("agent")
    session = (await create(store, unique("family"), stamp(base_ms // 1000))).id
    roots = []
    for i in range(2):
        root = run_start(session_id=session, agent_id=agent, started_ms=base_ms + i)
        await store.runtime.StartRootRun(root.root_request())
        roots.append(root)
    children: dict[str, list[Any]] = {root.id: [] for root in roots}
    for i in range(7):  # interleaved: the two roots' children alternate in time
        parent = roots[i % 2]
        child = run_start(
            session_id=session, agent_id=agent, parent_run_id=parent.id, started_ms=base_ms + 10 + i
        )
        link = child.child_request(agent, link_key=f"linked-{i}", tool_call_id=f"call-{i}")
        await store.runtime.StartChildRun(link)
        children[parent.id].append(child)
    first_child = children[roots[0].id][0]
    grandchild = run_start(
        session_id=session, agent_id=agent, parent_run_id=first_child.id, started_ms=base_ms + 30
    )
    await store.runtime.StartChildRun(grandchild.child_request(agent))
    await store.runtime.RecordRunTerminal(first_child.terminal_request(pb.RUN_STATUS_FAILED))

    for root in roots:
        expected = [child.id for child in children[root.id]]
        listed = await walk_runs(store, 2, parent_run_id=root.id)
        assert [r.run_id for r in listed] == expected
        newest = await walk_runs(store, 3, parent_run_id=root.id, order=NEWEST)
        assert [r.run_id for r in newest] == expected[::-1]
    assert [r.run_id for r in await walk_runs(store, 2, parent_run_id=first_child.id)] == [
        grandchild.id
    ]
    assert await walk_runs(store, 2, parent_run_id=grandchild.id) == []
    failed = await walk_runs(store, 2, parent_run_id=roots[0].id, statuses=[pb.RUN_STATUS_FAILED])
    assert [r.run_id for r in failed] == [first_child.id]
    counted = await store.admin.ListRuns(
        sa.ListRunsRequest(parent_run_id=roots[0].id, count_statuses=True, page_size=1)
    )
    counts = {c.status: c.count for c in counted.status_counts}
    assert counts[pb.RUN_STATUS_FAILED] == 1 and counts[pb.RUN_STATUS_RUNNING] == 3

    page = await store.admin.ListRuns(sa.ListRunsRequest(parent_run_id=roots[0].id, page_size=1))
    assert page.next_page_token
    elsewhere = sa.ListRunsRequest(parent_run_id=roots[1].id, page_token=page.next_page_token)
    info = await fails_with(store.admin.ListRuns(elsewhere), INVALID, "INVALID_ARGUMENT_READ")
    assert info.metadata["field"] == "page_token"
    both = sa.ListRunsRequest(parent_run_id=roots[0].id, root_only=True)
    info = await fails_with(store.admin.ListRuns(both), INVALID, "INVALID_ARGUMENT_READ")
    assert info.metadata["field"] == "parent_run_id"
    bad = sa.ListRunsRequest(parent_run_id="a\x00b")
    info = await fails_with(store.admin.ListRuns(bad), INVALID, "CONTRACT_VALIDATION")
    assert info.metadata["field"] == "parent_run_id"


async def test_sessions_newest_first_and_by_id(store: Store) -> None:
    base = window()
    stem = unique("sess")
    made = [await create(store, f"{stem}-{i}", stamp(base + i)) for i in range(5)]
    other = await create(store, f"{stem}x-0", stamp(base + 9))
    fields = {"created_after": stamp(base), "created_before": stamp(base + 1000)}
    newest = await walk_sessions(store, 2, order=NEWEST, **fields)
    assert [s.id for s in newest] == [s.id for s in reversed([*made, other])]
    assert [s.id for s in await walk_sessions(store, 2, session_id=made[2].id)] == [made[2].id]
    by_prefix = await walk_sessions(store, 2, session_id_prefix=f"{stem}-", order=NEWEST)
    assert [s.id for s in by_prefix] == [s.id for s in reversed(made)]


async def test_status_counts_ignore_the_status_filter_and_are_capped(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    runs = await started(store, base_ms, 5, agent_id=agent)
    for run in runs[:3]:
        await store.runtime.RecordRunTerminal(run.terminal_request(pb.RUN_STATUS_FAILED))
    request = sa.ListRunsRequest(
        agent_id=agent, statuses=[pb.RUN_STATUS_RUNNING], page_size=1, count_statuses=True
    )
    page = await store.admin.ListRuns(request)
    counts = {c.status: (c.count, c.estimated) for c in page.status_counts}
    assert counts[pb.RUN_STATUS_FAILED] == (3, False)
    assert counts[pb.RUN_STATUS_RUNNING] == (2, False)
    assert counts[pb.RUN_STATUS_COMPLETED] == (0, False)
    assert len(page.runs) == 1
    uncounted = await store.admin.ListRuns(sa.ListRunsRequest(agent_id=agent))
    assert list(uncounted.status_counts) == []
    monkeypatch.setattr(listing, "COUNT_CAP", 2)
    capped = await store.admin.ListRuns(sa.ListRunsRequest(agent_id=agent, count_statuses=True))
    counts = {c.status: (c.count, c.estimated) for c in capped.status_counts}
    assert counts[pb.RUN_STATUS_FAILED] == (2, True)
    assert counts[pb.RUN_STATUS_RUNNING] == (2, False)
    stem = unique("counted")
    await create(store, f"{stem}-a", stamp(window()))
    sessions = await store.admin.ListSessions(
        sa.ListSessionsRequest(session_id_prefix=stem, count_statuses=True)
    )
    counted = {c.status: c.count for c in sessions.status_counts}
    assert counted == {pb.SESSION_STATUS_ACTIVE: 1, pb.SESSION_STATUS_ENDED: 0}


async def test_a_failed_run_carries_its_failure_end_and_duration(store: Store) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    failing, repaired, done = await started(store, base_ms, 3, agent_id=agent)
    failure = lifecycle.RunFailure(
        message="tool timed out", kind="timeout", code="E42", retryable=True, debug_message="x"
    )
    # The fast path (a running run ended in one statement) ...
    await store.runtime.RecordRunTerminal(
        failing.terminal_request(pb.RUN_STATUS_FAILED, failure=failure, at_ms=base_ms + 2500)
    )
    # ... and the full rules (a repair).
    await store.runtime.RepairRunTerminal(
        rs.RepairRunTerminalRequest(
            run_id=repaired.id,
            status=pb.RUN_STATUS_FAILED,
            record=repaired.completed(status="failed", at_ms=base_ms + 10),
        )
    )
    await store.runtime.RecordRunTerminal(done.terminal_request(at_ms=base_ms + 1000))
    listed = {r.run_id: r for r in await walk_runs(store, 10, agent_id=agent)}
    loaded = (await store.runtime.LoadRun(rs.LoadRunRequest(run_id=failing.id))).run
    for meta in (listed[failing.id], loaded):
        assert (meta.failure.message, meta.failure.kind) == ("tool timed out", "timeout")
        assert (meta.failure.code, meta.failure.retryable) == ("E42", True)
        assert meta.ended_at.ToMilliseconds() == base_ms + 2500
        assert meta.duration.ToMilliseconds() == 2500
    assert listed[repaired.id].failure == pb.RunFailure(message="boom", kind="internal")
    assert not listed[done.id].HasField("failure")
    assert listed[done.id].duration.ToMilliseconds() == 1000 - 2


async def test_bad_triage_filters_name_their_field(store: Store) -> None:
    agent = unique("agent")
    await started(store, window() * 1000, 2, agent_id=agent)
    first = await store.admin.ListRuns(sa.ListRunsRequest(agent_id=agent, page_size=1))
    cases = [
        (sa.ListRunsRequest(run_id="r", run_id_prefix="r"), "run_id_prefix"),
        (sa.ListRunsRequest(agent_id="a", agent_id_prefix="a"), "agent_id_prefix"),
        (sa.ListRunsRequest(labels={"": "v"}), "labels"),
        (sa.ListRunsRequest(run_id_prefix="\x00"), "run_id_prefix"),
        (sa.ListRunsRequest(order=7), "order"),
        (
            sa.ListRunsRequest(agent_id=agent, order=NEWEST, page_token=first.next_page_token),
            "page_token",
        ),
    ]
    for request, field in cases:
        reason = "CONTRACT_VALIDATION" if "\x00" in request.run_id_prefix else None
        info = await fails_with(
            store.admin.ListRuns(request), INVALID, reason or "INVALID_ARGUMENT_READ"
        )
        assert info.metadata["field"] == field, request
    session_cases = [
        (sa.ListSessionsRequest(session_id="s", session_id_prefix="s"), "session_id_prefix"),
        (sa.ListSessionsRequest(order=-1), "order"),
    ]
    for session_request, field in session_cases:
        info = await fails_with(
            store.admin.ListSessions(session_request), INVALID, "INVALID_ARGUMENT_READ"
        )
        assert info.metadata["field"] == field


async def test_the_python_client_lists_newest_failed_runs_with_counts_and_durations(
    store: Store,
) -> None:
    base_ms = window() * 1000
    agent = unique("agent")
    runs = await started(store, base_ms, 3, agent_id=agent)
    for offset, run in enumerate(runs[:2]):
        await store.runtime.RecordRunTerminal(
            run.terminal_request(pb.RUN_STATUS_FAILED, at_ms=base_ms + 1500 + offset)
        )
    async with RemoteSessionAdmin(store.target) as admin:
        page = await admin.list_runs(
            agent_id_prefix=agent,
            statuses=[RunStatus.FAILED],
            newest_first=True,
            count_statuses=True,
            page_size=1,
        )
        rest = await admin.list_runs(
            agent_id_prefix=agent,
            statuses=[RunStatus.FAILED],
            newest_first=True,
            page_size=1,
            page_token=page.next_page_token,
        )
    (newest,) = page.items
    assert [newest.run_id, *(r.run_id for r in rest.items)] == [runs[1].id, runs[0].id]
    assert newest.failure == RunFailureSummary("boom", "internal", "", False)
    assert newest.duration == timedelta(milliseconds=1500)
    counts = {count.status: (count.count, count.estimated) for count in page.status_counts}
    assert counts["failed"] == (2, False) and counts["running"] == (1, False)
    sync_page = await asyncio.to_thread(_sync_sessions, store.target)
    assert sync_page.status_counts


def _sync_sessions(target: str) -> Any:
    with SyncRemoteSessionAdmin(target) as admin:
        return admin.list_sessions(newest_first=True, count_statuses=True, page_size=1)
