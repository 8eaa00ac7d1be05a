"""ListRunTranscriptRecords (§9.6.5, §6.5, §14.25; mirrors upstream's transcript tests)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from runstore.contract import lifecycle
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.support import Run, Store, fails_with, run_start, unique

NOT_FOUND = grpc.StatusCode.NOT_FOUND
INVALID = grpc.StatusCode.INVALID_ARGUMENT

MIB = 1024 * 1024
PAGE_BYTES = 1_048_576
PAGE_RECORDS = 512
APPENDED = lifecycle.TRANSCRIPT_APPENDED
SEEDED = lifecycle.TRANSCRIPT_SEEDED


# --- Helpers -------------------------------------------------------------------


def payload(size: int) -> bytes:
    """Opaque bytes of exactly ``size`` bytes (the store never decodes them, Q15)."""
    assert size >= 2
    return b"[" + b"x" * (size - 2) + b"]"


def transcript(run: Run, key: str, size: int = 64, type: str = APPENDED) -> pb.RunRecord:
    """A transcript record stamped with the run's start, like the upstream fixture."""
    started = run.start.started_at
    return run.record(
        key, type, payload(size), at_ms=started.seconds * 1000 + started.nanos // 1_000_000
    )


async def append(store: Store, record: pb.RunRecord) -> str:
    result = await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))
    assert result.inserted
    return result.id


async def history(store: Store, sizes: Sequence[int]) -> tuple[Run, list[str]]:
    """A one-shot run ("1" = run_started) with transcript records "message-i"."""
    run = await store.one_shot()
    ids = [
        await append(store, transcript(run, f"message-{i}", size)) for i, size in enumerate(sizes)
    ]
    return run, ids


def request(
    run_id: str, through: str, after: str = "", limit: int = 10000
) -> rs.ListRunTranscriptRecordsRequest:
    return rs.ListRunTranscriptRecordsRequest(
        run_id=run_id, through_record_id=through, after_record_id=after, limit=limit
    )


async def page(
    store: Store, run_id: str, through: str, after: str = "", limit: int = 10000
) -> tuple[list[str], str]:
    response = await store.runtime.ListRunTranscriptRecords(request(run_id, through, after, limit))
    return [event.id for event in response.events], response.next_cursor


async def all_pages(
    store: Store, run_id: str, through: str, limit: int = 10000
) -> list[tuple[list[str], str]]:
    pages = []
    after = ""
    while True:
        ids, cursor = await page(store, run_id, through, after, limit)
        pages.append((ids, cursor))
        if not cursor:
            return pages
        assert cursor == ids[-1]
        after = cursor


async def invalid_position(store: Store, call: rs.ListRunTranscriptRecordsRequest) -> None:
    failure = await fails_with(
        store.runtime.ListRunTranscriptRecords(call),
        INVALID,
        "INVALID_TRANSCRIPT_POSITION",
        "invalid transcript position",
    )
    assert failure.metadata["permanent"] == "true"


# --- Page budget and cap (upstream transcript_test 1-4, §14.25) -------------------


@pytest.mark.parametrize("size", [MIB - 1, MIB], ids=["1MiB-1", "1MiB"])
async def test_a_payload_of_up_to_exactly_one_mebibyte_fits(store: Store, size: int) -> None:
    """Upstream transcript_test 1: the budget is inclusive."""
    run, (only,) = await history(store, [size])
    response = await store.runtime.ListRunTranscriptRecords(request(run.id, only))
    assert [(e.id, len(e.payload)) for e in response.events] == [(only, size)]
    assert response.events[0].payload == payload(size)
    assert response.next_cursor == ""


async def test_a_full_page_stops_before_the_next_record(store: Store) -> None:
    """Upstream transcript_test 2: [1MiB-256, 256, 256] -> 2 records totalling 1 MiB,
    then the third."""
    run, ids = await history(store, [MIB - 256, 256, 256])
    assert ids == ["2", "3", "4"]
    first = await store.runtime.ListRunTranscriptRecords(request(run.id, "4"))
    assert [e.id for e in first.events] == ["2", "3"]
    assert sum(len(e.payload) for e in first.events) == PAGE_BYTES
    assert first.next_cursor == "3"
    assert await page(store, run.id, "4", after="3") == (["4"], "")
    # Byte for byte, and every record exactly once, in order.
    assert [e.payload for e in first.events] == [payload(MIB - 256), payload(256)]


async def test_exact_mebibyte_record_then_another_needs_two_pages(store: Store) -> None:
    run, ids = await history(store, [MIB, 2])
    assert await all_pages(store, run.id, ids[-1]) == [(["2"], "2"), (["3"], "")]


async def test_pages_are_capped_at_512_records(store: Store) -> None:
    """Upstream transcript_test 3: 513 records with limit 10000 -> 512 + 1."""
    run, ids = await history(store, [256] * (PAGE_RECORDS + 1))
    end = ids[-1]
    assert end == str(PAGE_RECORDS + 2)
    first_ids, cursor = await page(store, run.id, end)
    assert first_ids == ids[:PAGE_RECORDS]
    assert cursor == ids[PAGE_RECORDS - 1] == "513"
    assert await page(store, run.id, end, after=cursor) == ([end], "")


async def test_smaller_limits_page_with_the_last_id_as_cursor(store: Store) -> None:
    """§9.6.5 step 6."""
    run, ids = await history(store, [64] * 5)
    assert await all_pages(store, run.id, ids[-1], limit=2) == [
        (["2", "3"], "3"),
        (["4", "5"], "5"),
        (["6"], ""),
    ]


async def test_cursor_is_set_only_when_another_transcript_record_is_in_range(
    store: Store,
) -> None:
    """§9.6.5 step 7: a full page followed only by non-transcript records,
    or by records after the end, has no cursor."""
    run, ids = await history(store, [64, 64])
    note = await append(store, run.record("note", "planner_note"))
    later = await append(store, transcript(run, "later"))
    assert (ids, note, later) == (["2", "3"], "4", "5")
    assert await page(store, run.id, note, limit=2) == (["2", "3"], "")
    assert await page(store, run.id, "3", limit=2) == (["2", "3"], "")
    assert await page(store, run.id, later, limit=2) == (["2", "3"], "3")


async def test_a_record_over_one_mebibyte_is_refused(store: Store) -> None:
    """Upstream transcript_test 4, §14.25: 1 MiB + 1 is a contract error."""
    run, (big,) = await history(store, [MIB + 1])
    failure = await fails_with(
        store.runtime.ListRunTranscriptRecords(request(run.id, big)),
        INVALID,
        "CONTRACT_VALIDATION",
        "payload size 1048577 exceeds supported page size 1048576 bytes",
    )
    assert failure.message == (
        f'transcript record "{big}" payload size 1048577 exceeds supported page size 1048576 bytes'
    )
    assert failure.metadata["permanent"] == "true"
    assert failure.metadata["run_id"] == run.id


async def test_an_oversized_record_fails_only_the_pages_that_reach_it(store: Store) -> None:
    """§9.6.5 step 6: records gathered before it are discarded; pages that end
    earlier are served."""
    run, (small, big, after) = await history(store, [64, MIB + 1, 64])
    await fails_with(
        store.runtime.ListRunTranscriptRecords(request(run.id, after)),
        INVALID,
        "CONTRACT_VALIDATION",
        f'transcript record "{big}" payload size 1048577',
    )
    assert await page(store, run.id, small) == ([small], "")
    assert await page(store, run.id, after, limit=1) == ([small], small)
    await fails_with(
        store.runtime.ListRunTranscriptRecords(request(run.id, after, after=small)),
        INVALID,
        "CONTRACT_VALIDATION",
    )


# --- Positions (§9.6.5 steps 2-4) ----------------------------------------------------


async def test_through_may_be_any_record_type(store: Store) -> None:
    """§9.6.5 step 4: run_started as the end is an empty history; an ordinary
    record as the end cuts the history there."""
    run, (first,) = await history(store, [64])
    note = await append(store, run.record("note", "tool_result_received"))
    await append(store, transcript(run, "second"))
    response = await store.runtime.ListRunTranscriptRecords(request(run.id, "1"))
    assert (list(response.events), response.next_cursor) == ([], "")
    assert await page(store, run.id, note) == ([first], "")


async def test_non_transcript_records_are_skipped(store: Store) -> None:
    """§9.6.5: both transcript types, in run order, and nothing else."""
    session = await store.session()
    parent = await store.root(session_id=session)
    seeded = await append(store, transcript(parent, "seeded", type=SEEDED))
    await append(store, parent.record("call", "tool_call_scheduled"))
    child = run_start(session_id=session, parent_run_id=parent.id)
    await store.runtime.StartChildRun(child.child_request(parent.start.agent_id))
    appended = await append(store, transcript(parent, "appended"))
    await append(store, parent.record("prompt", "prompt_rendered"))
    end = await append(store, parent.record("usage", "usage"))
    response = await store.runtime.ListRunTranscriptRecords(request(parent.id, end))
    assert [(e.id, e.type, e.event_key) for e in response.events] == [
        (seeded, SEEDED, "seeded"),
        (appended, APPENDED, "appended"),
    ]
    assert response.next_cursor == ""
    assert all(e.run_id == parent.id and e.session_id == session for e in response.events)


async def test_records_appended_after_the_end_never_appear(store: Store) -> None:
    """§9.6.5 step 7: pages of a given (run, end) are stable forever."""
    run, ids = await history(store, [64, 64, 64])
    before = await store.runtime.ListRunTranscriptRecords(request(run.id, ids[1]))
    for n in range(3):
        await append(store, transcript(run, f"more-{n}"))
    after = await store.runtime.ListRunTranscriptRecords(request(run.id, ids[1]))
    assert after == before
    assert ([e.id for e in after.events], after.next_cursor) == (ids[:2], "")
    assert await all_pages(store, run.id, ids[1], limit=1) == [([ids[0]], ids[0]), ([ids[1]], "")]


async def test_after_equal_to_through_is_an_empty_page(store: Store) -> None:
    run, ids = await history(store, [64, 64])
    assert await page(store, run.id, ids[1], after=ids[1]) == ([], "")
    assert await page(store, run.id, ids[1], after=ids[0]) == ([ids[1]], "")


@pytest.mark.parametrize(
    "case", ["run-started", "ordinary", "beyond-end", "unknown", "non-canonical"]
)
async def test_after_must_be_a_transcript_record_at_or_before_the_end(
    store: Store, case: str
) -> None:
    """§9.6.5 step 4."""
    run, ids = await history(store, [64, 64])
    note = await append(store, run.record("note", "planner_note"))
    last = await append(store, transcript(run, "last"))
    after = {
        "run-started": "1",
        "ordinary": note,
        "beyond-end": last,
        "unknown": "99",
        "non-canonical": "02",
    }[case]
    through = ids[1] if case == "beyond-end" else last
    # The message names the run (§9.6.5 step 3).
    failure = await fails_with(
        store.runtime.ListRunTranscriptRecords(request(run.id, through, after=after)),
        INVALID,
        "INVALID_TRANSCRIPT_POSITION",
    )
    assert failure.message == f'invalid transcript position: run "{run.id}"'
    assert failure.metadata["permanent"] == "true"


@pytest.mark.parametrize("through", ["01", "+2", " 2", "2 ", "0", "-1", "99", "abc", "2.0"])
async def test_through_must_name_a_record_of_the_run_canonically(
    store: Store, through: str
) -> None:
    """§9.6.5 step 4: IDs compare as exact strings, so "01" names no record."""
    run, ids = await history(store, [64])
    assert ids == ["2"]
    await invalid_position(store, request(run.id, through))


async def test_through_must_be_a_record_of_this_run(store: Store) -> None:
    """A record ID of another run is no position of this one."""
    run, _ = await history(store, [64])
    other, other_ids = await history(store, [64, 64])
    assert other_ids[-1] == "3"
    await invalid_position(store, request(run.id, "3"))
    assert await page(store, other.id, "3") == (other_ids, "")


@pytest.mark.parametrize(
    ("through", "limit"), [("", 10), ("2", 0), ("2", -1)], ids=["empty-through", "zero", "neg"]
)
async def test_empty_through_or_nonpositive_limit_is_invalid_before_existence(
    store: Store, through: str, limit: int
) -> None:
    """§9.6.5 step 2 precedes step 3."""
    run, _ = await history(store, [64])
    await invalid_position(store, request(run.id, through, limit=limit))
    failure = await fails_with(
        store.runtime.ListRunTranscriptRecords(request(unique("ghost"), through, limit=limit)),
        INVALID,
        "INVALID_TRANSCRIPT_POSITION",
    )
    assert failure.message.startswith("invalid transcript position")


async def test_unknown_run_is_not_found(store: Store) -> None:
    """§9.6.5 step 3."""
    ghost = unique("ghost")
    failure = await fails_with(
        store.runtime.ListRunTranscriptRecords(request(ghost, "1")),
        NOT_FOUND,
        "RUN_NOT_FOUND",
        "run not found",
    )
    assert failure.metadata["permanent"] == "true"
