"""Ordinary records and the list reads (§9.3, §6.4, §9.6.3, §9.6.4, D3)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.support import (
    Run,
    Store,
    fails_with,
    link_record,
    now_ms,
    run_start,
    started_record,
    ts,
    unique,
)

NOT_FOUND = grpc.StatusCode.NOT_FOUND
CONFLICT = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT

MIB = 1024 * 1024
PAGE_RECORDS = 1000
"""The server's default page cap for ListRunRecords / ListSessionRunRecords (D3)."""
PAGE_BYTES = 4 * MIB
"""The server's default payload budget of one list page (D3)."""


# --- Helpers -------------------------------------------------------------------


async def append(store: Store, record: pb.RunRecord) -> rs.AppendRunRecordResponse:
    return await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))


def run_page(run_id: str, cursor: str = "", limit: int = 1000) -> rs.ListRunRecordsRequest:
    return rs.ListRunRecordsRequest(run_id=run_id, cursor=cursor, limit=limit)


def session_page(
    session_id: str, cursor: str = "", limit: int = 1000
) -> rs.ListSessionRunRecordsRequest:
    return rs.ListSessionRunRecordsRequest(session_id=session_id, cursor=cursor, limit=limit)


def ids(events: Any) -> list[str]:
    return [event.id for event in events]


def owners(events: Any) -> list[tuple[str, str]]:
    return [(event.run_id, event.id) for event in events]


@pytest.fixture
async def wide(store: Store) -> AsyncIterator[rs_grpc.RuntimeStoreStub]:
    """A RuntimeStore stub whose channel accepts responses up to 32 MiB.

    A default channel refuses responses above 4 MiB; the server's own limit is
    16 MiB, so budget-sized pages need a wider client.
    """
    options = [
        ("grpc.max_receive_message_length", 32 * MIB),
        ("grpc.max_send_message_length", 32 * MIB),
    ]
    async with grpc.aio.insecure_channel(store.target, options=options) as channel:
        yield rs_grpc.RuntimeStoreStub(channel)


async def stopped(store: Store, how: str) -> Run:
    """A root run (with the ordinary record "note" at ID 2) stopped as ``how``."""
    run = await store.root()
    first = await append(store, run.record("note"))
    assert (first.id, first.inserted) == ("2", True)
    if how == "completed":
        await store.runtime.RecordRunTerminal(run.terminal_request())
    elif how == "failed":
        await store.runtime.RecordRunTerminal(run.terminal_request(status=pb.RUN_STATUS_FAILED))
    elif how == "canceled":
        await store.runtime.RecordRunCancellation(run.cancellation_request())
        await store.runtime.RecordRunTerminal(
            run.terminal_request(status=pb.RUN_STATUS_CANCELED, reason="user_requested")
        )
    else:
        await store.runtime.RecordRunSuspension(run.suspension_request())
    return run


# --- AppendRunRecord: happy path and retries (§9.3) ---------------------------


async def test_appends_take_the_next_run_id_and_report_the_active_session(store: Store) -> None:
    """§6.2: IDs "1", "2", ... per run; the record is stored byte for byte (§3.7)."""
    run = await store.root()
    first = await append(store, run.record("a", payload=b'{"n": 1 }', turn_id="turn-1"))
    second = await append(store, run.record("b", type="planner_note"))
    assert (first.id, first.inserted, first.session_status) == ("2", True, pb.SESSION_STATUS_ACTIVE)
    assert (second.id, second.inserted) == ("3", True)
    assert second.session_status == pb.SESSION_STATUS_ACTIVE

    other = await store.root()
    assert (await append(store, other.record("a"))).id == "2"  # IDs are per run

    records = await store.records(run.id)
    assert ids(records) == ["1", "2", "3"]
    stored = records[1]
    assert stored == pb.RunRecord(
        id="2",
        event_key="a",
        run_id=run.id,
        agent_id=run.start.agent_id,
        session_id=run.start.session_id,
        turn_id="turn-1",
        type="tool_result_received",
        payload=b'{"n": 1 }',
        timestamp=run.record("a").timestamp,
    )
    assert (await store.load(run.id)).status == pb.RUN_STATUS_RUNNING


async def test_sessionless_append_reports_no_session_status(store: Store) -> None:
    """§3.9: SessionStatus is empty for sessionless runs."""
    run = await store.one_shot()
    result = await append(store, run.record("a"))
    assert (result.id, result.inserted) == ("2", True)
    assert result.session_status == pb.SESSION_STATUS_UNSPECIFIED
    retry = await append(store, run.record("a"))
    assert (retry.id, retry.inserted, retry.session_status) == (
        "2",
        False,
        pb.SESSION_STATUS_UNSPECIFIED,
    )


async def test_exact_retry_returns_the_original_id_without_writing(store: Store) -> None:
    """§6.1, §9.3 step 4."""
    run = await store.root()
    await append(store, run.record("a"))
    await append(store, run.record("b"))
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    retry = await append(store, run.record("a"))
    assert (retry.id, retry.inserted, retry.session_status) == (
        "2",
        False,
        pb.SESSION_STATUS_ACTIVE,
    )
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


@pytest.mark.parametrize("how", ["completed", "failed", "canceled", "suspended"])
async def test_after_the_run_stops_exact_retry_succeeds_and_new_key_is_not_active(
    store: Store, how: str
) -> None:
    """§14.8 (upstream store_test 8)."""
    run = await stopped(store, how)
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    retry = await append(store, run.record("note"))
    assert (retry.id, retry.inserted, retry.session_status) == (
        "2",
        False,
        pb.SESSION_STATUS_ACTIVE,
    )
    failure = await fails_with(
        append(store, run.record("late")), PRECONDITION, "RUN_NOT_ACTIVE", "run is not active"
    )
    assert failure.metadata["permanent"] == "true"
    assert failure.metadata["run_id"] == run.id
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


def _bytes(record: pb.RunRecord) -> None:
    record.payload = b'{"ok": true}'


def _later(record: pb.RunRecord) -> None:
    stamp = record.timestamp
    record.timestamp.CopyFrom(ts(stamp.seconds * 1000 + stamp.nanos // 1_000_000 + 1))


def _turn(record: pb.RunRecord) -> None:
    record.turn_id = "turn-2"


def _type(record: pb.RunRecord) -> None:
    record.type = "planner_note"


@pytest.mark.parametrize(
    "change",
    [_bytes, _later, _turn, _type],
    ids=["payload-bytes", "timestamp-1ms", "turn-id", "type"],
)
async def test_changed_retry_is_an_event_conflict(
    store: Store, change: Callable[[pb.RunRecord], None]
) -> None:
    """§6.1, §14.6: every field but the ID is part of the record's identity."""
    run = await store.root()
    original = run.record("a", payload=b'{"ok":true}', turn_id="turn-1")
    await append(store, original)
    changed = pb.RunRecord()
    changed.CopyFrom(original)
    change(changed)
    assert changed != original
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    failure = await fails_with(append(store, changed), CONFLICT, "EVENT_CONFLICT")
    assert failure.message == f'run "{run.id}" event key "a": runlog: event conflict'
    assert (failure.metadata["run_id"], failure.metadata["event_key"]) == (run.id, "a")
    assert failure.metadata["permanent"] == "true"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_timestamp_one_millisecond_later_conflicts_on_a_one_shot_run(store: Store) -> None:
    """Upstream store_test 6 (TestRecordRetryRequiresExactTimestamp)."""
    run = await store.one_shot()
    at = now_ms()
    await append(store, run.record("note", at_ms=at))
    failure = await fails_with(
        append(store, run.record("note", at_ms=at + 1)), CONFLICT, "EVENT_CONFLICT"
    )
    assert failure.metadata["event_key"] == "note"
    assert len(await store.records(run.id)) == 2


async def test_key_of_a_lifecycle_record_conflicts_with_an_ordinary_record(store: Store) -> None:
    """§6.1: lifecycle and ordinary keys share one key space per run."""
    run = await store.root()
    failure = await fails_with(append(store, run.record("started")), CONFLICT, "EVENT_CONFLICT")
    assert failure.metadata["event_key"] == "started"
    assert [r.type for r in await store.records(run.id)] == [lifecycle.RUN_STARTED]


# --- AppendRunRecord: rejections -----------------------------------------------


def _lifecycle_record(run: Run, type: str) -> pb.RunRecord:
    if type == lifecycle.RUN_STARTED:
        return started_record(run.start, key="again")
    if type == lifecycle.CHILD_RUN_LINKED:
        child = run_start(session_id=run.start.session_id, parent_run_id=run.id)
        return link_record(child.start, run.start.agent_id, key="again")
    if type == lifecycle.CANCELLATION_INTENT:
        return run.cancellation(key="again")
    if type == lifecycle.RUN_SUSPENDED:
        return run.suspended(key="again")
    return run.completed(key="again")


@pytest.mark.parametrize(
    "type",
    [
        lifecycle.RUN_STARTED,
        lifecycle.CHILD_RUN_LINKED,
        lifecycle.CANCELLATION_INTENT,
        lifecycle.RUN_SUSPENDED,
        lifecycle.RUN_COMPLETED,
    ],
)
async def test_lifecycle_record_types_need_their_lifecycle_operation(
    store: Store, type: str
) -> None:
    """V2, §14.7: even a well-formed lifecycle record is refused; the run keeps running."""
    run = await store.root()
    record = _lifecycle_record(run, type)
    assert record.type == type
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    failure = await fails_with(append(store, record), INVALID, "CONTRACT_VALIDATION")
    assert failure.message == f'record type "{type}" requires a lifecycle operation'
    assert failure.metadata["field"] == "record.type"
    assert failure.metadata["permanent"] == "true"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before
    meta = await store.load(run.id)
    assert (meta.status, meta.cancellation_reason) == (pb.RUN_STATUS_RUNNING, "")


async def test_record_with_the_wrong_agent_is_an_owner_mismatch(store: Store) -> None:
    """§14.16 (upstream store_test 16)."""
    run = await store.root()
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    failure = await fails_with(
        append(store, run.record("a", agent_id="other-agent")),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
        "run record owner does not match stored run",
    )
    assert failure.metadata["permanent"] == "true"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_record_with_the_wrong_session_is_an_owner_mismatch(store: Store) -> None:
    """§9.3 step 2: the session must be the run's own (including "none")."""
    run = await store.root()
    other_session = await store.session()
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    for session_id in (other_session, ""):
        await fails_with(
            append(store, run.record(f"a-{session_id}", session_id=session_id)),
            PRECONDITION,
            "RUN_RECORD_OWNER_MISMATCH",
            "run record owner does not match stored run",
        )
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before
    assert await store.session_records(other_session) == []

    sessionless = await store.one_shot()
    await fails_with(
        append(store, sessionless.record("a", session_id=other_session)),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    assert len(await store.records(sessionless.id)) == 1
    assert await store.session_records(other_session) == []


async def test_record_of_an_unknown_run_is_not_found(store: Store) -> None:
    ghost = run_start(session_id=await store.session())
    failure = await fails_with(
        append(store, ghost.record("a")), NOT_FOUND, "RUN_NOT_FOUND", "run not found"
    )
    assert failure.metadata["run_id"] == ghost.id
    assert not await store.exists(ghost.id)
    assert await store.session_records(ghost.start.session_id) == []


_ENVELOPE = ["run_id", "agent_id", "event_key", "type", "payload", "timestamp"]
_MESSAGES = {
    "run_id": "run id is required",
    "agent_id": "agent id is required",
    "event_key": "event key is required",
    "type": "record type is required",
    "payload": "record payload is required",
    "timestamp": "record timestamp is required",
}


@pytest.mark.parametrize("field", _ENVELOPE)
async def test_envelope_failures_report_the_first_missing_field(store: Store, field: str) -> None:
    """V1 in order: the field and every later one are missing; the earliest wins."""
    run = await store.root()
    record = run.record("a")
    for name in _ENVELOPE[_ENVELOPE.index(field) :]:
        record.ClearField(name)
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    failure = await fails_with(append(store, record), INVALID, "CONTRACT_VALIDATION")
    assert failure.message == _MESSAGES[field]
    assert failure.metadata["field"] == f"record.{field}"
    assert failure.metadata["permanent"] == "true"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_missing_record_is_invalid(store: Store) -> None:
    run = await store.root()
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    failure = await fails_with(
        store.runtime.AppendRunRecord(rs.AppendRunRecordRequest()), INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.message == "run record is required"
    assert failure.metadata["field"] == "record"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_sub_millisecond_timestamp_is_invalid(store: Store) -> None:
    """V1 rule 8, D7."""
    run = await store.root()
    record = run.record("a")
    record.timestamp.nanos += 1  # 1 ns past a whole millisecond
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    failure = await fails_with(append(store, record), INVALID, "CONTRACT_VALIDATION")
    assert failure.message == "record timestamp must use millisecond precision"
    assert failure.metadata["field"] == "record.timestamp"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_validation_precedes_existence(store: Store) -> None:
    """V1 runs before any lookup: an unknown run with an empty payload is invalid."""
    ghost = run_start()
    await fails_with(
        append(store, ghost.record("a", payload=b"")),
        INVALID,
        "CONTRACT_VALIDATION",
        "record payload is required",
    )
    # ...and a lifecycle type on an unknown run is a V2 failure, not "run not found".
    await fails_with(
        append(store, ghost.completed()),
        INVALID,
        "CONTRACT_VALIDATION",
        'record type "run_completed" requires a lifecycle operation',
    )


async def test_appends_continue_after_end_session_while_the_run_runs(store: Store) -> None:
    """§9.1.4, §9.3 step 6: session_status ENDED; the exact retry reports it too."""
    session = await store.session()
    run = await store.root(session_id=session)
    before_end = await append(store, run.record("a"))
    assert before_end.session_status == pb.SESSION_STATUS_ACTIVE
    await store.end(session)
    after_end = await append(store, run.record("b"))
    assert (after_end.id, after_end.inserted) == ("3", True)
    assert after_end.session_status == pb.SESSION_STATUS_ENDED
    retry = await append(store, run.record("a"))
    assert (retry.id, retry.inserted, retry.session_status) == (
        "2",
        False,
        pb.SESSION_STATUS_ENDED,
    )
    assert owners(await store.session_records(session)) == [
        (run.id, "1"),
        (run.id, "2"),
        (run.id, "3"),
    ]


# --- List arguments (§6.4 rules 1, 2, 7; Q12) -----------------------------------


@pytest.mark.parametrize("limit", [0, -1])
async def test_limit_must_be_positive_before_existence_is_checked(store: Store, limit: int) -> None:
    run = await store.root()
    calls = [
        store.runtime.ListRunRecords(run_page(run.id, limit=limit)),
        store.runtime.ListRunRecords(run_page(unique("ghost"), limit=limit)),
        store.runtime.ListSessionRunRecords(session_page(run.start.session_id, limit=limit)),
        store.runtime.ListSessionRunRecords(session_page(unique("nowhere"), limit=limit)),
    ]
    for call in calls:
        failure = await fails_with(call, INVALID, "INVALID_ARGUMENT_READ")
        assert failure.message == "limit must be greater than zero"
        assert failure.metadata["permanent"] == "true"


@pytest.mark.parametrize("cursor", ["0", "-1", "abc", "+1", " 1", "1 ", "1_0", "1.0", "١"])
async def test_cursor_must_be_ascii_digits_naming_a_positive_position(
    store: Store, cursor: str
) -> None:
    """§6.4 rule 2, D3: checked before existence, on both lists."""
    run = await store.root()
    calls = [
        store.runtime.ListRunRecords(run_page(run.id, cursor)),
        store.runtime.ListRunRecords(run_page(unique("ghost"), cursor)),
        store.runtime.ListSessionRunRecords(session_page(run.start.session_id, cursor)),
        store.runtime.ListSessionRunRecords(session_page(unique("nowhere"), cursor)),
    ]
    for call in calls:
        failure = await fails_with(call, INVALID, "INVALID_ARGUMENT_READ")
        assert failure.message == f'invalid cursor "{cursor}"'
        assert failure.metadata["permanent"] == "true"


async def test_cursor_with_leading_zeros_is_still_a_position(store: Store) -> None:
    """§6.4 rule 2: any ASCII-digit count above zero is valid ("01" skips one)."""
    run = await store.root()
    await append(store, run.record("a"))
    page = await store.runtime.ListRunRecords(run_page(run.id, "01"))
    assert (ids(page.events), page.next_cursor) == (["2"], "")


async def test_cursor_at_or_beyond_the_end_is_an_empty_page(store: Store) -> None:
    """§6.4 rule 3."""
    session = await store.session()
    run = await store.root(session_id=session)
    await append(store, run.record("a"))
    for cursor in ("2", "3", "1000000", "99999999999999999999999999"):
        page = await store.runtime.ListRunRecords(run_page(run.id, cursor))
        assert (list(page.events), page.next_cursor) == ([], ""), cursor
        spage = await store.runtime.ListSessionRunRecords(session_page(session, cursor))
        assert (list(spage.events), spage.next_cursor) == ([], ""), cursor


async def test_list_run_records_of_an_unknown_run_is_not_found(store: Store) -> None:
    """§14.9, §6.4 rule 7."""
    failure = await fails_with(
        store.runtime.ListRunRecords(run_page(unique("ghost"))),
        NOT_FOUND,
        "RUN_NOT_FOUND",
        "run not found",
    )
    assert failure.metadata["permanent"] == "true"


async def test_list_session_records_of_an_unknown_session_is_not_found(store: Store) -> None:
    await fails_with(
        store.runtime.ListSessionRunRecords(session_page(unique("nowhere"))),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
        "session not found",
    )


async def test_lists_after_purge(store: Store) -> None:
    """§14.9, §10.4: the session is a tombstone; its runs are gone."""
    session = await store.session()
    run = await store.root(session_id=session)
    await append(store, run.record("a"))
    await store.runtime.RecordRunTerminal(run.terminal_request())
    await store.end(session)
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))
    await fails_with(
        store.runtime.ListSessionRunRecords(session_page(session)),
        PRECONDITION,
        "SESSION_PURGED",
        "session purged",
    )
    await fails_with(store.runtime.ListRunRecords(run_page(run.id)), NOT_FOUND, "RUN_NOT_FOUND")
    # Argument checks still come first (§6.4 rule 7).
    await fails_with(
        store.runtime.ListSessionRunRecords(session_page(session, "0")),
        INVALID,
        "INVALID_ARGUMENT_READ",
        'invalid cursor "0"',
    )


# --- Run pages (§6.4, §9.6.3) ---------------------------------------------------


async def test_run_pages_cover_every_record_once_with_the_last_id_as_cursor(
    store: Store,
) -> None:
    """§6.4 rules 4 and 5: next_cursor = last returned ID; "" once the end is reached."""
    run = await store.root()
    for key in "abcdef":
        await append(store, run.record(key))
    pages: list[tuple[list[str], str]] = []
    cursor = ""
    while True:
        page = await store.runtime.ListRunRecords(run_page(run.id, cursor, limit=3))
        pages.append((ids(page.events), page.next_cursor))
        if page.next_cursor:
            assert page.next_cursor == page.events[-1].id
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert pages == [(["1", "2", "3"], "3"), (["4", "5", "6"], "6"), (["7"], "")]

    whole = await store.runtime.ListRunRecords(run_page(run.id, limit=7))
    assert (len(whole.events), whole.next_cursor) == (7, "")  # exactly reaching the end
    assert [r.event_key for r in whole.events] == ["started", *"abcdef"]
    tail = await store.runtime.ListRunRecords(run_page(run.id, "5", limit=1))
    assert (ids(tail.events), tail.next_cursor) == (["6"], "6")


async def test_run_pages_include_child_links_the_run_owns(store: Store) -> None:
    """§9.6.3: a child_run_linked record is the parent's record."""
    session = await store.session()
    parent = await store.root(session_id=session)
    child = run_start(session_id=session, parent_run_id=parent.id)
    await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    page = await store.runtime.ListRunRecords(run_page(parent.id))
    assert [(r.id, r.type) for r in page.events] == [
        ("1", lifecycle.RUN_STARTED),
        ("2", lifecycle.CHILD_RUN_LINKED),
    ]


async def test_a_page_reaching_the_end_has_no_cursor_even_if_records_follow(
    store: Store,
) -> None:
    """§6.4 rule 4: the cursor reflects read time; later appends are read from it."""
    run = await store.root()
    page = await store.runtime.ListRunRecords(run_page(run.id, limit=5))
    assert (ids(page.events), page.next_cursor) == (["1"], "")
    await append(store, run.record("a"))
    more = await store.runtime.ListRunRecords(run_page(run.id, page.events[-1].id, limit=5))
    assert (ids(more.events), more.next_cursor) == (["2"], "")


async def test_pages_are_capped_at_one_thousand_records(store: Store) -> None:
    """D3, Q11: a large limit returns at most 1000 records and a cursor, on both lists."""
    session = await store.session()
    run = await store.root(session_id=session)
    for n in range(PAGE_RECORDS + 1):
        await append(store, run.record(f"k{n:04d}", payload=b"{}"))
    total = PAGE_RECORDS + 2  # run_started + 1001 appends

    first = await store.runtime.ListRunRecords(run_page(run.id, limit=5000))
    assert len(first.events) == PAGE_RECORDS
    assert first.next_cursor == first.events[-1].id == str(PAGE_RECORDS)
    second = await store.runtime.ListRunRecords(run_page(run.id, first.next_cursor, limit=5000))
    assert (ids(second.events), second.next_cursor) == (["1001", "1002"], "")
    assert ids([*first.events, *second.events]) == [str(n) for n in range(1, total + 1)]

    sfirst = await store.runtime.ListSessionRunRecords(session_page(session, limit=5000))
    assert (len(sfirst.events), sfirst.next_cursor) == (PAGE_RECORDS, str(PAGE_RECORDS))
    ssecond = await store.runtime.ListSessionRunRecords(
        session_page(session, sfirst.next_cursor, limit=5000)
    )
    assert (len(ssecond.events), ssecond.next_cursor) == (2, "")
    assert ids([*sfirst.events, *ssecond.events]) == [str(n) for n in range(1, total + 1)]


async def test_pages_stop_before_exceeding_the_payload_budget(
    store: Store, wide: rs_grpc.RuntimeStoreStub
) -> None:
    """D3: at most 4 MiB of payload per page, on both lists."""
    session = await store.session()
    run = await store.root(session_id=session)
    size = 3 * MIB // 2
    for key in "abc":
        await append(store, run.record(key, payload=b"[" + b"x" * (size - 2) + b"]"))
    first = await wide.ListRunRecords(run_page(run.id, limit=100))
    assert (ids(first.events), first.next_cursor) == (["1", "2", "3"], "3")
    assert sum(len(r.payload) for r in first.events) <= PAGE_BYTES
    second = await wide.ListRunRecords(run_page(run.id, first.next_cursor, limit=100))
    assert (ids(second.events), second.next_cursor) == (["4"], "")
    assert len(second.events[0].payload) == size

    sfirst = await wide.ListSessionRunRecords(session_page(session, limit=100))
    assert (ids(sfirst.events), sfirst.next_cursor) == (["1", "2", "3"], "3")
    ssecond = await wide.ListSessionRunRecords(session_page(session, "3", limit=100))
    assert (ids(ssecond.events), ssecond.next_cursor) == (["4"], "")


async def test_payload_budget_is_inclusive(store: Store, wide: rs_grpc.RuntimeStoreStub) -> None:
    """D3: a page whose payloads total exactly 4 MiB is returned whole."""
    run = await store.root()
    started = len((await store.records(run.id))[0].payload)
    await append(store, run.record("a", payload=b"x" * (2 * MIB)))
    await append(store, run.record("b", payload=b"x" * (2 * MIB - started)))
    await append(store, run.record("c", payload=b"x"))
    page = await wide.ListRunRecords(run_page(run.id, limit=100))
    assert sum(len(r.payload) for r in page.events) == PAGE_BYTES
    assert (ids(page.events), page.next_cursor) == (["1", "2", "3"], "3")


async def test_a_record_larger_than_the_budget_still_gets_a_run_page_of_its_own(
    store: Store, wide: rs_grpc.RuntimeStoreStub
) -> None:
    """D3: a page always returns at least one record, and the records after it
    stay reachable (§6.4 rule 4: next_cursor is set while more records exist)."""
    run = await store.root()
    await append(store, run.record("big", payload=b"x" * (5 * MIB)))
    await append(store, run.record("small"))
    pages = []
    cursor = ""
    while True:
        page = await wide.ListRunRecords(run_page(run.id, cursor, limit=100))
        pages.append((ids(page.events), page.next_cursor))
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert pages == [(["1"], "1"), (["2"], "2"), (["3"], "")]


async def test_a_record_larger_than_the_budget_still_gets_a_session_page_of_its_own(
    store: Store, wide: rs_grpc.RuntimeStoreStub
) -> None:
    """D3 on ListSessionRunRecords: same rule as run pages."""
    session = await store.session()
    run = await store.root(session_id=session)
    await append(store, run.record("big", payload=b"x" * (5 * MIB)))
    await append(store, run.record("small"))
    first = await wide.ListSessionRunRecords(session_page(session, limit=100))
    assert (ids(first.events), first.next_cursor) == (["1"], "1")
    big = await wide.ListSessionRunRecords(session_page(session, "1", limit=100))
    assert len(big.events[0].payload) == 5 * MIB
    assert (ids(big.events), big.next_cursor) == (["2"], "2")
    last = await wide.ListSessionRunRecords(session_page(session, "2", limit=100))
    assert (ids(last.events), last.next_cursor) == (["3"], "")


# --- Session pages (§6.3, §6.4, §9.6.4) -------------------------------------------


async def _interleaved_session(store: Store) -> tuple[str, list[tuple[str, str]], Run]:
    """Two roots, a child and their records, interleaved with foreign writes."""
    session = await store.session()
    a = await store.root(session_id=session)
    b = await store.root(session_id=session)
    loner = await store.one_shot()
    elsewhere = await store.root()
    await append(store, a.record("a1"))
    await append(store, loner.record("x1"))
    child = run_start(session_id=session, parent_run_id=a.id, agent_id="child-agent")
    await store.runtime.StartChildRun(child.child_request(a.start.agent_id))
    await append(store, b.record("b1"))
    await append(store, elsewhere.record("e1"))
    await append(store, Run(child.start).record("c1"))
    await append(store, a.record("a2"))
    expected = [
        (a.id, "1"),
        (b.id, "1"),
        (a.id, "2"),
        (a.id, "3"),  # the child link, owned by the parent
        (child.id, "1"),
        (b.id, "2"),
        (child.id, "2"),
        (a.id, "4"),
    ]
    return session, expected, loner


async def test_session_pages_are_in_commit_order_across_runs(store: Store) -> None:
    """§6.3: root, child link, child records interleave in commit order; sessionless
    runs and runs of other sessions never appear."""
    session, expected, loner = await _interleaved_session(store)
    page = await store.runtime.ListSessionRunRecords(session_page(session))
    assert (owners(page.events), page.next_cursor) == (expected, "")
    assert [r.type for r in page.events][3:5] == [
        lifecycle.CHILD_RUN_LINKED,
        lifecycle.RUN_STARTED,
    ]
    assert all(r.session_id == session for r in page.events)
    assert loner.id not in {r.run_id for r in page.events}


async def test_session_cursor_is_a_position_not_an_id(store: Store) -> None:
    """§6.4 rule 6: IDs repeat across runs, so the cursor counts records read."""
    session, expected, _ = await _interleaved_session(store)
    seen: list[tuple[str, str]] = []
    cursors: list[str] = []
    cursor = ""
    while True:
        page = await store.runtime.ListSessionRunRecords(session_page(session, cursor, limit=3))
        seen.extend(owners(page.events))
        cursors.append(page.next_cursor)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert seen == expected
    assert cursors == ["3", "6", ""]
    # The record at position 3 is run A's record "2": the cursor is not its ID.
    assert expected[2] == (expected[0][0], "2")
    page = await store.runtime.ListSessionRunRecords(session_page(session, "7", limit=3))
    assert (owners(page.events), page.next_cursor) == (expected[7:], "")


async def test_sessionless_runs_have_no_session_list(store: Store) -> None:
    """§6.3: records of sessionless runs (and one-shot children) join no session."""
    parent = await store.one_shot()
    child = run_start(parent_run_id=parent.id)
    await store.runtime.StartOneShotChildRun(child.one_shot_child_request("agent"))
    result = await append(store, parent.record("a"))
    assert result.session_status == pb.SESSION_STATUS_UNSPECIFIED
    records = await store.records(parent.id)
    assert [(r.id, r.session_id) for r in records] == [("1", ""), ("2", ""), ("3", "")]
    await fails_with(
        store.runtime.ListSessionRunRecords(session_page("")),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )


async def test_ended_sessions_are_listable(store: Store) -> None:
    """§6.4 rule 7."""
    session = await store.session()
    run = await store.root(session_id=session)
    await store.end(session)
    await append(store, run.record("after-end"))
    page = await store.runtime.ListSessionRunRecords(session_page(session))
    assert ([r.event_key for r in page.events], page.next_cursor) == (
        ["started", "after-end"],
        "",
    )
    empty = await store.session()
    await store.end(empty)
    page = await store.runtime.ListSessionRunRecords(session_page(empty))
    assert (list(page.events), page.next_cursor) == ([], "")


async def test_listed_records_are_the_stored_records(store: Store) -> None:
    """§3.7: both lists return every field as stored, timestamp included."""
    session = await store.session()
    run = await store.root(session_id=session)
    record = run.record("a", payload=b"\x00not json\xff", turn_id="t", at_ms=1_700_000_000_123)
    await append(store, record)
    expected = pb.RunRecord()
    expected.CopyFrom(record)
    expected.id = "2"
    assert expected.timestamp == ts(1_700_000_000_123)
    run_events = (await store.runtime.ListRunRecords(run_page(run.id, "1"))).events
    session_events = (await store.runtime.ListSessionRunRecords(session_page(session, "1"))).events
    assert list(run_events) == [expected]
    assert list(session_events) == [expected]
