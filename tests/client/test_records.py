"""Record builders produce the canonical lifecycle payloads of §5."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runstore.client import Checkpoint, RunStart, RunStatus, records
from runstore.contract import lifecycle

STARTED_AT = datetime(2026, 11, 29, 10, 0, 0, 250000, tzinfo=UTC)
RUN = RunStart(
    run_id="r1",
    agent_id="chat",
    session_id="s1",
    started_at=STARTED_AT,
    labels={"tier": "<gold&>", "app": "demo"},
)


def test_run_started_record_is_canonical_and_stamped_at_start() -> None:
    record = records.run_started_record(RUN)
    assert record.payload == b'{"labels":{"app":"demo","tier":"\\u003cgold\\u0026\\u003e"}}'
    assert (record.type, record.timestamp, record.event_key) == (
        "run_started",
        STARTED_AT,
        "run_started",
    )
    assert (record.run_id, record.agent_id, record.session_id) == ("r1", "chat", "s1")
    child = RunStart(
        run_id="c1", agent_id="a", session_id="s1", parent_run_id="r1", started_at=STARTED_AT
    )
    assert records.run_started_record(child).payload == b'{"parent_run_id":"r1"}'


def test_ended_session_record_matches_rule_v5() -> None:
    record = records.ended_session_record(RUN)
    payload = lifecycle.decode_run_completed(record.payload)
    assert (payload.status, payload.phase, payload.cancellation_reason) == (
        "canceled",
        "canceled",
        "session_ended",
    )
    assert payload.labels == RUN.labels and record.timestamp == STARTED_AT
    assert record.event_key != records.run_started_record(RUN).event_key


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (RunStatus.COMPLETED, b'{"status":"success","phase":"completed","labels":'),
        (RunStatus.CANCELED, b'{"status":"canceled","phase":"canceled","cancellation":'),
        (RunStatus.FAILED, b'{"status":"failed","phase":"failed","failure":'),
    ],
)
def test_run_completed_record_per_status(status: RunStatus, expected: bytes) -> None:
    failure = (
        lifecycle.RunFailure(message="boom", kind="tool") if status is RunStatus.FAILED else None
    )
    record = records.run_completed_record(RUN, status, failure=failure)
    assert record.payload.startswith(expected)
    decoded = lifecycle.decode_run_completed(record.payload)
    assert decoded.labels == RUN.labels
    if status is RunStatus.CANCELED:
        assert decoded.cancellation_reason == "engine_canceled"  # nobody asked (§10.1)


def test_invalid_endings_are_refused_locally() -> None:
    with pytest.raises(lifecycle.PayloadError, match="requires failure payload"):
        records.run_completed_record(RUN, RunStatus.FAILED)
    with pytest.raises(ValueError, match="completed, failed or canceled"):
        records.run_completed_record(RUN, RunStatus.SUSPENDED)


def test_child_link_is_owned_by_the_parent() -> None:
    child = RunStart(
        run_id="c1", agent_id="helper", session_id="s1", parent_run_id="r1", started_at=STARTED_AT
    )
    link = records.child_run_linked_record(
        child, parent_agent_id="chat", tool_name="tools.ask", tool_call_id="call-1"
    )
    assert (link.run_id, link.agent_id, link.session_id) == ("r1", "chat", "s1")
    assert link.payload == (
        b'{"ToolName":"tools.ask","ToolCallID":"call-1","ChildRunID":"c1","ChildAgentID":"helper"}'
    )
    assert link.event_key == "child_run_linked:c1"


def test_suspension_and_cancellation_commands() -> None:
    checkpoint = Checkpoint("ck", b"data")
    checkpoint_command = records.run_suspension(
        RUN, checkpoint, version="v2", pending_count=2, required_tools=["a"]
    )
    assert checkpoint_command.suspension == checkpoint
    assert checkpoint_command.record.payload == (
        b'{"SuspensionID":"ck","Version":"v2","PendingCount":2,"RequiredTools":["a"]}'
    )
    cancel = records.run_cancellation(RUN, "user_requested")
    assert cancel.record.payload == b'{"reason":"user_requested"}'
    assert cancel.record.type == "runtime.cancellation_intent"


def test_start_commands_are_deterministic_for_a_run() -> None:
    """A retried worker step rebuilds the identical start command (§8)."""
    assert records.root_run_start(RUN) == records.root_run_start(RUN)
    one_shot = RunStart(run_id="o", agent_id="a", started_at=STARTED_AT)
    assert records.one_shot_run_start(one_shot) == records.one_shot_run_start(one_shot)


def test_now_is_whole_milliseconds_in_utc() -> None:
    moment = records.now()
    assert moment.tzinfo is UTC and moment.microsecond % 1000 == 0
