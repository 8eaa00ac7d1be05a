"""Pure validation rules V1–V8, lifecycle command checks and paging (§4, §5.8, §6.4, §9.6.5).

These functions run before any transaction, so they are tested alone with core
model values (times are int nanoseconds). Texts and check order are the upstream
ones (V1, V3 and the method sections of §9); where a record fails two rules the
earlier rule must win.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import pytest

from runstore.contract import lifecycle
from runstore.contract.errors import (
    ChildAgentIDRequiredError,
    ChildRunIDRequiredError,
    ChildSessionIDRequiredError,
    ParentRunIDRequiredError,
    ReadArgumentError,
    RunRecordOwnerMismatchError,
    RunstoreError,
    ValidationError,
)
from runstore.contract.model import Checkpoint, RunStartOutcome, RunStatus
from runstore.contract.namespaces import DEFAULT
from runstore.server.core import paging, validation
from runstore.server.core.model import (
    NANOS_PER_MILLI,
    Page,
    RecordDraft,
    RunRecord,
    RunStart,
    RunState,
)

MS = NANOS_PER_MILLI
T0 = 1_700_000_000_123 * MS
"""A whole-millisecond start time."""

OWNER_MISMATCH = "run record owner does not match stored run"
MIB = 1_048_576


# --- Builders ----------------------------------------------------------------


def raises(call: Callable[[], Any], kind: type[RunstoreError]) -> RunstoreError:
    """Runs ``call`` and returns the error it raised, which must be exactly ``kind``."""
    with pytest.raises(RunstoreError) as info:
        call()
    assert type(info.value) is kind, f"{type(info.value).__name__}: {info.value}"
    return info.value


def record(**overrides: Any) -> RecordDraft:
    """An ordinary record that passes V1 and V2."""
    values: dict[str, Any] = {
        "event_key": "note-1",
        "run_id": "run-1",
        "agent_id": "agent",
        "session_id": "session",
        "turn_id": "",
        "type": "note",
        "payload": b"{}",
        "timestamp": T0,
        "namespace": DEFAULT,
    }
    values.update(overrides)
    return RecordDraft(**values)


def root_run(**overrides: Any) -> RunStart:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "agent_id": "agent",
        "session_id": "session",
        "started_at": T0,
        "labels": {"site": "one"},
    }
    values.update(overrides)
    return RunStart(**values)


def child_run(**overrides: Any) -> RunStart:
    return root_run(**{"run_id": "child-1", "parent_run_id": "parent-1", **overrides})


def one_shot_run(**overrides: Any) -> RunStart:
    return root_run(**{"session_id": "", **overrides})


def one_shot_child_run(**overrides: Any) -> RunStart:
    return root_run(
        **{"run_id": "child-1", "session_id": "", "parent_run_id": "parent-1", **overrides}
    )


def started_payload(run: RunStart, **overrides: Any) -> bytes:
    values: dict[str, Any] = {
        "parent_run_id": run.parent_run_id,
        "predecessor_run_id": run.predecessor_run_id,
        "labels": run.labels,
    }
    values.update(overrides)
    return lifecycle.encode_run_started(lifecycle.RunStartedPayload(**values))


def started(run: RunStart, **overrides: Any) -> RecordDraft:
    """The ``run_started`` record that agrees with ``run`` (V4)."""
    values: dict[str, Any] = {
        "event_key": "started",
        "run_id": run.run_id,
        "agent_id": run.agent_id,
        "session_id": run.session_id,
        "type": lifecycle.RUN_STARTED,
        "payload": started_payload(run),
        "timestamp": run.started_at,
    }
    values.update(overrides)
    return record(**values)


def completed_payload(
    status: str = lifecycle.COMPLETION_SUCCESS,
    phase: str = "completed",
    *,
    labels: Mapping[str, str] | None = None,
    failure: lifecycle.RunFailure | None = None,
    reason: str | None = None,
) -> bytes:
    return lifecycle.encode_run_completed(
        lifecycle.RunCompletedPayload(
            status=status,
            phase=phase,
            failure=failure,
            cancellation_reason=reason,
            labels=labels or {},
        )
    )


def canceled_payload(reason: str, labels: Mapping[str, str]) -> bytes:
    return completed_payload(
        lifecycle.COMPLETION_CANCELED, "canceled", labels=labels, reason=reason
    )


def failed_payload(labels: Mapping[str, str]) -> bytes:
    failure = lifecycle.RunFailure(message="boom", kind="internal")
    return completed_payload(lifecycle.COMPLETION_FAILED, "failed", labels=labels, failure=failure)


def canceled(run: RunStart, **overrides: Any) -> RecordDraft:
    """The ended-session ``run_completed`` record every session start carries (V5)."""
    values: dict[str, Any] = {
        "event_key": "stopped",
        "run_id": run.run_id,
        "agent_id": run.agent_id,
        "session_id": run.session_id,
        "type": lifecycle.RUN_COMPLETED,
        "payload": canceled_payload(lifecycle.REASON_SESSION_ENDED, run.labels),
        "timestamp": run.started_at,
    }
    values.update(overrides)
    return record(**values)


def link_payload(run: RunStart, **overrides: Any) -> bytes:
    values: dict[str, Any] = {
        "tool_name": "agent.tool",
        "tool_call_id": "call-1",
        "child_run_id": run.run_id,
        "child_agent_id": run.agent_id,
    }
    values.update(overrides)
    return lifecycle.encode_child_run_linked(lifecycle.ChildRunLinkedPayload(**values))


def link(run: RunStart, **overrides: Any) -> RecordDraft:
    """The ``child_run_linked`` record written on the parent run (V6)."""
    values: dict[str, Any] = {
        "event_key": "link",
        "run_id": run.parent_run_id,
        "agent_id": "parent-agent",
        "session_id": run.session_id,
        "type": lifecycle.CHILD_RUN_LINKED,
        "payload": link_payload(run),
        "timestamp": run.started_at,
    }
    values.update(overrides)
    return record(**values)


def stored_run(**overrides: Any) -> RunState:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "agent_id": "agent",
        "session_id": "session",
        "parent_run_id": "",
        "started_at": T0,
        "labels": {"site": "one"},
        "start_outcome": RunStartOutcome.PROCEED,
        "status": RunStatus.RUNNING,
        "cancellation_reason": "",
        "updated_at": T0,
    }
    values.update(overrides)
    return RunState(**values)


def owned_by(run: RunState, **overrides: Any) -> RecordDraft:
    return record(
        **{
            "run_id": run.run_id,
            "agent_id": run.agent_id,
            "session_id": run.session_id,
            **overrides,
        }
    )


def cancellation(
    run: RunState, reason: str = lifecycle.REASON_USER_REQUESTED, **overrides: Any
) -> RecordDraft:
    payload = lifecycle.encode_cancellation_intent(lifecycle.CancellationIntentPayload(reason))
    values = {"event_key": "cancel", "type": lifecycle.CANCELLATION_INTENT, "payload": payload}
    return owned_by(run, **{**values, **overrides})


def suspended(run: RunState, suspension_id: str = "susp-1", **overrides: Any) -> RecordDraft:
    payload = lifecycle.encode_run_suspended(
        lifecycle.RunSuspendedPayload(suspension_id, version="v6", pending_count=1)
    )
    values = {"event_key": "suspended", "type": lifecycle.RUN_SUSPENDED, "payload": payload}
    return owned_by(run, **{**values, **overrides})


def terminal(run: RunState, payload: bytes | None = None, **overrides: Any) -> RecordDraft:
    if payload is None:
        payload = completed_payload(labels=run.labels)
    values = {"event_key": "done", "type": lifecycle.RUN_COMPLETED, "payload": payload}
    return owned_by(run, **{**values, **overrides})


CHECKPOINT = Checkpoint(id="susp-1", data=b"\x00checkpoint")


# --- V1: record envelope -------------------------------------------------------


def test_envelope_accepts_a_complete_record_and_returns_it() -> None:
    """V1: session and turn are not part of the envelope."""
    rec = record(session_id="", turn_id="")
    assert validation.check_record_envelope(rec, "record") is rec


def test_envelope_reports_every_rule_in_the_documented_order() -> None:
    """V1 / upstream §1.1: fixing the fields one by one walks the eight texts in order."""
    steps: list[tuple[str, Any, str, str]] = [
        ("run_id", "run-1", "run id is required", "record.run_id"),
        ("agent_id", "agent", "agent id is required", "record.agent_id"),
        ("event_key", "k", "event key is required", "record.event_key"),
        ("type", "note", "record type is required", "record.type"),
        ("payload", b"x", "record payload is required", "record.payload"),
        ("timestamp", T0 + 1, "record timestamp is required", "record.timestamp"),
        (
            "timestamp",
            T0,
            "record timestamp must use millisecond precision",
            "record.timestamp",
        ),
    ]
    err = raises(lambda: validation.check_record_envelope(None, "record"), ValidationError)
    assert (err.message, err.field) == ("run record is required", "record")
    rec = RecordDraft("", "", "", "", "", "", b"", None, DEFAULT)
    for name, fixed, message, field in steps:
        err = raises(partial(validation.check_record_envelope, rec, "record"), ValidationError)
        assert (err.message, err.field) == (message, field)
        rec = dataclasses.replace(rec, **{name: fixed})
    assert validation.check_record_envelope(rec, "record") is rec


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"run_id": "", "timestamp": None}, "run id is required"),
        ({"agent_id": "", "event_key": ""}, "agent id is required"),
        ({"event_key": "", "payload": b""}, "event key is required"),
        ({"type": "", "timestamp": T0 + 1}, "record type is required"),
        ({"payload": b"", "timestamp": None}, "record payload is required"),
        ({"agent_id": "", "timestamp": T0 + 1}, "agent id is required"),
    ],
)
def test_envelope_earlier_rule_wins_over_later_rule(
    overrides: dict[str, Any], message: str
) -> None:
    """V1: 'checked in this order; the first failure wins'."""
    err = raises(
        lambda: validation.check_record_envelope(record(**overrides), "x"), ValidationError
    )
    assert err.message == message


@pytest.mark.parametrize(
    ("timestamp", "ok"),
    [
        (0, True),
        (-5 * MS, True),
        (T0, True),
        (T0 + 1, False),
        (T0 + 1000, False),
        (T0 + MS - 1, False),
        (-1, False),
    ],
)
def test_envelope_timestamp_must_be_a_whole_millisecond(timestamp: int, ok: bool) -> None:
    """V1.7/V1.8 (D7): the epoch is a present time; sub-millisecond parts are rejected."""
    rec = record(timestamp=timestamp)
    if ok:
        assert validation.check_record_envelope(rec, "record") is rec
    else:
        err = raises(lambda: validation.check_record_envelope(rec, "record"), ValidationError)
        assert err.message == "record timestamp must use millisecond precision"


def test_envelope_payload_is_opaque_bytes() -> None:
    """V1 / Q8: no JSON or UTF-8 check in the envelope."""
    rec = record(payload=b"\xff\x00not json")
    assert validation.check_record_envelope(rec, "record") is rec


def test_envelope_prefix_and_context_are_carried_by_the_error() -> None:
    """The prefix names the record upstream's way; metadata carries run, session, key."""
    rec = record(type="")
    err = raises(
        lambda: validation.check_record_envelope(rec, "started", "started record: "),
        ValidationError,
    )
    assert err.message == "started record: record type is required"
    assert err.field == "started.type"
    meta = err.metadata()
    assert meta["permanent"] == "true"
    assert (meta["run_id"], meta["session_id"], meta["event_key"]) == ("run-1", "session", "note-1")
    assert err.reason == "CONTRACT_VALIDATION"


# --- V2: ordinary records ----------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(lifecycle.LIFECYCLE_TYPES))
def test_ordinary_record_rejects_lifecycle_types(kind: str) -> None:
    """V2: lifecycle types need a lifecycle operation."""
    err = raises(lambda: validation.check_ordinary_record(record(type=kind)), ValidationError)
    assert err.message == f'record type "{kind}" requires a lifecycle operation'
    assert err.field == "record.type"


@pytest.mark.parametrize(
    "kind",
    [
        lifecycle.TRANSCRIPT_SEEDED,
        lifecycle.TRANSCRIPT_APPENDED,
        "note",
        "Run_Started",
        "run_started ",
    ],
)
def test_ordinary_record_accepts_every_other_type(kind: str) -> None:
    """V2: only the five exact lifecycle names are excluded; the payload is not inspected."""
    rec = record(type=kind, payload=b"not json")
    assert validation.check_ordinary_record(rec) is rec


def test_ordinary_record_checks_the_envelope_before_the_type() -> None:
    """V2 = V1 first, then the type exclusion."""
    rec = record(type=lifecycle.RUN_COMPLETED, payload=b"")
    err = raises(lambda: validation.check_ordinary_record(rec), ValidationError)
    assert (err.message, err.field) == ("record payload is required", "record.payload")


# --- V3: session starts ------------------------------------------------------------


def test_session_starts_accept_valid_identities() -> None:
    """V3: a predecessor other than the run itself is fine for roots and children."""
    validation.check_session_run_start(root_run(predecessor_run_id="prev"), child=False)
    validation.check_session_run_start(child_run(predecessor_run_id="prev"), child=True)


@pytest.mark.parametrize(
    ("overrides", "message", "field"),
    [
        ({"run_id": ""}, "run id is required", "run.run_id"),
        ({"agent_id": ""}, "agent id is required", "run.agent_id"),
        ({"session_id": ""}, "session id is required", "run.session_id"),
        ({"parent_run_id": "p"}, "root run cannot have parent run id", "run.parent_run_id"),
        (
            {"predecessor_run_id": "run-1"},
            "predecessor run id must differ from run id",
            "run.predecessor_run_id",
        ),
        ({"started_at": None}, "started_at is required", "run.started_at"),
        ({"started_at": T0 + 1}, "started_at must use millisecond precision", "run.started_at"),
    ],
)
def test_root_start_identity_rules(overrides: dict[str, Any], message: str, field: str) -> None:
    """V3 (root) texts and field names."""
    run = root_run(**overrides)
    err = raises(lambda: validation.check_session_run_start(run, child=False), ValidationError)
    assert (err.message, err.field) == (message, field)


@pytest.mark.parametrize(
    ("overrides", "kind", "message", "field"),
    [
        ({"run_id": ""}, ChildRunIDRequiredError, "child run id is required", "run.run_id"),
        ({"agent_id": ""}, ChildAgentIDRequiredError, "child agent id is required", "run.agent_id"),
        (
            {"session_id": ""},
            ChildSessionIDRequiredError,
            "child session id is required",
            "run.session_id",
        ),
        (
            {"parent_run_id": ""},
            ParentRunIDRequiredError,
            "parent run id is required",
            "run.parent_run_id",
        ),
        (
            {"predecessor_run_id": "child-1"},
            ValidationError,
            "predecessor run id must differ from run id",
            "run.predecessor_run_id",
        ),
        ({"started_at": None}, ValidationError, "started_at is required", "run.started_at"),
        (
            {"started_at": T0 + 999},
            ValidationError,
            "started_at must use millisecond precision",
            "run.started_at",
        ),
    ],
)
def test_child_start_identity_rules_use_named_errors(
    overrides: dict[str, Any], kind: type[RunstoreError], message: str, field: str
) -> None:
    """V3 (child) / §1.3: the child sentinels are distinct classes with their own reasons."""
    run = child_run(**overrides)
    err = raises(lambda: validation.check_session_run_start(run, child=True), kind)
    assert (err.message, err.field) == (message, field)
    assert err.permanent


def test_child_start_identity_walks_rules_in_order() -> None:
    """V3 order for a child: run id, agent, session, parent, predecessor, started_at, precision."""
    run = RunStart(predecessor_run_id="child-1", started_at=None)
    steps: list[tuple[str, Any, type[RunstoreError], str]] = [
        ("run_id", "child-1", ChildRunIDRequiredError, "child run id is required"),
        ("agent_id", "agent", ChildAgentIDRequiredError, "child agent id is required"),
        ("session_id", "s", ChildSessionIDRequiredError, "child session id is required"),
        ("parent_run_id", "p", ParentRunIDRequiredError, "parent run id is required"),
        (
            "predecessor_run_id",
            "",
            ValidationError,
            "predecessor run id must differ from run id",
        ),
        ("started_at", T0 + 1, ValidationError, "started_at is required"),
        ("started_at", T0, ValidationError, "started_at must use millisecond precision"),
    ]
    for name, fixed, kind, message in steps:
        err = raises(partial(validation.check_session_run_start, run, child=True), kind)
        assert err.message == message
        run = dataclasses.replace(run, **{name: fixed})
    validation.check_session_run_start(run, child=True)


@pytest.mark.parametrize(
    ("overrides", "child", "message"),
    [
        ({"run_id": "", "agent_id": ""}, False, "run id is required"),
        ({"agent_id": "", "session_id": ""}, False, "agent id is required"),
        ({"session_id": "", "parent_run_id": "p"}, False, "session id is required"),
        (
            {"parent_run_id": "p", "predecessor_run_id": "run-1"},
            False,
            "root run cannot have parent run id",
        ),
        (
            {"predecessor_run_id": "run-1", "started_at": None},
            False,
            "predecessor run id must differ from run id",
        ),
        ({"run_id": "", "agent_id": "", "session_id": ""}, True, "child run id is required"),
        ({"parent_run_id": "", "started_at": None}, True, "parent run id is required"),
    ],
)
def test_session_start_earlier_identity_rule_wins(
    overrides: dict[str, Any], child: bool, message: str
) -> None:
    """V3: first failure wins."""
    run = (child_run if child else root_run)(**overrides)
    with pytest.raises(RunstoreError) as info:
        validation.check_session_run_start(run, child=child)
    assert info.value.message == message


# --- V3: sessionless starts -----------------------------------------------------


def test_one_shot_identity_walks_rules_in_order() -> None:
    """§3.4: run id, agent, no session, no parent, no predecessor, started_at, precision."""
    run = RunStart(session_id="s", parent_run_id="p", predecessor_run_id="q", started_at=None)
    steps: list[tuple[str, Any, str, str]] = [
        ("run_id", "run-1", "run id is required", "run.run_id"),
        ("agent_id", "agent", "agent id is required", "run.agent_id"),
        ("session_id", "", "one-shot run cannot have session id", "run.session_id"),
        ("parent_run_id", "", "one-shot run cannot have parent run id", "run.parent_run_id"),
        (
            "predecessor_run_id",
            "",
            "one-shot run cannot have predecessor run id",
            "run.predecessor_run_id",
        ),
        ("started_at", T0 + 1, "started_at is required", "run.started_at"),
        ("started_at", T0, "started_at must use millisecond precision", "run.started_at"),
    ]
    for name, fixed, message, field in steps:
        err = raises(
            partial(validation.check_sessionless_run_start, run, child=False), ValidationError
        )
        assert (err.message, err.field) == (message, field)
        run = dataclasses.replace(run, **{name: fixed})
    validation.check_sessionless_run_start(run, child=False)


def test_one_shot_child_identity_walks_rules_in_order() -> None:
    """§3.5: plain texts (not the child sentinels) except ErrParentRunIDRequired."""
    run = RunStart(session_id="s", predecessor_run_id="q", started_at=None)
    steps: list[tuple[str, Any, type[RunstoreError], str]] = [
        ("run_id", "child-1", ValidationError, "run id is required"),
        ("agent_id", "agent", ValidationError, "agent id is required"),
        ("session_id", "", ValidationError, "one-shot child cannot have session id"),
        ("parent_run_id", "p", ParentRunIDRequiredError, "parent run id is required"),
        (
            "predecessor_run_id",
            "",
            ValidationError,
            "one-shot child cannot have predecessor run id",
        ),
        ("started_at", T0 + 1, ValidationError, "started_at is required"),
        ("started_at", T0, ValidationError, "started_at must use millisecond precision"),
    ]
    for name, fixed, kind, message in steps:
        err = raises(partial(validation.check_sessionless_run_start, run, child=True), kind)
        assert err.message == message
        run = dataclasses.replace(run, **{name: fixed})
    validation.check_sessionless_run_start(run, child=True)


def test_one_shot_predecessor_equal_to_run_id_is_still_forbidden() -> None:
    """Sessionless starts forbid any predecessor (V3)."""
    run = one_shot_run(predecessor_run_id="run-1")
    err = raises(lambda: validation.check_sessionless_run_start(run, child=False), ValidationError)
    assert err.message == "one-shot run cannot have predecessor run id"


# --- V4: run_started -----------------------------------------------------------------


def test_started_record_matching_the_start_is_accepted() -> None:
    """V4 happy path; turn id is not compared."""
    run = root_run(predecessor_run_id="prev")
    rec = started(run, turn_id="turn-9")
    assert validation.check_started_record(rec, run) is rec


def test_started_record_missing_is_reported_with_prefix() -> None:
    err = raises(lambda: validation.check_started_record(None, root_run()), ValidationError)
    assert (err.message, err.field) == ("started record: run record is required", "started")


def test_started_record_envelope_errors_carry_the_prefix() -> None:
    """§3.2: validateRunStartedRecord errors are prefixed 'started record: '."""
    run = root_run()
    err = raises(
        lambda: validation.check_started_record(started(run, event_key=""), run), ValidationError
    )
    assert (err.message, err.field) == (
        "started record: event key is required",
        "started.event_key",
    )


def test_started_record_envelope_is_checked_before_type() -> None:
    run = root_run()
    rec = started(run, type="", payload=b"garbage")
    err = raises(lambda: validation.check_started_record(rec, run), ValidationError)
    assert err.message == "started record: record type is required"


def test_started_record_wrong_type_is_reported_before_payload_decoding() -> None:
    """§3.12 step 2 precedes step 3."""
    run = root_run()
    rec = started(run, type=lifecycle.RUN_COMPLETED, payload=b"garbage")
    err = raises(lambda: validation.check_started_record(rec, run), ValidationError)
    assert err.message == 'started record: record has type "run_completed", want "run_started"'
    assert err.field == "started.type"


def test_started_record_payload_is_decoded_strictly() -> None:
    """§3.12: 'decode run_started payload: json: unknown field ...' under the prefix."""
    run = root_run(labels={})
    rec = started(run, payload=b'{"Labels":{}}')
    err = raises(lambda: validation.check_started_record(rec, run), ValidationError)
    assert err.message == 'started record: decode run_started payload: json: unknown field "Labels"'
    assert err.field == "started.payload"


def test_started_record_payload_decoding_precedes_owner_check() -> None:
    """decodeHookRecord runs before the owner comparison (§3.9)."""
    run = root_run()
    rec = started(run, agent_id="other", payload=b"{} {}")
    err = raises(lambda: validation.check_started_record(rec, run), ValidationError)
    assert err.message == "started record: decode run_started payload: multiple JSON values"


@pytest.mark.parametrize("owner_field", ["run_id", "agent_id", "session_id"])
def test_started_record_of_another_owner_is_an_owner_mismatch(owner_field: str) -> None:
    """V4.2: ErrRunRecordOwnerMismatch, prefixed, FAILED_PRECONDITION."""
    run = root_run()
    rec = started(run, **{owner_field: "other"})
    err = raises(lambda: validation.check_started_record(rec, run), RunRecordOwnerMismatchError)
    assert err.message == "started record: " + OWNER_MISMATCH
    assert err.code == "FAILED_PRECONDITION"
    assert err.reason == "RUN_RECORD_OWNER_MISMATCH"
    assert err.field == "started"
    assert (err.run_id, err.event_key) == (rec.run_id, "started")


def test_started_record_owner_check_precedes_timestamp() -> None:
    run = root_run()
    rec = started(run, agent_id="other", timestamp=T0 + MS)
    raises(lambda: validation.check_started_record(rec, run), RunRecordOwnerMismatchError)


def test_started_record_timestamp_must_equal_started_at() -> None:
    """V4.3."""
    run = root_run()
    rec = started(run, timestamp=T0 + MS, payload=started_payload(run, parent_run_id="x"))
    err = raises(lambda: validation.check_started_record(rec, run), ValidationError)
    assert err.message == "started record: timestamp does not match run start"
    assert err.field == "started.timestamp"


@pytest.mark.parametrize(
    ("run", "payload_overrides"),
    [
        (root_run(), {"parent_run_id": "x"}),
        (child_run(), {"parent_run_id": ""}),
        (child_run(), {"parent_run_id": "parent-2"}),
    ],
)
def test_started_record_parent_must_match(run: RunStart, payload_overrides: dict[str, str]) -> None:
    """V4.4 (checked before predecessor and labels)."""
    payload = started_payload(run, predecessor_run_id="zzz", labels={}, **payload_overrides)
    err = raises(
        lambda: validation.check_started_record(started(run, payload=payload), run),
        ValidationError,
    )
    assert err.message == "started record: parent run id does not match run"
    assert err.field == "started.payload"


@pytest.mark.parametrize(
    ("run_predecessor", "payload_predecessor"), [("", "prev"), ("prev", ""), ("prev", "other")]
)
def test_started_record_predecessor_must_match(
    run_predecessor: str, payload_predecessor: str
) -> None:
    """V4.5 (checked before labels)."""
    run = root_run(predecessor_run_id=run_predecessor)
    payload = started_payload(run, predecessor_run_id=payload_predecessor, labels={"x": "y"})
    err = raises(
        lambda: validation.check_started_record(started(run, payload=payload), run),
        ValidationError,
    )
    assert err.message == "started record: predecessor run id does not match run"


@pytest.mark.parametrize(
    ("run_labels", "payload"),
    [
        ({"site": "one"}, b"{}"),
        ({"site": "one"}, b'{"labels":{"site":"two"}}'),
        ({"site": "one"}, b'{"labels":{"site":"one","extra":"x"}}'),
        ({"site": "one"}, b'{"labels":{"Site":"one"}}'),
        ({}, b'{"labels":{"site":"one"}}'),
    ],
)
def test_started_record_labels_must_match(run_labels: dict[str, str], payload: bytes) -> None:
    """V4.6 / V7."""
    run = root_run(labels=run_labels)
    err = raises(
        lambda: validation.check_started_record(started(run, payload=payload), run),
        ValidationError,
    )
    assert err.message == "started record: labels do not match run"


@pytest.mark.parametrize(
    "payload", [b"{}", b'{"labels":{}}', b'{"labels":null}', b'{"parent_run_id":null}']
)
def test_started_record_absent_labels_equal_empty_labels(payload: bytes) -> None:
    """V7: absent ≡ empty; JSON null is absent (§5.1 rule 3)."""
    run = root_run(labels={})
    rec = started(run, payload=payload)
    assert validation.check_started_record(rec, run) is rec


def test_started_record_labels_are_compared_as_maps() -> None:
    """V7: key order in the payload does not matter for the comparison."""
    run = root_run(labels={"a": "1", "b": "2"})
    rec = started(run, payload=b'{"labels":{"b":"2","a":"1"}}')
    assert validation.check_started_record(rec, run) is rec


# --- V5: ended-session record --------------------------------------------------------


def test_root_start_returns_both_validated_records() -> None:
    """§9.2.1 step 1."""
    run = root_run()
    s, c = started(run), canceled(run)
    assert validation.check_root_run_start(run, s, c) == (s, c)


def test_ended_session_record_is_required_even_for_an_active_session() -> None:
    """§3.2 / §5.4 of facts: the Canceled record is always required and validated."""
    run = root_run()
    err = raises(lambda: validation.check_root_run_start(run, started(run), None), ValidationError)
    assert (err.message, err.field) == ("canceled record: run record is required", "canceled")


def test_ended_session_record_envelope_errors_carry_the_prefix() -> None:
    run = root_run()
    rec = canceled(run, timestamp=T0 + 1)
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == "canceled record: record timestamp must use millisecond precision"
    assert err.field == "canceled.timestamp"


def test_ended_session_record_must_be_run_completed() -> None:
    run = root_run()
    rec = canceled(run, type=lifecycle.RUN_STARTED)
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == 'canceled record: record has type "run_started", want "run_completed"'
    assert err.field == "canceled.type"


def test_ended_session_record_payload_is_decoded_with_invariants() -> None:
    """§3.12: the codec's invariant errors carry 'decode run_completed payload: '."""
    run = root_run(labels={})
    rec = canceled(run, payload=b'{"status":"canceled","phase":"canceled","cancellation":{}}')
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == (
        "canceled record: decode run_completed payload: "
        "canceled run completion requires cancellation reason"
    )
    assert err.field == "canceled.payload"


def test_ended_session_record_of_another_run_is_an_owner_mismatch() -> None:
    """§14.3 / upstream test 3."""
    run = root_run()
    other = root_run(run_id="run-2")
    err = raises(
        lambda: validation.check_root_run_start(run, started(run), canceled(other)),
        RunRecordOwnerMismatchError,
    )
    assert err.message == "canceled record: " + OWNER_MISMATCH
    assert err.field == "canceled"


def test_ended_session_record_carries_the_start_time_not_the_end_time() -> None:
    """V5: Timestamp equals StartedAt (checked before the outcome)."""
    run = root_run()
    rec = canceled(run, timestamp=T0 + 5000 * MS, payload=completed_payload(labels=run.labels))
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == "canceled record: timestamp does not match run start"
    assert err.field == "canceled.timestamp"


@pytest.mark.parametrize(
    "payload",
    [
        completed_payload(labels={"x": "y"}),
        completed_payload(
            lifecycle.COMPLETION_FAILED,
            "failed",
            failure=lifecycle.RunFailure(message="m", kind="k"),
        ),
        completed_payload(lifecycle.COMPLETION_CANCELED, "failed", reason="user_requested"),
        completed_payload(lifecycle.COMPLETION_CANCELED, "completed", reason="session_ended"),
    ],
)
def test_ended_session_record_must_cancel_the_run(payload: bytes) -> None:
    """V5: status and phase both 'canceled' (checked before reason and labels)."""
    run = root_run()
    rec = canceled(run, payload=payload)
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == "canceled record: ended-session record must cancel the run"
    assert err.field == "canceled.payload"


@pytest.mark.parametrize(
    "reason",
    [
        lifecycle.REASON_USER_REQUESTED,
        lifecycle.REASON_ENGINE_CANCELED,
        "Session_Ended",
    ],
)
def test_ended_session_record_must_carry_session_ended(reason: str) -> None:
    """V5: reason session_ended (checked before labels)."""
    run = root_run()
    rec = canceled(run, payload=canceled_payload(reason, {"x": "y"}))
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == "canceled record: ended-session record has wrong cancellation reason"


def test_ended_session_record_labels_must_match() -> None:
    """V5: labels equal RunStart.Labels (checked before the key comparison)."""
    run = root_run()
    rec = canceled(
        run,
        event_key="started",
        payload=canceled_payload(lifecycle.REASON_SESSION_ENDED, {"site": "two"}),
    )
    err = raises(lambda: validation.check_root_run_start(run, started(run), rec), ValidationError)
    assert err.message == "canceled record: labels do not match run"


def test_ended_session_record_absent_labels_equal_empty_labels() -> None:
    run = root_run(labels={})
    rec = canceled(
        run,
        payload=b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"},"labels":null}',
    )
    assert validation.check_root_run_start(run, started(run), rec)[1] is rec


def test_started_and_canceled_records_need_different_keys() -> None:
    """V5: exact text, no prefix; field names the canceled key."""
    run = root_run()
    err = raises(
        lambda: validation.check_root_run_start(
            run, started(run), canceled(run, event_key="started")
        ),
        ValidationError,
    )
    assert err.message == "started and canceled records require different event keys"
    assert err.field == "canceled.event_key"


def test_root_start_checks_identity_then_started_then_canceled() -> None:
    """§3.2 order: V3, then the started record, then the canceled record."""
    run = root_run()
    bad_started = started(run, type="note")
    err = raises(
        lambda: validation.check_root_run_start(root_run(session_id=""), bad_started, None),
        ValidationError,
    )
    assert err.message == "session id is required"
    err = raises(lambda: validation.check_root_run_start(run, bad_started, None), ValidationError)
    assert err.message.startswith("started record: ")
    err = raises(
        lambda: validation.check_root_run_start(run, started(run), canceled(run, type="note")),
        ValidationError,
    )
    assert err.message.startswith("canceled record: ")


# --- V6: child_run_linked --------------------------------------------------------------


def test_child_start_returns_link_started_and_canceled() -> None:
    """§9.2.2 step 1; session child link and start keys may be equal (V6.6)."""
    run = child_run()
    rec_link = link(run, event_key="same")
    rec_started = started(run, event_key="same")
    rec_canceled = canceled(run)
    assert validation.check_child_run_start(run, rec_link, rec_started, rec_canceled) == (
        rec_link,
        rec_started,
        rec_canceled,
    )


def test_parent_link_agent_and_timestamp_are_not_checked() -> None:
    """V6.5 / §3.11: the store, not the validator, checks the parent agent."""
    run = child_run()
    rec = link(run, agent_id="anyone", timestamp=T0 + 7777 * MS)
    assert validation.check_parent_link(rec, run) is rec


def test_parent_link_missing_is_reported_with_prefix() -> None:
    run = child_run()
    err = raises(
        lambda: validation.check_child_run_start(run, None, started(run), canceled(run)),
        ValidationError,
    )
    assert (err.message, err.field) == (
        "parent link record: run record is required",
        "parent_linked",
    )


def test_parent_link_must_be_child_run_linked() -> None:
    run = child_run()
    rec = link(run, type=lifecycle.RUN_STARTED)
    err = raises(lambda: validation.check_parent_link(rec, run), ValidationError)
    assert (
        err.message == 'parent link record: record has type "run_started", want "child_run_linked"'
    )
    assert err.field == "parent_linked.type"


def test_parent_link_payload_keys_are_case_sensitive() -> None:
    """§5.5 + D2: Go field names only."""
    run = child_run()
    rec = link(
        run,
        payload=b'{"toolName":"t","ToolCallID":"c","ChildRunID":"child-1","ChildAgentID":"agent"}',
    )
    err = raises(lambda: validation.check_parent_link(rec, run), ValidationError)
    assert err.message == (
        'parent link record: decode child_run_linked payload: json: unknown field "toolName"'
    )
    assert err.field == "parent_linked.payload"


@pytest.mark.parametrize(
    "overrides", [{"run_id": "parent-2"}, {"session_id": "other"}, {"session_id": ""}]
)
def test_parent_link_must_belong_to_the_parent_in_the_child_session(
    overrides: dict[str, str],
) -> None:
    """V6.2 (checked before child identity and tool fields)."""
    run = child_run()
    rec = link(run, payload=link_payload(run, child_run_id="x", tool_name=""), **overrides)
    err = raises(lambda: validation.check_parent_link(rec, run), ValidationError)
    assert err.message == "parent link record: parent identity does not match child run"
    assert err.field == "parent_linked"


@pytest.mark.parametrize(
    "payload_overrides",
    [{"child_run_id": "child-2"}, {"child_agent_id": "other"}, {"child_run_id": ""}],
)
def test_parent_link_must_name_the_child(payload_overrides: dict[str, str]) -> None:
    """V6.3 (checked before tool fields)."""
    run = child_run()
    rec = link(run, payload=link_payload(run, tool_call_id="", **payload_overrides))
    err = raises(lambda: validation.check_parent_link(rec, run), ValidationError)
    assert err.message == "parent link record: child identity does not match run"
    assert err.field == "parent_linked.payload"


@pytest.mark.parametrize("payload_overrides", [{"tool_name": ""}, {"tool_call_id": ""}])
def test_parent_link_needs_tool_name_and_call_id(payload_overrides: dict[str, str]) -> None:
    """V6.4."""
    run = child_run()
    rec = link(run, payload=link_payload(run, **payload_overrides))
    err = raises(lambda: validation.check_parent_link(rec, run), ValidationError)
    assert err.message == "parent link record: parent tool name and call id are required"


def test_child_start_checks_identity_then_link_then_started_then_canceled() -> None:
    """§3.3 order."""
    run = child_run()
    err = raises(
        lambda: validation.check_child_run_start(child_run(run_id=""), None, None, None),
        ChildRunIDRequiredError,
    )
    assert err.message == "child run id is required"
    err = raises(lambda: validation.check_child_run_start(run, None, None, None), ValidationError)
    assert err.message == "parent link record: run record is required"
    err = raises(
        lambda: validation.check_child_run_start(run, link(run), None, None), ValidationError
    )
    assert err.message == "started record: run record is required"
    err = raises(
        lambda: validation.check_child_run_start(run, link(run), started(run), None),
        ValidationError,
    )
    assert err.message == "canceled record: run record is required"


def test_child_start_still_requires_distinct_started_and_canceled_keys() -> None:
    run = child_run()
    err = raises(
        lambda: validation.check_child_run_start(
            run, link(run), started(run), canceled(run, event_key="started")
        ),
        ValidationError,
    )
    assert err.message == "started and canceled records require different event keys"


# --- One-shot starts --------------------------------------------------------------------


def test_one_shot_start_accepts_a_sessionless_started_record() -> None:
    run = one_shot_run()
    rec = started(run)
    assert validation.check_one_shot_run_start(run, rec) is rec


def test_one_shot_start_checks_identity_before_the_record() -> None:
    run = one_shot_run(session_id="s")
    err = raises(lambda: validation.check_one_shot_run_start(run, None), ValidationError)
    assert err.message == "one-shot run cannot have session id"
    err = raises(lambda: validation.check_one_shot_run_start(one_shot_run(), None), ValidationError)
    assert err.message == "started record: run record is required"


def test_one_shot_started_record_with_a_session_is_an_owner_mismatch() -> None:
    run = one_shot_run()
    err = raises(
        lambda: validation.check_one_shot_run_start(run, started(run, session_id="s")),
        RunRecordOwnerMismatchError,
    )
    assert err.message == "started record: " + OWNER_MISMATCH


def test_one_shot_child_start_returns_link_and_started() -> None:
    run = one_shot_child_run()
    rec_link, rec_started = link(run), started(run)
    assert validation.check_one_shot_child_run_start(run, rec_link, rec_started) == (
        rec_link,
        rec_started,
    )


def test_one_shot_child_link_must_be_sessionless() -> None:
    """V6.2: the link's session equals the child's session, which is empty."""
    run = one_shot_child_run()
    rec = link(run, session_id="session")
    err = raises(
        lambda: validation.check_one_shot_child_run_start(run, rec, started(run)), ValidationError
    )
    assert err.message == "parent link record: parent identity does not match child run"


def test_one_shot_child_link_and_started_keys_must_differ() -> None:
    """V6.6: exact text; field names the started key."""
    run = one_shot_child_run()
    err = raises(
        lambda: validation.check_one_shot_child_run_start(
            run, link(run, event_key="k"), started(run, event_key="k")
        ),
        ValidationError,
    )
    assert err.message == "parent link and started records require different event keys"
    assert err.field == "started.event_key"


def test_one_shot_child_checks_identity_then_link_then_started_then_keys() -> None:
    """§3.5 order."""
    run = one_shot_child_run()
    raises(
        lambda: validation.check_one_shot_child_run_start(
            one_shot_child_run(parent_run_id=""), None, None
        ),
        ParentRunIDRequiredError,
    )
    err = raises(
        lambda: validation.check_one_shot_child_run_start(run, None, started(run)), ValidationError
    )
    assert err.message == "parent link record: run record is required"
    err = raises(
        lambda: validation.check_one_shot_child_run_start(
            run, link(run, event_key="k"), started(run, event_key="k", timestamp=T0 + MS)
        ),
        ValidationError,
    )
    assert err.message == "started record: timestamp does not match run start"


# --- Cancellation (§9.4.1 step 2, §5.6) ----------------------------------------------------


def test_cancellation_accepts_matching_record() -> None:
    run = stored_run()
    rec = cancellation(run)
    assert validation.check_cancellation("run-1", "user_requested", rec, run) is rec


@pytest.mark.parametrize(
    ("run_id", "reason", "field"),
    [("", "user_requested", "run_id"), ("run-1", "", "reason"), ("", "", "run_id")],
)
def test_cancellation_requires_run_id_and_reason(run_id: str, reason: str, field: str) -> None:
    run = stored_run()
    err = raises(lambda: validation.check_cancellation(run_id, reason, None, run), ValidationError)
    assert (err.message, err.field) == ("run cancellation requires run id and reason", field)


def test_cancellation_command_must_name_the_stored_run() -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_cancellation("run-2", "user_requested", None, run),
        ValidationError,
    )
    assert (err.message, err.field) == ("cancellation command does not match stored run", "run_id")
    err = raises(lambda: validation.check_cancellation("run-2", "", None, run), ValidationError)
    assert err.message == "run cancellation requires run id and reason"


@pytest.mark.parametrize(
    ("overrides", "message", "field"),
    [
        ({"event_key": ""}, "cancellation record: event key is required", "record.event_key"),
        ({"payload": b""}, "cancellation record: record payload is required", "record.payload"),
        (
            {"timestamp": None},
            "cancellation record: record timestamp is required",
            "record.timestamp",
        ),
    ],
)
def test_cancellation_record_envelope_errors_carry_the_prefix(
    overrides: dict[str, Any], message: str, field: str
) -> None:
    run = stored_run()
    rec = cancellation(run, **overrides)
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", rec, run), ValidationError
    )
    assert (err.message, err.field) == (message, field)


def test_cancellation_record_missing_is_reported_with_prefix() -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", None, run),
        ValidationError,
    )
    assert (err.message, err.field) == ("cancellation record: run record is required", "record")


@pytest.mark.parametrize("owner_field", ["run_id", "agent_id", "session_id"])
def test_cancellation_record_owner_must_match_the_run(owner_field: str) -> None:
    """§3.6 step 3; the owner check precedes the type check."""
    run = stored_run()
    rec = cancellation(run, type="note", **{owner_field: "other"})
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", rec, run),
        RunRecordOwnerMismatchError,
    )
    assert err.message == "cancellation record: " + OWNER_MISMATCH
    assert err.field == "record"


def test_cancellation_record_must_be_a_cancellation_intent() -> None:
    """§3.6 step 4: own text, no prefix."""
    run = stored_run()
    rec = cancellation(run, type="note", payload=b"garbage")
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", rec, run), ValidationError
    )
    assert err.message == (
        'cancellation record has type "note", want "runtime.cancellation_intent"'
    )
    assert err.field == "record.type"


@pytest.mark.parametrize(
    ("payload", "cause"),
    [
        (b'{"reason":"user_requested"} {}', "multiple JSON values"),
        (b'{"reason":"user_requested"}x', "invalid character 'x' looking for beginning of value"),
    ],
)
def test_cancellation_payload_errors_are_decode_errors(payload: bytes, cause: str) -> None:
    run = stored_run()
    rec = cancellation(run, payload=payload)
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", rec, run), ValidationError
    )
    assert err.message == f"decode cancellation record: {cause}"
    assert err.field == "record.payload"


@pytest.mark.parametrize("payload", [b"[]", b'"user_requested"', b"1"])
def test_cancellation_payload_must_be_an_object(payload: bytes) -> None:
    run = stored_run()
    rec = cancellation(run, payload=payload)
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", rec, run), ValidationError
    )
    assert err.message.startswith("decode cancellation record: ")


def test_cancellation_payload_is_decoded_leniently() -> None:
    """§5.6: unknown keys ignored, case-insensitive key."""
    run = stored_run()
    rec = cancellation(run, payload=b'{"Reason":"user_requested","extra":{"a":[1]}}')
    assert validation.check_cancellation("run-1", "user_requested", rec, run) is rec


@pytest.mark.parametrize(
    "payload",
    [
        b'{"reason":"session_ended"}',
        b"null",
        b"{}",
        b'{"reason":null}',
        b'{"reasons":"user_requested"}',
    ],
)
def test_cancellation_record_reason_must_match_command(payload: bytes) -> None:
    """§5.6: payload reason (null or absent = empty) must equal the command reason."""
    run = stored_run()
    rec = cancellation(run, payload=payload)
    err = raises(
        lambda: validation.check_cancellation("run-1", "user_requested", rec, run), ValidationError
    )
    assert err.message == "cancellation record reason does not match command"
    assert err.field == "record.payload"


# --- Suspension (§9.4.2 step 2, §5.4) ------------------------------------------------------


def test_suspension_accepts_matching_record_without_checking_data_or_version() -> None:
    """§3.7: data, version, pending count and timestamp are not validated."""
    run = stored_run()
    payload = lifecycle.encode_run_suspended(lifecycle.RunSuspendedPayload("susp-1"))
    rec = suspended(run, payload=payload, timestamp=T0 + 99 * MS)
    checkpoint = Checkpoint(id="susp-1", data=b"\xff")
    assert validation.check_suspension("run-1", checkpoint, rec, run) == (checkpoint, rec)


@pytest.mark.parametrize(
    ("run_id", "checkpoint", "field"),
    [
        ("", CHECKPOINT, "run_id"),
        ("run-1", None, "suspension.id"),
        ("run-1", Checkpoint(id="", data=b"x"), "suspension.id"),
        ("run-1", Checkpoint(id="s", data=b""), "suspension.data"),
        ("", Checkpoint(id="", data=b""), "run_id"),
    ],
)
def test_suspension_requires_run_id_id_and_data(
    run_id: str, checkpoint: Checkpoint | None, field: str
) -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_suspension(run_id, checkpoint, None, run), ValidationError
    )
    assert err.message == "run suspension requires run id, suspension id, and data"
    assert err.field == field


def test_suspension_command_must_name_the_stored_run() -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_suspension("run-2", CHECKPOINT, None, run), ValidationError
    )
    assert (err.message, err.field) == ("suspension command does not match stored run", "run_id")


def test_suspension_record_errors_carry_the_prefix() -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_suspension("run-1", CHECKPOINT, None, run), ValidationError
    )
    assert (err.message, err.field) == ("suspension record: run record is required", "record")
    rec = suspended(run, type=lifecycle.RUN_COMPLETED)
    err = raises(
        lambda: validation.check_suspension("run-1", CHECKPOINT, rec, run), ValidationError
    )
    assert err.message == 'suspension record: record has type "run_completed", want "run_suspended"'
    assert err.field == "record.type"


def test_suspension_payload_is_decoded_before_the_owner_check() -> None:
    """§3.7 steps 3-4: decode first; keys are the Go field names."""
    run = stored_run()
    rec = suspended(run, agent_id="other", payload=b'{"suspension_id":"susp-1"}')
    err = raises(
        lambda: validation.check_suspension("run-1", CHECKPOINT, rec, run), ValidationError
    )
    assert err.message == (
        'suspension record: decode run_suspended payload: json: unknown field "suspension_id"'
    )
    assert err.field == "record.payload"


@pytest.mark.parametrize("owner_field", ["run_id", "agent_id", "session_id"])
def test_suspension_record_owner_must_match_the_run(owner_field: str) -> None:
    """§3.7 step 4 (before the checkpoint ID comparison)."""
    run = stored_run()
    rec = suspended(run, suspension_id="other", **{owner_field: "x"})
    err = raises(
        lambda: validation.check_suspension("run-1", CHECKPOINT, rec, run),
        RunRecordOwnerMismatchError,
    )
    assert err.message == "suspension record: " + OWNER_MISMATCH


def test_suspension_record_must_name_the_checkpoint() -> None:
    run = stored_run()
    rec = suspended(run, suspension_id="susp-2")
    err = raises(
        lambda: validation.check_suspension("run-1", CHECKPOINT, rec, run), ValidationError
    )
    assert err.message == "suspension record does not match checkpoint"
    assert err.field == "record.payload"


# --- Terminal (§9.4.3 step 2, §5.3, §5.8, §10.1) ----------------------------------------------


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        (RunStatus.COMPLETED, completed_payload(labels={"site": "one"})),
        (RunStatus.FAILED, failed_payload({"site": "one"})),
        (RunStatus.CANCELED, canceled_payload(lifecycle.REASON_ENGINE_CANCELED, {"site": "one"})),
    ],
)
def test_terminal_accepts_each_ending(status: RunStatus, payload: bytes) -> None:
    """The record timestamp is not compared with anything (§3.8)."""
    run = stored_run()
    rec = terminal(run, payload, timestamp=T0 + 12345 * MS)
    assert validation.check_terminal("run-1", status, rec, run) == (status, rec)


@pytest.mark.parametrize(
    ("run_id", "status", "field"),
    [
        ("", RunStatus.COMPLETED, "run_id"),
        ("run-1", None, "status"),
        ("run-1", RunStatus.RUNNING, "status"),
        ("run-1", RunStatus.SUSPENDED, "status"),
        ("", None, "run_id"),
    ],
)
def test_terminal_requires_run_id_and_an_ending_status(
    run_id: str, status: RunStatus | None, field: str
) -> None:
    """§3.8 step 1: suspended is not a terminal command status."""
    run = stored_run()
    err = raises(lambda: validation.check_terminal(run_id, status, None, run), ValidationError)
    assert err.message == "run terminal requires completed, failed, or canceled status"
    assert err.field == field


def test_terminal_command_must_name_the_stored_run() -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_terminal("run-2", RunStatus.COMPLETED, None, run), ValidationError
    )
    assert (err.message, err.field) == ("terminal command does not match stored run", "run_id")


def test_terminal_record_errors_carry_the_prefix() -> None:
    run = stored_run()
    err = raises(
        lambda: validation.check_terminal("run-1", RunStatus.COMPLETED, None, run), ValidationError
    )
    assert err.message == "terminal record: run record is required"
    rec = terminal(run, type=lifecycle.RUN_SUSPENDED)
    err = raises(
        lambda: validation.check_terminal("run-1", RunStatus.COMPLETED, rec, run), ValidationError
    )
    assert err.message == 'terminal record: record has type "run_suspended", want "run_completed"'


def test_terminal_payload_invariants_are_decode_errors() -> None:
    """§3.12: invariant failures carry the decode prefix, before the owner check."""
    run = stored_run()
    rec = terminal(
        run,
        b'{"status":"failed","phase":"failed","failure":{"message":"m","retryable":false}}',
        agent_id="other",
    )
    err = raises(
        lambda: validation.check_terminal("run-1", RunStatus.FAILED, rec, run), ValidationError
    )
    assert err.message == (
        "terminal record: decode run_completed payload: failed run completion requires failure kind"
    )
    assert err.field == "record.payload"


@pytest.mark.parametrize("owner_field", ["run_id", "agent_id", "session_id"])
def test_terminal_record_owner_must_match_the_run(owner_field: str) -> None:
    """§3.8 step 4 (before the outcome comparison); upstream test 16."""
    run = stored_run()
    rec = terminal(run, failed_payload({}), **{owner_field: "x"})
    err = raises(
        lambda: validation.check_terminal("run-1", RunStatus.COMPLETED, rec, run),
        RunRecordOwnerMismatchError,
    )
    assert err.message == "terminal record: " + OWNER_MISMATCH
    assert err.reason == "RUN_RECORD_OWNER_MISMATCH"


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        (RunStatus.COMPLETED, failed_payload({})),
        (RunStatus.FAILED, completed_payload(labels={})),
        (RunStatus.CANCELED, completed_payload(labels={})),
        (RunStatus.COMPLETED, completed_payload(phase="failed")),
        (RunStatus.COMPLETED, completed_payload(phase="")),
        (
            RunStatus.FAILED,
            completed_payload(
                lifecycle.COMPLETION_FAILED,
                "completed",
                failure=lifecycle.RunFailure(message="m", kind="k"),
            ),
        ),
        (
            RunStatus.CANCELED,
            completed_payload(lifecycle.COMPLETION_CANCELED, "failed", reason="engine_canceled"),
        ),
    ],
)
def test_terminal_record_outcome_must_match_command(status: RunStatus, payload: bytes) -> None:
    """§5.3 mapping: status and phase both match (checked before labels)."""
    run = stored_run()
    rec = terminal(run, payload)
    err = raises(lambda: validation.check_terminal("run-1", status, rec, run), ValidationError)
    assert err.message == "terminal record outcome does not match command"
    assert err.field == "record.payload"


def test_terminal_record_labels_must_match_run() -> None:
    """§5.8 (checked before the cancellation reason); upstream test 24."""
    run = stored_run()
    rec = terminal(run, canceled_payload("user_requested", {"site": "two"}))
    err = raises(
        lambda: validation.check_terminal("run-1", RunStatus.CANCELED, rec, run), ValidationError
    )
    assert err.message == "terminal record labels do not match run"


def test_terminal_record_absent_labels_equal_empty_run_labels() -> None:
    run = stored_run(labels={})
    rec = terminal(run, b'{"status":"success","phase":"completed","labels":{}}')
    assert validation.check_terminal("run-1", RunStatus.COMPLETED, rec, run)[1] is rec


@pytest.mark.parametrize(
    ("stored_reason", "payload_reason", "ok"),
    [
        ("", lifecycle.REASON_ENGINE_CANCELED, True),
        ("", lifecycle.REASON_USER_REQUESTED, False),
        ("", lifecycle.REASON_SESSION_ENDED, False),
        (lifecycle.REASON_USER_REQUESTED, lifecycle.REASON_USER_REQUESTED, True),
        (lifecycle.REASON_USER_REQUESTED, lifecycle.REASON_ENGINE_CANCELED, False),
        (lifecycle.REASON_SESSION_ENDED, lifecycle.REASON_SESSION_ENDED, True),
        (lifecycle.REASON_SESSION_ENDED, lifecycle.REASON_ENGINE_CANCELED, False),
        ("custom", "custom", True),
    ],
)
def test_canceled_terminal_repeats_the_cancellation_provenance(
    stored_reason: str, payload_reason: str, ok: bool
) -> None:
    """§10.1: the stored reason, or engine_canceled when none was recorded."""
    run = stored_run(cancellation_reason=stored_reason)
    rec = terminal(run, canceled_payload(payload_reason, run.labels))
    if ok:
        assert validation.check_terminal("run-1", RunStatus.CANCELED, rec, run) == (
            RunStatus.CANCELED,
            rec,
        )
    else:
        err = raises(
            lambda: validation.check_terminal("run-1", RunStatus.CANCELED, rec, run),
            ValidationError,
        )
        assert err.message == "terminal record cancellation reason does not match run"
        assert err.field == "record.payload"


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED])
def test_recorded_cancellation_does_not_force_a_canceled_ending(status: RunStatus) -> None:
    """§10.1: a run with reason R may still complete or fail."""
    run = stored_run(cancellation_reason=lifecycle.REASON_USER_REQUESTED)
    payload = (
        completed_payload(labels=run.labels)
        if status is RunStatus.COMPLETED
        else failed_payload(run.labels)
    )
    assert validation.check_terminal("run-1", status, terminal(run, payload), run)[0] is status


# --- Session commands and time range ---------------------------------------------------------


def test_create_session_needs_id_then_time() -> None:
    """§9.1.1 step 1 order: id first, then created_at."""
    err = raises(lambda: validation.check_session_command("", None, "created_at"), ValidationError)
    assert (err.message, err.field) == ("session id is required", "session_id")
    err = raises(lambda: validation.check_session_command("s", None, "created_at"), ValidationError)
    assert (err.message, err.field) == ("created_at is required", "created_at")
    validation.check_session_command("s", 0, "created_at")


def test_end_session_checks_only_the_time() -> None:
    """§9.1.4 step 1: no empty-ID check (an empty ID is reported as not found later)."""
    validation.check_session_command("", T0, "ended_at")
    err = raises(lambda: validation.check_session_command("", None, "ended_at"), ValidationError)
    assert (err.message, err.field) == ("ended_at is required", "ended_at")


def test_time_range_is_the_protobuf_timestamp_range() -> None:
    last = (253402300799 * 10**9) + 999_999_999  # 9999-12-31T23:59:59.999999999Z
    first = -62135596800 * 10**9  # 0001-01-01T00:00:00Z
    assert validation.check_time_range(last, "t") == last
    assert validation.check_time_range(first, "t") == first
    assert validation.check_time_range(2**63, "t") == 2**63  # after 2262: no longer refused
    for value in (last + 1, first - 1):
        err = raises(partial(validation.check_time_range, value, "run.started_at"), ValidationError)
        assert err.message == "run.started_at is out of range (0001-01-01 to 9999-12-31 UTC)"
        assert err.field == "run.started_at"


# --- Paging: limit and cursors (§6.4, D3) ---------------------------------------------------------


@pytest.mark.parametrize("limit", [0, -1, -(2**40)])
def test_limit_must_be_positive(limit: int) -> None:
    err = raises(lambda: paging.check_limit(limit), ReadArgumentError)
    assert (err.message, err.field) == ("limit must be greater than zero", "limit")
    assert (err.code, err.reason) == ("INVALID_ARGUMENT", "INVALID_ARGUMENT_READ")


def test_limit_one_is_accepted() -> None:
    paging.check_limit(1)
    paging.check_limit(10**9)


@pytest.mark.parametrize(
    ("cursor", "position"), [("", 0), ("1", 1), ("42", 42), ("003", 3), ("0010", 10)]
)
def test_cursor_is_a_count_of_records_to_skip(cursor: str, position: int) -> None:
    assert paging.parse_cursor(cursor) == position


@pytest.mark.parametrize(
    "cursor",
    ["0", "000", "-1", "+1", " 1", "1 ", "1_000", "1.0", "1e3", "abc", "0x10", "٣", "²", "１"],
)
def test_cursor_accepts_positive_ascii_digits_only(cursor: str) -> None:
    """§6.4 rule 2, D3: no sign, space, underscore or non-ASCII digit."""
    err = raises(lambda: paging.parse_cursor(cursor), ReadArgumentError)
    assert (err.message, err.field) == (f'invalid cursor "{cursor}"', "cursor")


def test_huge_cursor_clamps_to_the_largest_position() -> None:
    """§6.4 rule 3: a cursor beyond the end reads an empty page, not an error."""
    assert paging.parse_cursor("9" * 40) == 2**63 - 1
    assert paging.parse_cursor(str(2**63 - 1)) == 2**63 - 1
    assert paging.parse_cursor(str(2**63)) == 2**63 - 1


@pytest.mark.parametrize(
    ("text", "value"), [("1", 1), ("10", 10), ("9223372036854775807", 2**63 - 1)]
)
def test_record_id_accepts_canonical_ids(text: str, value: int) -> None:
    assert paging.parse_record_id(text) == value


@pytest.mark.parametrize(
    "text", ["", "0", "01", "00", "+1", "-1", " 1", "1a", "1_0", "²", "٣", "9223372036854775808"]
)
def test_record_id_rejects_non_canonical_text(text: str) -> None:
    """§9.6.5 step 4: IDs compare as exact strings, so "01" names no record."""
    assert paging.parse_record_id(text) is None


# --- Paging: page cutting -------------------------------------------------------------------------


def stored(record_id: int, size: int = 2, run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        id=record_id,
        event_key=f"k{record_id}",
        run_id=run_id,
        agent_id="agent",
        session_id="session",
        turn_id="",
        type=lifecycle.TRANSCRIPT_APPENDED,
        payload=b"x" * size,
        timestamp=T0,
    )


def positioned(*sizes: int, first: int = 1) -> list[tuple[int, RunRecord]]:
    return [(first + i, stored(first + i, size)) for i, size in enumerate(sizes)]


def test_cut_page_returns_everything_when_rows_fit() -> None:
    rows = positioned(2, 2, 2)
    page = paging.cut_page(rows, 3, 1000)
    assert page == Page([r for _, r in rows], "")


def test_cut_page_of_nothing_is_empty() -> None:
    assert paging.cut_page([], 10, 1000) == Page([], "")


def test_cut_page_stops_at_the_limit_with_the_last_position_as_cursor() -> None:
    """The store fetches limit+1 rows; the extra row proves there is more."""
    rows = positioned(2, 2, 2, 2, first=7)
    page = paging.cut_page(rows, 3, 1000)
    assert [r.id for r in page.events] == [7, 8, 9]
    assert page.next_cursor == "9"


def test_cut_page_cursor_is_the_position_not_the_record_id() -> None:
    """§6.4 rule 6: session pages use positions (IDs repeat across runs)."""
    rows = [(10, stored(1, run_id="a")), (11, stored(1, run_id="b")), (12, stored(2, run_id="a"))]
    page = paging.cut_page(rows, 2, 1000)
    assert [(r.run_id, r.id) for r in page.events] == [("a", 1), ("b", 1)]
    assert page.next_cursor == "11"


def test_cut_page_respects_the_byte_budget_inclusively() -> None:
    assert paging.cut_page(positioned(3, 3), 10, 6) == Page([stored(1, 3), stored(2, 3)], "")
    page = paging.cut_page(positioned(3, 3, 1), 10, 6)
    assert ([r.id for r in page.events], page.next_cursor) == ([1, 2], "2")
    page = paging.cut_page(positioned(3, 4, 1), 10, 6)
    assert ([r.id for r in page.events], page.next_cursor) == ([1], "1")


def test_cut_page_always_returns_at_least_one_record() -> None:
    """A single row larger than the budget still makes progress."""
    page = paging.cut_page(positioned(100, 1), 10, 6)
    assert ([r.id for r in page.events], page.next_cursor) == ([1], "1")
    page = paging.cut_page(positioned(100), 10, 6)
    assert ([r.id for r in page.events], page.next_cursor) == ([1], "")


def test_page_length_is_the_one_rule_for_every_list() -> None:
    """Records, memory events and transcript messages: at most the page size,
    within the byte budget inclusively, the first item always."""
    assert paging.page_length([], 10, 6) == 0
    assert paging.page_length([3, 3, 1], 10, 6) == 2
    assert paging.page_length([3, 3], 1, 6) == 1
    assert paging.page_length([100, 1], 10, 6) == 1
    assert paging.page_length(iter([2, 2, 2, 2]), 3, 1000) == 3


def test_transcript_page_caps_the_record_count() -> None:
    """§9.6.5 step 6: a full page's cursor is the ID of its last record."""
    rows = [stored(i, 256) for i in range(2, 6)]
    page = paging.cut_transcript_page(rows, 3)
    assert ([r.id for r in page.events], page.next_cursor) == ([2, 3, 4], "4")
    page = paging.cut_transcript_page(rows[:3], 3)
    assert ([r.id for r in page.events], page.next_cursor) == ([2, 3, 4], "")


def test_transcript_page_includes_a_record_of_exactly_one_mebibyte() -> None:
    """Upstream transcript test 1: the budget is inclusive."""
    for size in (MIB - 1, MIB):
        page = paging.cut_transcript_page([stored(2, size)], 10_000)
        assert ([r.id for r in page.events], page.next_cursor) == ([2], "")


def test_transcript_page_stops_before_the_record_that_exceeds_the_budget() -> None:
    """Upstream transcript test 2: [1 MiB-256, 256, 256] -> two records, then one."""
    rows = [stored(2, MIB - 256), stored(3, 256), stored(4, 256)]
    page = paging.cut_transcript_page(rows, 512)
    assert [r.id for r in page.events] == [2, 3]
    assert sum(len(r.payload) for r in page.events) == MIB
    assert page.next_cursor == "3"
    page = paging.cut_transcript_page(rows[2:], 512)
    assert ([r.id for r in page.events], page.next_cursor) == ([4], "")


def test_transcript_page_rejects_an_oversize_record_when_reached() -> None:
    """Upstream transcript test 4: exact text; the whole page fails."""
    err = raises(lambda: paging.cut_transcript_page([stored(2, MIB + 1)], 10), ValidationError)
    assert err.message == (
        'transcript record "2" payload size 1048577 exceeds supported page size 1048576 bytes'
    )
    err = raises(
        lambda: paging.cut_transcript_page([stored(2, 10), stored(3, MIB + 1)], 10),
        ValidationError,
    )
    assert err.message.startswith('transcript record "3" payload size 1048577')


def test_transcript_page_oversize_record_beyond_the_page_is_not_an_error() -> None:
    """§9.6.5 step 6: the error occurs only when iteration reaches the record."""
    rows = [stored(2, 10), stored(3, MIB + 1)]
    page = paging.cut_transcript_page(rows, 1)
    assert ([r.id for r in page.events], page.next_cursor) == ([2], "2")


def test_transcript_page_of_nothing_is_empty() -> None:
    assert paging.cut_transcript_page([], 512) == Page([], "")


# --- Go %q quoting in messages ----------------------------------------------------------------


def test_record_type_mismatch_quotes_the_type_like_go() -> None:
    """upstream decodeHookRecord: fmt.Errorf("record has type %q, want %q", ...); a quote or
    newline in the type is escaped the Go way."""
    run = root_run()
    rec = started(run, type='a"b\n')
    err = raises(lambda: validation.check_started_record(rec, run), ValidationError)
    assert err.message == 'started record: record has type "a\\"b\\n", want "run_started"'


# --- Robustness: decode failures stay validation errors ------------------------------------


def test_suspension_with_an_oversized_integer_is_a_validation_error() -> None:
    """A lifecycle payload the codec cannot read is a permanent validation error, never an
    unexpected exception (which the server would report as INTERNAL)."""
    run = stored_run()
    rec = suspended(run, payload=b'{"SuspensionID":"susp-1","PendingCount":' + b"9" * 5000 + b"}")
    err = raises(
        lambda: validation.check_suspension("run-1", CHECKPOINT, rec, run), ValidationError
    )
    assert err.message.startswith("suspension record: decode run_suspended payload: ")


def test_cancellation_ignores_an_oversized_integer_under_an_unknown_key() -> None:
    """§5.6: unknown keys are ignored, whatever valid JSON they hold."""
    run = stored_run()
    payload = b'{"reason":"user_requested","n":' + b"9" * 5000 + b"}"
    rec = cancellation(run, payload=payload)
    assert validation.check_cancellation("run-1", "user_requested", rec, run) is rec
