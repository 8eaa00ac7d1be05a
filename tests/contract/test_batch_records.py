"""AppendRunRecords: AppendRunRecord for each record, in one transaction (§9.3.1)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import grpc
import pytest

from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.support import Run, Store, fails_with, run_start, unique

INVALID = grpc.StatusCode.INVALID_ARGUMENT
CONFLICT = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
NOT_FOUND = grpc.StatusCode.NOT_FOUND

ACTIVE = pb.SESSION_STATUS_ACTIVE


async def batch(store: Store, records: list[pb.RunRecord]) -> list[tuple[str, bool, int]]:
    response = await store.runtime.AppendRunRecords(rs.AppendRunRecordsRequest(records=records))
    return [(result.id, result.inserted, result.session_status) for result in response.results]


async def single(store: Store, record: pb.RunRecord) -> tuple[str, bool, int]:
    response = await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))
    return response.id, response.inserted, response.session_status


def model_response(run: Run, turn: str) -> list[pb.RunRecord]:
    """What one model response yields: thinking, text and two tool calls."""
    return [
        run.record(f"{turn}-thinking", type="thinking", payload=b'{"text":"hmm"}'),
        run.record(f"{turn}-text", type="assistant_text", payload=b'{"text":"hello"}'),
        run.record(f"{turn}-call-1", type="tool_call", payload=b'{"name":"a"}'),
        run.record(f"{turn}-call-2", type="tool_call", payload=b'{"name":"b"}'),
    ]


def stored(records: Any) -> list[tuple[str, str, str, bytes]]:
    return [(r.id, r.event_key, r.type, r.payload) for r in records]


async def test_a_batch_stores_its_records_in_order_with_the_next_ids(store: Store) -> None:
    run = await store.root()
    records = model_response(run, "t1")
    assert await batch(store, records) == [(str(i), True, ACTIVE) for i in range(2, 6)]
    listed = await store.records(run.id)
    assert [(r.event_key, r.payload) for r in listed[1:]] == [
        (r.event_key, r.payload) for r in records
    ]
    # Session order follows the batch's order too (D3).
    session = await store.session_records(run.start.session_id)
    assert [r.id for r in session] == ["1", "2", "3", "4", "5"]


async def test_a_sessionless_run_takes_batches(store: Store) -> None:
    run = await store.one_shot()
    assert await batch(store, model_response(run, "t1")) == [
        (str(i), True, pb.SESSION_STATUS_UNSPECIFIED) for i in range(2, 6)
    ]


async def test_the_identical_batch_again_returns_the_original_results(store: Store) -> None:
    run = await store.root()
    records = model_response(run, "t1")
    first = await batch(store, records)
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    assert await batch(store, records) == [(id_, False, status) for id_, _, status in first]
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_a_batch_retried_after_the_run_ended_still_returns_its_results(
    store: Store,
) -> None:
    run = await store.root()
    records = model_response(run, "t1")
    first = await batch(store, records)
    await store.runtime.RecordRunTerminal(run.terminal_request())
    assert await batch(store, records) == [(id_, False, status) for id_, _, status in first]
    # ...but a batch with one new record is refused whole.
    failure = await fails_with(
        batch(store, [*records, run.record("late")]), PRECONDITION, "RUN_NOT_ACTIVE"
    )
    assert failure.metadata["field"] == "records[4]"


async def test_records_already_stored_identically_are_exact_retries_inside_a_batch(
    store: Store,
) -> None:
    run = await store.root()
    records = model_response(run, "t1")
    assert await single(store, records[1]) == ("2", True, ACTIVE)
    assert await batch(store, records) == [
        ("3", True, ACTIVE),
        ("2", False, ACTIVE),
        ("4", True, ACTIVE),
        ("5", True, ACTIVE),
    ]


async def test_a_changed_record_rejects_the_whole_batch_and_writes_nothing(
    store: Store,
) -> None:
    run = await store.root()
    records = model_response(run, "t1")
    await batch(store, records[:2])
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    changed = [*records[:1], run.record("t1-text", payload=b'{"text":"other"}'), *records[2:]]
    failure = await fails_with(batch(store, changed), CONFLICT, "EVENT_CONFLICT")
    assert failure.metadata["field"] == "records[1]"
    assert failure.metadata["event_key"] == "t1-text"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_a_key_twice_in_one_batch_is_an_exact_retry_or_a_conflict(store: Store) -> None:
    run = await store.root()
    thinking = run.record("k", type="thinking")
    assert await batch(store, [thinking, run.record("other"), thinking]) == [
        ("2", True, ACTIVE),
        ("3", True, ACTIVE),
        ("2", False, ACTIVE),
    ]
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id,))
    twice = [run.record("new"), run.record("again", type="a"), run.record("again", type="b")]
    failure = await fails_with(batch(store, twice), CONFLICT, "EVENT_CONFLICT")
    assert failure.metadata["field"] == "records[2]"
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id,)) == before


async def test_a_batch_keeps_appending_after_its_session_ended(store: Store) -> None:
    run = await store.root()
    await store.end(run.start.session_id)
    results = await batch(store, model_response(run, "t1"))
    assert results[0] == ("2", True, pb.SESSION_STATUS_ENDED)


@pytest.mark.parametrize(
    ("case", "field", "message"),
    [
        ("empty", "records", "at least one run record is required"),
        ("too many", "records", "at most 128 records"),
        ("too large", "records", "at most 4194304 payload bytes"),
        ("no event key", "records[2].event_key", "event key is required"),
        ("no timestamp", "records[1].timestamp", "record timestamp is required"),
        ("lifecycle type", "records[3].type", "requires a lifecycle operation"),
        ("NUL in turn", "records[1].turn_id", "must not contain U+0000"),
        ("two runs", "records[2].run_id", "every record of a batch must belong to run"),
    ],
)
async def test_bad_batches_are_invalid_naming_the_record_and_write_nothing(
    store: Store, case: str, field: str, message: str
) -> None:
    run = await store.root()
    other = await store.root(session_id=run.start.session_id)
    records = model_response(run, "t1")
    if case == "empty":
        records = []
    elif case == "too many":
        records = [run.record(f"k{i}") for i in range(129)]
    elif case == "too large":
        records = [
            run.record(f"k{i}", payload=b'"' + b"x" * (1024 * 1024) + b'"') for i in range(4)
        ]
    elif case == "no event key":
        records[2].event_key = ""
    elif case == "no timestamp":
        records[1].ClearField("timestamp")
    elif case == "lifecycle type":
        records[3] = run.completed("t1-call-2")
    elif case == "NUL in turn":
        records[1].turn_id = "a\x00b"
    elif case == "two runs":
        records[2] = other.record("t1-call-1")
    before = await store.state(session_id=run.start.session_id, run_ids=(run.id, other.id))
    failure = await fails_with(batch(store, records), INVALID, "CONTRACT_VALIDATION", message)
    assert failure.metadata["field"] == field
    assert await store.state(session_id=run.start.session_id, run_ids=(run.id, other.id)) == before


async def test_a_batch_at_the_limits_is_accepted(store: Store) -> None:
    run = await store.root()
    records = [run.record(f"k{i}") for i in range(128)]
    results = await batch(store, records)
    assert [id_ for id_, _, _ in results] == [str(i) for i in range(2, 130)]


async def test_owner_and_run_errors_name_the_record(store: Store) -> None:
    run = await store.root()
    stranger = run.record("k2", agent_id="someone else")
    failure = await fails_with(
        batch(store, [run.record("k1"), stranger]), PRECONDITION, "RUN_RECORD_OWNER_MISMATCH"
    )
    assert failure.metadata["field"] == "records[1]"
    missing = run_start(session_id=run.start.session_id)
    failure = await fails_with(batch(store, [missing.record("k1")]), NOT_FOUND, "RUN_NOT_FOUND")
    assert failure.metadata["field"] == "records[0]"
    assert len(await store.records(run.id)) == 1


async def test_concurrent_batches_on_one_run_are_gap_free_and_each_contiguous(
    store: Store,
) -> None:
    run = await store.root()
    calls = 24
    requests = [model_response(run, f"t{i}") for i in range(calls)]
    answers = await asyncio.gather(*(batch(store, records) for records in requests))
    for results in answers:
        ids = [int(id_) for id_, inserted, _ in results]
        assert all(inserted for _, inserted, _ in results)
        assert ids == list(range(ids[0], ids[0] + 4)), "a batch's records are adjacent"
    listed = await store.records(run.id)
    assert [r.id for r in listed] == [str(i) for i in range(1, 2 + 4 * calls)]
    by_id = {r.id: r.event_key for r in listed}
    for records, results in zip(requests, answers, strict=True):
        assert [by_id[id_] for id_, _, _ in results] == [r.event_key for r in records]
    session = await store.session_records(run.start.session_id)
    assert [r.id for r in session] == [r.id for r in listed]


async def test_racing_batches_with_overlapping_keys_store_each_key_once(store: Store) -> None:
    """Batches that share records race: each record inserts once, and every
    batch gets the same ID for it (D10)."""
    run = await store.root()
    shared = model_response(run, "shared")
    counter = itertools.count()
    requests = [[*shared[: 1 + i % 4], run.record(f"own-{next(counter)}")] for i in range(16)]
    answers = await asyncio.gather(*(batch(store, records) for records in requests))
    ids_of: dict[str, set[str]] = {}
    inserted: dict[str, int] = {}
    for records, results in zip(requests, answers, strict=True):
        for record, (id_, was_inserted, _) in zip(records, results, strict=True):
            ids_of.setdefault(record.event_key, set()).add(id_)
            inserted[record.event_key] = inserted.get(record.event_key, 0) + was_inserted
    assert all(len(found) == 1 for found in ids_of.values())
    assert set(inserted.values()) == {1}
    listed = await store.records(run.id)
    assert len(listed) == 1 + 4 + 16
    assert len({r.event_key for r in listed}) == len(listed)


async def test_a_batch_and_single_appends_interleave_in_one_order(store: Store) -> None:
    run = await store.root()
    singles = [run.record(unique("single")) for _ in range(12)]
    batches = [model_response(run, f"t{i}") for i in range(6)]
    await asyncio.gather(
        *(single(store, record) for record in singles),
        *(batch(store, records) for records in batches),
    )
    listed = await store.records(run.id)
    assert [r.id for r in listed] == [str(i) for i in range(1, 2 + 12 + 24)]
    assert stored(listed) == stored(await store.session_records(run.start.session_id))
