"""Bad requests get a precise status, one ErrorInfo naming the field, and write nothing."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.support import Store, fails_with, run_start, unique

INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def test_missing_run_start_names_the_field(store: Store) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    request = run.root_request()
    request.ClearField("run")
    before = await store.state(session_id=session, run_ids=(run.id,))
    failure = await fails_with(
        store.runtime.StartRootRun(request), INVALID, "CONTRACT_VALIDATION", "run id is required"
    )
    assert failure.metadata == {"permanent": "true", "field": "run.run_id"}
    assert await store.state(session_id=session, run_ids=(run.id,)) == before


async def test_missing_started_record(store: Store) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    request = run.root_request()
    request.ClearField("started")
    failure = await fails_with(store.runtime.StartRootRun(request), INVALID, "CONTRACT_VALIDATION")
    assert failure.message == "started record: run record is required"
    assert failure.metadata["field"] == "started"
    assert not await store.exists(run.id)


async def test_sub_millisecond_timestamps_are_rejected(store: Store) -> None:
    run = await store.root()
    record = run.record("precise")
    record.timestamp.nanos += 1
    before = await store.state(run_ids=(run.id,))
    failure = await fails_with(
        store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record)),
        INVALID,
        "CONTRACT_VALIDATION",
        "record timestamp must use millisecond precision",
    )
    assert failure.metadata["field"] == "record.timestamp"
    assert failure.metadata["event_key"] == "precise"
    assert await store.state(run_ids=(run.id,)) == before

    late = run_start(session_id=run.start.session_id)
    request = late.root_request()
    request.run.started_at.nanos += 500
    failure = await fails_with(
        store.runtime.StartRootRun(request),
        INVALID,
        "CONTRACT_VALIDATION",
        "started_at must use millisecond precision",
    )
    assert failure.metadata["field"] == "run.started_at"
    assert not await store.exists(late.id)


async def test_malformed_lifecycle_json_is_rejected(store: Store) -> None:
    session = await store.session()
    run = run_start(session_id=session)
    request = run.root_request()
    request.started.payload = b'{"labels": {"site": "one"}'
    failure = await fails_with(store.runtime.StartRootRun(request), INVALID, "CONTRACT_VALIDATION")
    assert failure.message.startswith("started record: decode run_started payload: ")
    assert failure.metadata["field"] == "started.payload"
    assert not await store.exists(run.id)


async def test_unknown_run_is_not_found_with_its_id(store: Store) -> None:
    ghost = run_start(run_id=unique("ghost"))
    failure = await fails_with(
        store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=ghost.record("k"))),
        grpc.StatusCode.NOT_FOUND,
        "RUN_NOT_FOUND",
        "run not found",
    )
    assert failure.metadata["run_id"] == ghost.id
    assert failure.metadata["permanent"] == "true"
    assert not await store.exists(ghost.id)


@pytest.mark.parametrize("nanos", [-1, 1_000_000_000])
async def test_invalid_timestamp_messages_are_rejected(store: Store, nanos: int) -> None:
    run = await store.root()
    record = run.record("broken-time")
    record.timestamp.CopyFrom(Timestamp(seconds=1, nanos=nanos))
    failure = await fails_with(
        store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record)),
        INVALID,
        "CONTRACT_VALIDATION",
        "not a valid timestamp",
    )
    assert failure.metadata["field"] == "record.timestamp"


async def test_timestamp_outside_the_stored_range_is_rejected(store: Store) -> None:
    session_id = unique("far-future")
    failure = await fails_with(
        store.admin.CreateSession(
            sa.CreateSessionRequest(
                session_id=session_id, created_at=Timestamp(seconds=253_402_300_800)
            )
        ),
        INVALID,
        "CONTRACT_VALIDATION",
        "out of range",
    )
    assert failure.metadata["field"] == "created_at"
    await fails_with(
        store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id)),
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
    )


async def test_go_zero_time_counts_as_missing(store: Store) -> None:
    run = await store.root()
    record = run.record("zero-time")
    record.timestamp.CopyFrom(Timestamp(seconds=-62135596800))
    await fails_with(
        store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record)),
        INVALID,
        "CONTRACT_VALIDATION",
        "record timestamp is required",
    )


async def test_read_arguments_are_checked_before_existence(store: Store) -> None:
    ghost = unique("ghost")
    failure = await fails_with(
        store.runtime.ListRunRecords(rs.ListRunRecordsRequest(run_id=ghost, limit=0)),
        INVALID,
        "INVALID_ARGUMENT_READ",
        "limit must be greater than zero",
    )
    assert failure.metadata == {"permanent": "true", "field": "limit"}
    failure = await fails_with(
        store.runtime.ListSessionRunRecords(
            rs.ListSessionRunRecordsRequest(session_id=ghost, cursor="x1", limit=10)
        ),
        INVALID,
        "INVALID_ARGUMENT_READ",
        'invalid cursor "x1"',
    )
    assert failure.metadata["field"] == "cursor"


async def test_terminal_status_must_be_terminal(store: Store) -> None:
    run = await store.root()
    for status in (pb.RUN_STATUS_UNSPECIFIED, pb.RUN_STATUS_RUNNING, pb.RUN_STATUS_SUSPENDED, 99):
        request = run.terminal_request()
        request.status = status
        failure = await fails_with(
            store.runtime.RecordRunTerminal(request),
            INVALID,
            "CONTRACT_VALIDATION",
            "run terminal requires completed, failed, or canceled status",
        )
        assert failure.metadata["field"] == "status"
    assert (await store.load(run.id)).status == pb.RUN_STATUS_RUNNING
