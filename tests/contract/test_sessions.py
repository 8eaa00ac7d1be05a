"""Session administration and session-scoped reads (§9.1, §10.4, D3, D7).

CreateSession, LoadSession, LoadSessionStatus, EndSession, PurgeSession and
ListRunsBySession, including what purge deletes and the tombstone it leaves.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.support import Run, Store, fails_with, now_ms, run_start, ts, unique

NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT


GO_ZERO_TIME = Timestamp(seconds=-62135596800, nanos=0)
"""What a Go client sends for an unset time.Time: counts as missing."""

EARLIEST_SUPPORTED = Timestamp(seconds=-62135596800, nanos=1)  # 0001-01-01T00:00:00.000000001Z
LATEST_SUPPORTED = Timestamp(
    seconds=253402300799, nanos=999_999_999
)  # 9999-12-31T23:59:59.999999999Z
TOO_EARLY = Timestamp(seconds=-62135596801)  # 0000-12-31T23:59:59Z
TOO_LATE = Timestamp(seconds=253402300800)  # 10000-01-01T00:00:00Z


# --- Helpers -------------------------------------------------------------------


def stamp(seconds: int, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


async def create(store: Store, session_id: str, created_at: Timestamp | None) -> pb.Session:
    request = sa.CreateSessionRequest(session_id=session_id)
    if created_at is not None:
        request.created_at.CopyFrom(created_at)
    return (await store.admin.CreateSession(request)).session


async def end(store: Store, session_id: str, ended_at: Timestamp | None) -> pb.Session:
    request = sa.EndSessionRequest(session_id=session_id)
    if ended_at is not None:
        request.ended_at.CopyFrom(ended_at)
    return (await store.admin.EndSession(request)).session


async def load(store: Store, session_id: str) -> pb.Session:
    return (await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))).session


async def status_of(store: Store, session_id: str) -> int:
    response = await store.runtime.LoadSessionStatus(
        rs.LoadSessionStatusRequest(session_id=session_id)
    )
    return int(response.status)


async def purge(store: Store, session_id: str) -> None:
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id))


async def list_runs(store: Store, session_id: str, statuses: list[int] | None = None) -> list[Any]:
    request = sa.ListRunsBySessionRequest(session_id=session_id, statuses=statuses or [])
    return list((await store.admin.ListRunsBySession(request)).runs)


async def session_missing(store: Store, session_id: str) -> None:
    await fails_with(
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )


def wall_clock() -> Timestamp:
    return ts(now_ms())


# --- CreateSession (§9.1.1) --------------------------------------------------------


async def test_create_session_is_active_and_keeps_full_precision(store: Store) -> None:
    """D7: session times keep nanoseconds; EndedAt absent while active."""
    session_id = unique("session")
    created_at = stamp(1_700_000_000, 123_456_789)
    session = await create(store, session_id, created_at)
    assert session.id == session_id
    assert session.status == pb.SESSION_STATUS_ACTIVE
    assert session.created_at == created_at
    assert not session.HasField("ended_at")
    assert await load(store, session_id) == session
    assert await status_of(store, session_id) == pb.SESSION_STATUS_ACTIVE


async def test_create_session_retry_while_active_keeps_first_created_at(store: Store) -> None:
    """§9.1.1 step 4, Q19: the new created_at is ignored, no conflict."""
    session_id = unique("session")
    first = await create(store, session_id, stamp(1_700_000_000, 1))
    again = await create(store, session_id, stamp(1_800_000_000, 2))
    assert again == first
    assert again.created_at == stamp(1_700_000_000, 1)
    assert await load(store, session_id) == first


async def test_create_session_on_an_ended_session_fails(store: Store) -> None:
    """§9.1.1 step 3."""
    session_id = await store.session()
    ended = await end(store, session_id, wall_clock())
    failure = await fails_with(
        store.admin.CreateSession(
            sa.CreateSessionRequest(session_id=session_id, created_at=wall_clock())
        ),
        PRECONDITION,
        "SESSION_ENDED",
    )
    assert failure.message == "session ended"
    assert failure.metadata["session_id"] == session_id
    assert await load(store, session_id) == ended


async def test_create_session_on_a_purged_session_fails_forever(store: Store) -> None:
    """§10.4 rule 4: the ID can never be created again."""
    session_id = await store.session()
    await store.end(session_id)
    await purge(store, session_id)
    for _ in range(2):
        failure = await fails_with(
            store.admin.CreateSession(
                sa.CreateSessionRequest(session_id=session_id, created_at=wall_clock())
            ),
            PRECONDITION,
            "SESSION_PURGED",
        )
        assert failure.message == "session purged"
    await fails_with(
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
        PRECONDITION,
        "SESSION_PURGED",
    )


@pytest.mark.parametrize(
    ("session_id", "created_at", "message", "field"),
    [
        ("", stamp(1_700_000_000), "session id is required", "session_id"),
        ("", None, "session id is required", "session_id"),
        ("named", None, "created_at is required", "created_at"),
        ("named", GO_ZERO_TIME, "created_at is required", "created_at"),
    ],
)
async def test_create_session_validation(
    store: Store, session_id: str, created_at: Timestamp | None, message: str, field: str
) -> None:
    """§9.1.1 step 1: INVALID_ARGUMENT / CONTRACT_VALIDATION; nothing is created."""
    session_id = unique(session_id) if session_id else ""
    request = sa.CreateSessionRequest(session_id=session_id)
    if created_at is not None:
        request.created_at.CopyFrom(created_at)
    failure = await fails_with(
        store.admin.CreateSession(request), INVALID, "CONTRACT_VALIDATION", message
    )
    assert failure.message == message
    assert failure.metadata["field"] == field
    await session_missing(store, session_id)


@pytest.mark.parametrize("when", [TOO_EARLY, TOO_LATE], ids=["year-0", "year-10000"])
async def test_created_at_outside_the_supported_range_is_invalid(
    store: Store, when: Timestamp
) -> None:
    """Only times a google.protobuf.Timestamp can carry; the error names the field."""
    session_id = unique("session")
    failure = await fails_with(
        store.admin.CreateSession(sa.CreateSessionRequest(session_id=session_id, created_at=when)),
        INVALID,
        "CONTRACT_VALIDATION",
        "created_at",
    )
    assert failure.metadata["field"] == "created_at"
    await session_missing(store, session_id)


async def test_times_at_the_edges_of_the_supported_range_round_trip(store: Store) -> None:
    session_id = unique("session")
    created = await create(store, session_id, EARLIEST_SUPPORTED)
    assert created.created_at == EARLIEST_SUPPORTED
    ended = await end(store, session_id, LATEST_SUPPORTED)
    assert (ended.created_at, ended.ended_at) == (EARLIEST_SUPPORTED, LATEST_SUPPORTED)
    assert await load(store, session_id) == ended


# --- LoadSession / LoadSessionStatus (§9.1.2, §9.1.3) --------------------------------


@pytest.mark.parametrize("session_id", ["unknown", ""])
async def test_loading_an_unknown_session_is_not_found(store: Store, session_id: str) -> None:
    """§9.1.2–3: the empty ID (a sessionless run) is SESSION_NOT_FOUND."""
    session_id = unique(session_id) if session_id else ""
    failure = await fails_with(
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    assert failure.message == "session not found"
    failure = await fails_with(
        store.runtime.LoadSessionStatus(rs.LoadSessionStatusRequest(session_id=session_id)),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    assert failure.message == "session not found"


async def test_loading_a_purged_session_is_purged(store: Store) -> None:
    session_id = await store.session()
    await store.end(session_id)
    await purge(store, session_id)
    for call in (
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
        store.runtime.LoadSessionStatus(rs.LoadSessionStatusRequest(session_id=session_id)),
    ):
        failure = await fails_with(call, PRECONDITION, "SESSION_PURGED")
        assert failure.message == "session purged"


async def test_status_is_ended_right_after_end_session(store: Store) -> None:
    """§10.4 rule 2."""
    session_id = await store.session()
    assert await status_of(store, session_id) == pb.SESSION_STATUS_ACTIVE
    ended_at = stamp(1_700_000_100, 987_654_321)
    ended = await end(store, session_id, ended_at)
    assert (ended.status, ended.ended_at) == (pb.SESSION_STATUS_ENDED, ended_at)
    assert await status_of(store, session_id) == pb.SESSION_STATUS_ENDED
    assert await load(store, session_id) == ended


# --- EndSession (§9.1.4) -----------------------------------------------------------


@pytest.mark.parametrize("ended_at", [None, GO_ZERO_TIME], ids=["absent", "go-zero"])
async def test_end_session_requires_ended_at(store: Store, ended_at: Timestamp | None) -> None:
    session_id = await store.session()
    before = await load(store, session_id)
    request = sa.EndSessionRequest(session_id=session_id)
    if ended_at is not None:
        request.ended_at.CopyFrom(ended_at)
    failure = await fails_with(store.admin.EndSession(request), INVALID, "CONTRACT_VALIDATION")
    assert failure.message == "ended_at is required"
    assert failure.metadata["field"] == "ended_at"
    assert await load(store, session_id) == before


async def test_end_session_checks_ended_at_before_the_lookup(store: Store) -> None:
    """§9.1.4 step 1: a missing time is reported even for an unknown session."""
    await fails_with(
        store.admin.EndSession(sa.EndSessionRequest(session_id=unique("ghost"))),
        INVALID,
        "CONTRACT_VALIDATION",
        "ended_at is required",
    )


@pytest.mark.parametrize("when", [TOO_EARLY, TOO_LATE], ids=["year-0", "year-10000"])
async def test_ended_at_outside_the_supported_range_is_invalid(
    store: Store, when: Timestamp
) -> None:
    session_id = await store.session()
    before = await load(store, session_id)
    failure = await fails_with(
        store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=when)),
        INVALID,
        "CONTRACT_VALIDATION",
        "ended_at",
    )
    assert failure.metadata["field"] == "ended_at"
    assert await load(store, session_id) == before


async def test_first_ended_at_wins(store: Store) -> None:
    """§9.1.4 step 3, Q19."""
    session_id = await store.session()
    created = await load(store, session_id)
    first = await end(store, session_id, stamp(1_700_000_000, 111))
    again = await end(store, session_id, stamp(1_900_000_000, 222))
    assert again == first
    assert again.ended_at == stamp(1_700_000_000, 111)
    assert again.created_at == created.created_at
    assert await load(store, session_id) == first


@pytest.mark.parametrize("session_id", ["unknown", ""])
async def test_end_unknown_session_is_not_found(store: Store, session_id: str) -> None:
    session_id = unique(session_id) if session_id else ""
    failure = await fails_with(
        store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=wall_clock())),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    assert failure.message == "session not found"
    await session_missing(store, session_id)


async def test_end_purged_session_is_purged(store: Store) -> None:
    session_id = await store.session()
    await store.end(session_id)
    await purge(store, session_id)
    await fails_with(
        store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=wall_clock())),
        PRECONDITION,
        "SESSION_PURGED",
        "session purged",
    )


async def test_running_runs_keep_running_after_end_and_may_finish(store: Store) -> None:
    """§9.1.4, §10.4 rule 1: EndSession only flips the session status."""
    session_id = await store.session()
    run = await store.root(session_id=session_id)
    other = await store.root(session_id=session_id)
    await store.end(session_id)
    assert (await store.load(run.id)).status == pb.RUN_STATUS_RUNNING
    assert [meta.status for meta in await list_runs(store, session_id)] == [
        pb.RUN_STATUS_RUNNING,
        pb.RUN_STATUS_RUNNING,
    ]

    appended = await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("after-end"))
    )
    assert (appended.id, appended.inserted) == ("2", True)
    assert appended.session_status == pb.SESSION_STATUS_ENDED
    canceled = await store.runtime.RecordRunCancellation(run.cancellation_request())
    assert (canceled.id, canceled.inserted, canceled.session_status) == (
        "3",
        True,
        pb.SESSION_STATUS_ENDED,
    )
    finished = await store.runtime.RecordRunTerminal(run.terminal_request())
    assert (finished.id, finished.inserted, finished.session_status) == (
        "4",
        True,
        pb.SESSION_STATUS_ENDED,
    )
    suspended = await store.runtime.RecordRunSuspension(other.suspension_request())
    assert (suspended.inserted, suspended.session_status) == (True, pb.SESSION_STATUS_ENDED)
    assert (await store.load(run.id)).status == pb.RUN_STATUS_COMPLETED
    assert (await store.load(other.id)).status == pb.RUN_STATUS_SUSPENDED
    assert await status_of(store, session_id) == pb.SESSION_STATUS_ENDED


# --- PurgeSession (§9.1.5, §10.4) ----------------------------------------------------


async def test_purge_of_an_active_session_is_refused(store: Store) -> None:
    session_id = await store.session()
    run = await store.root(session_id=session_id)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    before = await store.state(session_id=session_id, run_ids=(run.id,))
    failure = await fails_with(
        store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id)),
        PRECONDITION,
        "SESSION_ACTIVE",
    )
    assert failure.message == "session is active"
    assert await status_of(store, session_id) == pb.SESSION_STATUS_ACTIVE
    assert await store.state(session_id=session_id, run_ids=(run.id,)) == before


@pytest.mark.parametrize("running", ["root", "child"])
async def test_purge_with_a_running_run_is_refused(store: Store, running: str) -> None:
    """§9.1.5 step 3: any running run blocks, a child as much as a root."""
    session_id = await store.session()
    root = await store.root(session_id=session_id)
    child = run_start(session_id=session_id, parent_run_id=root.id)
    await store.runtime.StartChildRun(child.child_request(root.start.agent_id))
    done = child if running == "root" else root
    await store.runtime.RecordRunTerminal(done.terminal_request())
    await store.end(session_id)
    run_ids = (root.id, child.id)
    before = await store.state(session_id=session_id, run_ids=run_ids)
    failure = await fails_with(
        store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id)),
        PRECONDITION,
        "SESSION_HAS_ACTIVE_RUNS",
    )
    assert failure.message == "session has active runs"
    assert await store.state(session_id=session_id, run_ids=run_ids) == before
    assert await status_of(store, session_id) == pb.SESSION_STATUS_ENDED


async def _settled_session(store: Store) -> tuple[str, list[Run]]:
    """An ended session whose runs are suspended, completed, failed and canceled
    (the last by the ended-session start itself)."""
    session_id = await store.session()
    suspended = await store.root(session_id=session_id)
    await store.runtime.RecordRunSuspension(suspended.suspension_request())
    completed = await store.root(session_id=session_id)
    await store.runtime.RecordRunTerminal(completed.terminal_request())
    failed = await store.root(session_id=session_id)
    await store.runtime.RecordRunTerminal(failed.terminal_request(pb.RUN_STATUS_FAILED))
    await store.end(session_id)
    stopped = await store.root(session_id=session_id)
    assert (await store.load(stopped.id)).status == pb.RUN_STATUS_CANCELED
    return session_id, [suspended, completed, failed, stopped]


async def test_purge_deletes_runs_records_and_checkpoints(store: Store) -> None:
    """§9.1.5 step 4: suspended runs do not block; everything of the session goes."""
    session_id, runs = await _settled_session(store)
    assert len(await store.session_records(session_id)) == 8
    await purge(store, session_id)

    for run in runs:
        for call in (
            store.runtime.LoadRun(rs.LoadRunRequest(run_id=run.id)),
            store.runtime.ListRunRecords(rs.ListRunRecordsRequest(run_id=run.id, limit=10)),
            store.runtime.LoadRunSuspension(rs.LoadRunSuspensionRequest(run_id=run.id)),
            store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record("late"))),
            store.runtime.RecordRunTerminal(run.terminal_request()),
        ):
            await fails_with(call, NOT_FOUND, "RUN_NOT_FOUND", "run not found")
    for call in (
        store.runtime.ListSessionRunRecords(
            rs.ListSessionRunRecordsRequest(session_id=session_id, limit=10)
        ),
        store.admin.ListRunsBySession(sa.ListRunsBySessionRequest(session_id=session_id)),
        store.runtime.LoadSessionStatus(rs.LoadSessionStatusRequest(session_id=session_id)),
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
    ):
        await fails_with(call, PRECONDITION, "SESSION_PURGED", "session purged")


async def test_purge_leaves_other_sessions_alone(store: Store) -> None:
    purged_id, _ = await _settled_session(store)
    kept_id, kept_runs = await _settled_session(store)
    sessionless = await store.one_shot()
    before = await store.state(
        session_id=kept_id, run_ids=(*(run.id for run in kept_runs), sessionless.id)
    )
    await purge(store, purged_id)
    after = await store.state(
        session_id=kept_id, run_ids=(*(run.id for run in kept_runs), sessionless.id)
    )
    assert after == before
    assert await status_of(store, kept_id) == pb.SESSION_STATUS_ENDED


async def test_purge_is_idempotent_on_the_tombstone(store: Store) -> None:
    """§9.1.5 step 1."""
    session_id, _ = await _settled_session(store)
    await purge(store, session_id)
    await purge(store, session_id)
    await fails_with(
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
        PRECONDITION,
        "SESSION_PURGED",
    )


async def test_purge_of_an_empty_ended_session(store: Store) -> None:
    session_id = await store.session()
    await store.end(session_id)
    await purge(store, session_id)
    await fails_with(
        store.runtime.LoadSessionStatus(rs.LoadSessionStatusRequest(session_id=session_id)),
        PRECONDITION,
        "SESSION_PURGED",
    )


@pytest.mark.parametrize("session_id", ["unknown", ""])
async def test_purge_of_an_unknown_session_is_not_found(store: Store, session_id: str) -> None:
    session_id = unique(session_id) if session_id else ""
    failure = await fails_with(
        store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id)),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    assert failure.message == "session not found"
    # No tombstone was left: the ID can still be created.
    if session_id:
        assert (await create(store, session_id, wall_clock())).status == pb.SESSION_STATUS_ACTIVE


async def test_start_in_a_purged_session_cannot_recreate_it(store: Store) -> None:
    """§10.4 rule 4: a delayed retry cannot bring old state back."""
    session_id = await store.session()
    run = await store.root(session_id=session_id)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await store.end(session_id)
    await purge(store, session_id)
    await fails_with(store.runtime.StartRootRun(run.root_request()), PRECONDITION, "SESSION_PURGED")
    assert not await store.exists(run.id)


# --- ListRunsBySession (§9.1.6, D3) -----------------------------------------------------


async def test_list_runs_orders_by_started_at_then_run_id(store: Store) -> None:
    """Q10: started_at, then run_id — not insertion order."""
    session_id = await store.session()
    base = now_ms()
    prefix = unique("order")
    starts = [
        (f"{prefix}-z", base + 5),
        (f"{prefix}-c", base + 1),
        (f"{prefix}-b", base + 5),
        (f"{prefix}-y", base + 3),
        (f"{prefix}-a", base + 5),
    ]
    for run_id, started_ms in starts:
        run = run_start(session_id=session_id, run_id=run_id, started_ms=started_ms)
        await store.runtime.StartRootRun(run.root_request())
    listed = await list_runs(store, session_id)
    assert [meta.run_id for meta in listed] == [
        f"{prefix}-c",
        f"{prefix}-y",
        f"{prefix}-a",
        f"{prefix}-b",
        f"{prefix}-z",
    ]


ALL_STATUSES = [
    pb.RUN_STATUS_RUNNING,
    pb.RUN_STATUS_SUSPENDED,
    pb.RUN_STATUS_COMPLETED,
    pb.RUN_STATUS_FAILED,
    pb.RUN_STATUS_CANCELED,
]


async def _one_run_per_status(store: Store) -> tuple[str, dict[int, Run]]:
    session_id = await store.session()
    runs: dict[int, Run] = {}
    runs[pb.RUN_STATUS_RUNNING] = await store.root(session_id=session_id)
    runs[pb.RUN_STATUS_SUSPENDED] = await store.root(session_id=session_id)
    await store.runtime.RecordRunSuspension(runs[pb.RUN_STATUS_SUSPENDED].suspension_request())
    runs[pb.RUN_STATUS_COMPLETED] = await store.root(session_id=session_id)
    await store.runtime.RecordRunTerminal(runs[pb.RUN_STATUS_COMPLETED].terminal_request())
    runs[pb.RUN_STATUS_FAILED] = await store.root(session_id=session_id)
    await store.runtime.RecordRunTerminal(
        runs[pb.RUN_STATUS_FAILED].terminal_request(pb.RUN_STATUS_FAILED)
    )
    canceled = await store.root(session_id=session_id)
    await store.runtime.RecordRunCancellation(canceled.cancellation_request())
    await store.runtime.RecordRunTerminal(
        canceled.terminal_request(pb.RUN_STATUS_CANCELED, reason=lifecycle.REASON_USER_REQUESTED)
    )
    runs[pb.RUN_STATUS_CANCELED] = canceled
    return session_id, runs


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([pb.RUN_STATUS_RUNNING], [pb.RUN_STATUS_RUNNING]),
        ([pb.RUN_STATUS_SUSPENDED], [pb.RUN_STATUS_SUSPENDED]),
        (
            [pb.RUN_STATUS_FAILED, pb.RUN_STATUS_COMPLETED],
            [pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED],
        ),
        ([pb.RUN_STATUS_CANCELED, pb.RUN_STATUS_CANCELED], [pb.RUN_STATUS_CANCELED]),
        ([99], []),
        ([pb.RUN_STATUS_UNSPECIFIED], []),
        ([99, pb.RUN_STATUS_RUNNING], [pb.RUN_STATUS_RUNNING]),
        ([], ALL_STATUSES),
    ],
    ids=[
        "running",
        "suspended",
        "ended-ok-or-failed",
        "repeated",
        "unknown",
        "unspecified",
        "unknown-and-running",
        "empty-lists-all",
    ],
)
async def test_list_runs_status_filter(
    store: Store, statuses: list[int], expected: list[int]
) -> None:
    """§9.1.6: unknown status values match nothing; an empty filter lists all."""
    session_id, runs = await _one_run_per_status(store)
    listed = await list_runs(store, session_id, statuses)
    assert sorted(meta.run_id for meta in listed) == sorted(runs[status].id for status in expected)
    assert all(meta.status in expected for meta in listed)


async def test_list_runs_returns_complete_metadata(store: Store) -> None:
    """§3.5: every RunMeta field, equal to LoadRun's."""
    session_id = await store.session()
    base = now_ms()
    root = run_start(session_id=session_id, started_ms=base, labels={"site": "one", "tier": "a"})
    await store.runtime.StartRootRun(root.root_request())
    await store.runtime.RecordRunCancellation(root.cancellation_request())
    child = run_start(
        session_id=session_id,
        parent_run_id=root.id,
        agent_id="child-agent",
        started_ms=base + 1,
        labels={},
    )
    await store.runtime.StartChildRun(child.child_request(root.start.agent_id))
    await store.end(session_id)
    stopped = run_start(session_id=session_id, started_ms=base + 2)
    await store.runtime.StartRootRun(stopped.root_request())

    listed = await list_runs(store, session_id)
    assert [meta.run_id for meta in listed] == [root.id, child.id, stopped.id]
    for meta in listed:
        assert meta == await store.load(meta.run_id)
        assert meta.session_id == session_id
        assert meta.updated_at.seconds > 0

    first, second, third = listed
    assert (first.agent_id, first.parent_run_id) == ("agent", "")
    assert first.started_at == root.start.started_at
    assert dict(first.labels) == {"site": "one", "tier": "a"}
    assert (first.status, first.start_outcome) == (
        pb.RUN_STATUS_RUNNING,
        pb.RUN_START_OUTCOME_PROCEED,
    )
    assert first.cancellation_reason == lifecycle.REASON_USER_REQUESTED

    assert (second.agent_id, second.parent_run_id) == ("child-agent", root.id)
    assert dict(second.labels) == {}
    assert second.cancellation_reason == ""

    assert (third.status, third.start_outcome) == (
        pb.RUN_STATUS_CANCELED,
        pb.RUN_START_OUTCOME_STOP,
    )
    assert third.cancellation_reason == lifecycle.REASON_SESSION_ENDED


async def test_list_runs_only_lists_the_sessions_own_runs(store: Store) -> None:
    session_id = await store.session()
    assert await list_runs(store, session_id) == []
    mine = await store.root(session_id=session_id)
    await store.root()  # another session
    await store.one_shot()  # sessionless
    assert [meta.run_id for meta in await list_runs(store, session_id)] == [mine.id]


@pytest.mark.parametrize("session_id", ["unknown", ""])
async def test_list_runs_of_an_unknown_session_is_not_found(store: Store, session_id: str) -> None:
    """Test 9: ListRunsBySession on a missing session -> SESSION_NOT_FOUND."""
    session_id = unique(session_id) if session_id else ""
    failure = await fails_with(
        store.admin.ListRunsBySession(sa.ListRunsBySessionRequest(session_id=session_id)),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    assert failure.message == "session not found"
