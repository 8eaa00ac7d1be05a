"""Validation rules V1–V8 and the payload checks of §5.8, as pure functions.

Each function checks one rule of docs/contract.md §4 in the documented order and
raises the first failure. Nothing here reads the database: these checks run
before a transaction starts, so a rejected command writes nothing. Messages are
the upstream texts; ``field`` names the request field that broke the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, Unpack

from runstore.contract import lifecycle
from runstore.contract.errors import (
    ChildAgentIDRequiredError,
    ChildRunIDRequiredError,
    ChildSessionIDRequiredError,
    ContinuationMismatchError,
    ErrorContext,
    ParentRunIDRequiredError,
    RunRecordOwnerMismatchError,
    ValidationError,
    quote,
)
from runstore.contract.model import (
    DIGEST_BYTES,
    TERMINAL_COMMAND_STATUSES,
    Checkpoint,
    RunStartOutcome,
    RunStatus,
)
from runstore.server.core.model import (
    NANOS_PER_MILLI,
    Nanos,
    RecordDraft,
    RunRecord,
    RunStart,
    RunState,
)

MIN_NANOS = -62_135_596_800 * 1_000_000_000
MAX_NANOS = 253_402_300_799 * 1_000_000_000 + 999_999_999
"""The range of google.protobuf.Timestamp, 0001-01-01 to 9999-12-31 UTC; the
store keeps every time in it exactly (D7)."""


def _invalid(
    message: str, field: str, record: RecordDraft | None = None, **context: Unpack[ErrorContext]
) -> ValidationError:
    if record is not None:
        context.setdefault("run_id", record.run_id)
        context.setdefault("session_id", record.session_id)
        context.setdefault("event_key", record.event_key)
    return ValidationError(message, field=field, **context)


def _owner_mismatch(prefix: str, field: str, record: RecordDraft) -> RunRecordOwnerMismatchError:
    return RunRecordOwnerMismatchError(
        prefix + RunRecordOwnerMismatchError.default_message,
        run_id=record.run_id,
        session_id=record.session_id,
        event_key=record.event_key,
        field=field,
    )


def is_whole_millisecond(nanos: Nanos) -> bool:
    return nanos % NANOS_PER_MILLI == 0


# --- V1, V2 -----------------------------------------------------------------


def check_record_envelope(record: RecordDraft | None, field: str, prefix: str = "") -> RecordDraft:
    """V1: the fields every record needs, in the contract's order.

    ``prefix`` names the record in the message the way upstream does
    ("started record: run id is required").
    """
    if record is None:
        raise _invalid(prefix + "run record is required", field)
    if not record.run_id:
        raise _invalid(prefix + "run id is required", f"{field}.run_id", record)
    if not record.agent_id:
        raise _invalid(prefix + "agent id is required", f"{field}.agent_id", record)
    if not record.event_key:
        raise _invalid(prefix + "event key is required", f"{field}.event_key", record)
    if not record.type:
        raise _invalid(prefix + "record type is required", f"{field}.type", record)
    if not record.payload:
        raise _invalid(prefix + "record payload is required", f"{field}.payload", record)
    if record.timestamp is None:
        raise _invalid(prefix + "record timestamp is required", f"{field}.timestamp", record)
    if not is_whole_millisecond(record.timestamp):
        raise _invalid(
            prefix + "record timestamp must use millisecond precision",
            f"{field}.timestamp",
            record,
        )
    return record


def check_ordinary_record(record: RecordDraft | None, field: str = "record") -> RecordDraft:
    """V2: lifecycle types are written only by lifecycle operations."""
    record = check_record_envelope(record, field)
    if record.type in lifecycle.LIFECYCLE_TYPES:
        raise _invalid(
            f"record type {quote(record.type)} requires a lifecycle operation",
            f"{field}.type",
            record,
        )
    return record


_P = TypeVar("_P")


def _decode_lifecycle_record(
    record: RecordDraft | None,
    expected_type: str,
    decoder: Callable[[bytes], _P],
    field: str,
    prefix: str,
) -> tuple[RecordDraft, _P]:
    """V1, then the record type, then the strict payload decode (§5.1)."""
    record = check_record_envelope(record, field, prefix)
    if record.type != expected_type:
        raise _invalid(
            f"{prefix}record has type {quote(record.type)}, want {quote(expected_type)}",
            f"{field}.type",
            record,
        )
    try:
        payload = decoder(record.payload)
    except lifecycle.PayloadError as exc:
        raise _invalid(
            f"{prefix}decode {expected_type} payload: {exc}", f"{field}.payload", record
        ) from None
    return record, payload


# --- The generation of a start (D1, §10.6) ----------------------------------


def check_request_digest(digest: bytes, run: RunStart) -> bool:
    """Which generation an engine start belongs to, told by its digest alone:
    empty is seed-era (False); exactly ``DIGEST_BYTES`` bytes, not all zero,
    is current (True); anything else is refused naming ``request_digest``.
    A seed-era start attaches no seed (D1), so it names no seed end."""
    run_id = run.run_id
    if not digest:
        if run.seed_end_id:
            raise _invalid(
                "a start without a request digest attaches no seed",
                "run.seed_end_id",
                run_id=run_id,
            )
        return False
    if len(digest) != DIGEST_BYTES:
        raise _invalid(
            f"request_digest must be {DIGEST_BYTES} bytes, not {len(digest)}",
            "request_digest",
            run_id=run_id,
        )
    if not any(digest):
        raise _invalid("accepted request digest is required", "request_digest", run_id=run_id)
    return True


# --- V3 ---------------------------------------------------------------------


def _check_started_at(run: RunStart) -> None:
    if run.started_at is None:
        raise _invalid("started_at is required", "run.started_at", run_id=run.run_id)
    if not is_whole_millisecond(run.started_at):
        raise _invalid(
            "started_at must use millisecond precision", "run.started_at", run_id=run.run_id
        )


def check_session_run_start(run: RunStart, *, child: bool) -> None:
    """V3 for root and child starts."""
    context: ErrorContext = {"run_id": run.run_id, "session_id": run.session_id}
    if not run.run_id:
        if child:
            raise ChildRunIDRequiredError(field="run.run_id")
        raise _invalid("run id is required", "run.run_id")
    if not run.agent_id:
        if child:
            raise ChildAgentIDRequiredError(field="run.agent_id", **context)
        raise _invalid("agent id is required", "run.agent_id", **context)
    if not run.session_id:
        if child:
            raise ChildSessionIDRequiredError(field="run.session_id", **context)
        raise _invalid("session id is required", "run.session_id", **context)
    if child and not run.parent_run_id:
        raise ParentRunIDRequiredError(field="run.parent_run_id", **context)
    if not child and run.parent_run_id:
        raise _invalid("root run cannot have parent run id", "run.parent_run_id", **context)
    if run.predecessor_run_id == run.run_id:
        raise _invalid(
            "predecessor run id must differ from run id", "run.predecessor_run_id", **context
        )
    _check_started_at(run)


def check_sessionless_run_start(run: RunStart, *, child: bool) -> None:
    """V3 for one-shot and one-shot child starts."""
    kind = "one-shot child" if child else "one-shot run"
    context: ErrorContext = {"run_id": run.run_id}
    if not run.run_id:
        raise _invalid("run id is required", "run.run_id")
    if not run.agent_id:
        raise _invalid("agent id is required", "run.agent_id", **context)
    if run.session_id:
        raise _invalid(f"{kind} cannot have session id", "run.session_id", **context)
    if child and not run.parent_run_id:
        raise ParentRunIDRequiredError(field="run.parent_run_id", **context)
    if not child and run.parent_run_id:
        raise _invalid(f"{kind} cannot have parent run id", "run.parent_run_id", **context)
    if run.predecessor_run_id:
        raise _invalid(
            f"{kind} cannot have predecessor run id", "run.predecessor_run_id", **context
        )
    _check_started_at(run)


# --- V4, V5, V6 -------------------------------------------------------------


def _check_owned_by(
    record: RecordDraft, owner: RunStart | RunState, field: str, prefix: str
) -> None:
    if (record.run_id, record.agent_id, record.session_id) != (
        owner.run_id,
        owner.agent_id,
        owner.session_id,
    ):
        raise _owner_mismatch(prefix, field, record)


def check_started_record(record: RecordDraft | None, run: RunStart) -> RecordDraft:
    """V4: the ``run_started`` record agrees with the RunStart."""
    field, prefix = "started", "started record: "
    record, payload = _decode_lifecycle_record(
        record, lifecycle.RUN_STARTED, lifecycle.decode_run_started, field, prefix
    )
    _check_owned_by(record, run, field, prefix)
    if record.timestamp != run.started_at:
        raise _invalid(prefix + "timestamp does not match run start", f"{field}.timestamp", record)
    if payload.parent_run_id != run.parent_run_id:
        raise _invalid(prefix + "parent run id does not match run", f"{field}.payload", record)
    if payload.predecessor_run_id != run.predecessor_run_id:
        raise _invalid(prefix + "predecessor run id does not match run", f"{field}.payload", record)
    if dict(payload.labels) != dict(run.labels):
        raise _invalid(prefix + "labels do not match run", f"{field}.payload", record)
    return record


def check_ended_session_record(
    record: RecordDraft | None, run: RunStart, started: RecordDraft
) -> RecordDraft:
    """V5 [S]: the canceled ``run_completed`` a stopped start stores.

    Always required and validated, even when the session is active (§3.10).
    """
    field, prefix = "canceled", "canceled record: "
    record, payload = _decode_lifecycle_record(
        record, lifecycle.RUN_COMPLETED, lifecycle.decode_run_completed, field, prefix
    )
    _check_owned_by(record, run, field, prefix)
    if record.timestamp != run.started_at:
        raise _invalid(prefix + "timestamp does not match run start", f"{field}.timestamp", record)
    if payload.status != lifecycle.COMPLETION_CANCELED or payload.phase != "canceled":
        raise _invalid(
            prefix + "ended-session record must cancel the run", f"{field}.payload", record
        )
    if payload.cancellation_reason != lifecycle.REASON_SESSION_ENDED:
        raise _invalid(
            prefix + "ended-session record has wrong cancellation reason",
            f"{field}.payload",
            record,
        )
    if dict(payload.labels) != dict(run.labels):
        raise _invalid(prefix + "labels do not match run", f"{field}.payload", record)
    if record.event_key == started.event_key:
        raise _invalid(
            "started and canceled records require different event keys",
            f"{field}.event_key",
            record,
        )
    return record


def check_start_cancellation(
    record: RecordDraft | None, run: RunStart, started: RecordDraft
) -> RecordDraft:
    """V5 [N]: the ``session_ended`` intent a current stopped start stores.

    Always required and validated, like the seed-era record (§3.10)."""
    field = "cancellation"
    if record is None:
        raise _invalid("cancellation record is required", field, run_id=run.run_id)
    record = _check_intent_record(record, run, lifecycle.REASON_SESSION_ENDED, field)
    if record.timestamp != run.started_at:
        raise _invalid(
            "cancellation record: timestamp does not match run start", f"{field}.timestamp", record
        )
    if record.event_key == started.event_key:
        raise _invalid(
            "started and cancellation records require different event keys",
            f"{field}.event_key",
            record,
        )
    return record


def _ended_session_record(
    run: RunStart,
    started: RecordDraft,
    canceled: RecordDraft | None,
    cancellation: RecordDraft | None,
    current: bool,
) -> RecordDraft:
    """V5 of the start's own generation; the other generation's record must be
    absent, so that a command never means both (D1)."""
    if current:
        if canceled is not None:
            raise _invalid(
                "a start with a request digest carries cancellation, not canceled",
                "canceled",
                run_id=run.run_id,
            )
        return check_start_cancellation(cancellation, run, started)
    if cancellation is not None:
        raise _invalid(
            "a start without a request digest carries canceled, not cancellation",
            "cancellation",
            run_id=run.run_id,
        )
    return check_ended_session_record(canceled, run, started)


def check_parent_link(record: RecordDraft | None, run: RunStart) -> RecordDraft:
    """V6: the ``child_run_linked`` record written on the parent run.

    The link's agent and timestamp are not checked here; the store compares the
    agent with the stored parent (PLC, §9).
    """
    field, prefix = "parent_linked", "parent link record: "
    record, payload = _decode_lifecycle_record(
        record, lifecycle.CHILD_RUN_LINKED, lifecycle.decode_child_run_linked, field, prefix
    )
    if record.run_id != run.parent_run_id or record.session_id != run.session_id:
        raise _invalid(prefix + "parent identity does not match child run", field, record)
    if payload.child_run_id != run.run_id or payload.child_agent_id != run.agent_id:
        raise _invalid(prefix + "child identity does not match run", f"{field}.payload", record)
    if not payload.tool_name or not payload.tool_call_id:
        raise _invalid(
            prefix + "parent tool name and call id are required", f"{field}.payload", record
        )
    return record


def check_distinct_link_and_start_keys(parent_linked: RecordDraft, started: RecordDraft) -> None:
    """V6.6: a one-shot child's link and start come in one command."""
    if parent_linked.event_key == started.event_key:
        raise _invalid(
            "parent link and started records require different event keys",
            "started.event_key",
            started,
        )


# --- Start commands (§9.2 step 1) -------------------------------------------


def check_root_run_start(
    run: RunStart,
    started: RecordDraft | None,
    canceled: RecordDraft | None,
    *,
    current: bool = False,
    cancellation: RecordDraft | None = None,
) -> tuple[RecordDraft, RecordDraft]:
    """§9.2.1 step 1: V3 (root), V4, V5 of the start's generation."""
    check_session_run_start(run, child=False)
    started = check_started_record(started, run)
    return started, _ended_session_record(run, started, canceled, cancellation, current)


def check_child_run_start(
    run: RunStart,
    parent_linked: RecordDraft | None,
    started: RecordDraft | None,
    canceled: RecordDraft | None,
    *,
    current: bool = False,
    cancellation: RecordDraft | None = None,
) -> tuple[RecordDraft, RecordDraft, RecordDraft]:
    """§9.2.2 step 1: V3 (child), V6, V4, V5. The link and start keys may be
    equal: they live in different runs."""
    check_session_run_start(run, child=True)
    link = check_parent_link(parent_linked, run)
    started = check_started_record(started, run)
    return link, started, _ended_session_record(run, started, canceled, cancellation, current)


def check_one_shot_run_start(run: RunStart, started: RecordDraft | None) -> RecordDraft:
    """§9.2.3 step 1: V3 (sessionless root), V4."""
    check_sessionless_run_start(run, child=False)
    return check_started_record(started, run)


def check_one_shot_child_run_start(
    run: RunStart, parent_linked: RecordDraft | None, started: RecordDraft | None
) -> tuple[RecordDraft, RecordDraft]:
    """§9.2.4 step 1: V3 (sessionless child), V6, V4, distinct keys."""
    check_sessionless_run_start(run, child=True)
    link = check_parent_link(parent_linked, run)
    started = check_started_record(started, run)
    check_distinct_link_and_start_keys(link, started)
    return link, started


# --- Lifecycle commands (§9.4 step 2, §5.8) ---------------------------------


def check_cancellation(
    run_id: str, reason: str, record: RecordDraft | None, run: RunState
) -> RecordDraft:
    """§9.4.1 step 2 and §5.6."""
    if not run_id or not reason:
        raise _invalid(
            "run cancellation requires run id and reason",
            "reason" if run_id else "run_id",
            run_id=run_id,
        )
    if run_id != run.run_id:
        raise _invalid("cancellation command does not match stored run", "run_id", run_id=run_id)
    return _check_intent_record(record, run, reason, "record")


def _check_intent_record(
    record: RecordDraft | None, owner: RunStart | RunState, reason: str, field: str
) -> RecordDraft:
    """A ``runtime.cancellation_intent`` record of ``owner`` carrying ``reason`` (§5.6)."""
    prefix = "cancellation record: "
    record = check_record_envelope(record, field, prefix)
    _check_owned_by(record, owner, field, prefix)
    if record.type != lifecycle.CANCELLATION_INTENT:
        raise _invalid(
            f"cancellation record has type {quote(record.type)}, "
            f"want {quote(lifecycle.CANCELLATION_INTENT)}",
            f"{field}.type",
            record,
        )
    try:
        payload = lifecycle.decode_cancellation_intent(record.payload)
    except lifecycle.PayloadError as exc:
        raise _invalid(f"decode cancellation record: {exc}", f"{field}.payload", record) from None
    if payload.reason != reason:
        raise _invalid(
            "cancellation record reason does not match command", f"{field}.payload", record
        )
    return record


def check_suspension(
    run_id: str, suspension: Checkpoint | None, record: RecordDraft | None, run: RunState
) -> tuple[Checkpoint, RecordDraft]:
    """§9.4.2 step 2 and §5.4. Checkpoint bytes and version are opaque."""
    if not run_id or suspension is None or not suspension.id or not suspension.data:
        missing = (
            "run_id"
            if not run_id
            else "suspension.id"
            if suspension is None or not suspension.id
            else "suspension.data"
        )
        raise _invalid(
            "run suspension requires run id, suspension id, and data", missing, run_id=run_id
        )
    if run_id != run.run_id:
        raise _invalid("suspension command does not match stored run", "run_id", run_id=run_id)
    if run.current and run.start_outcome is RunStartOutcome.STOP:
        raise _invalid(
            "ended-session start cannot suspend instead of settling cancellation",
            "record",
            run_id=run_id,
        )
    field, prefix = "record", "suspension record: "
    record, payload = _decode_lifecycle_record(
        record, lifecycle.RUN_SUSPENDED, lifecycle.decode_run_suspended, field, prefix
    )
    _check_owned_by(record, run, field, prefix)
    if payload.suspension_id != suspension.id:
        raise _invalid("suspension record does not match checkpoint", f"{field}.payload", record)
    return suspension, record


def terminal_record(
    record: RecordDraft | None,
) -> tuple[RecordDraft, lifecycle.RunCompletedPayload]:
    """§9.4.3 step 2's checks of the terminal record alone: V1, its type and
    the strict decode of its ``run_completed`` payload (§5.3)."""
    return _decode_lifecycle_record(
        record,
        lifecycle.RUN_COMPLETED,
        lifecycle.decode_run_completed,
        "record",
        "terminal record: ",
    )


def check_terminal(
    run_id: str,
    status: RunStatus | None,
    record: RecordDraft | None,
    run: RunState,
    payload: lifecycle.RunCompletedPayload | None = None,
) -> tuple[RunStatus, RecordDraft]:
    """§9.4.3 step 2 and §5.3/§5.8, including cancellation provenance (§10.1).

    ``payload``: what ``terminal_record`` already returned for ``record``, so
    that a command's payload is decoded once (the fast path's check, then the
    full rules)."""
    if not run_id or status not in TERMINAL_COMMAND_STATUSES:
        raise _invalid(
            "run terminal requires completed, failed, or canceled status",
            "status" if run_id else "run_id",
            run_id=run_id,
        )
    assert status is not None
    if run_id != run.run_id:
        raise _invalid("terminal command does not match stored run", "run_id", run_id=run_id)
    if run.current and run.start_outcome is RunStartOutcome.STOP and status is RunStatus.COMPLETED:
        raise _invalid("ended-session start cannot complete successfully", "status", run_id=run_id)
    field, prefix = "record", "terminal record: "
    if payload is None or record is None:
        record, payload = terminal_record(record)
    _check_owned_by(record, run, field, prefix)
    if (payload.status, payload.phase) != lifecycle.TERMINAL_COMPLETION[status]:
        raise _invalid("terminal record outcome does not match command", f"{field}.payload", record)
    if dict(payload.labels) != dict(run.labels):
        raise _invalid("terminal record labels do not match run", f"{field}.payload", record)
    if status is RunStatus.CANCELED:
        expected = run.cancellation_reason or lifecycle.REASON_ENGINE_CANCELED
        if payload.cancellation_reason != expected:
            raise _invalid(
                "terminal record cancellation reason does not match run",
                f"{field}.payload",
                record,
            )
    return status, record


# --- Stored proof of a closed start (§10.6) and of a continued child (§10.2) ---


def draft_of(record: RunRecord) -> RecordDraft:
    """A stored record as a draft, so that the rules for commands can check
    it; never written, so it names no namespace."""
    return RecordDraft(
        record.event_key,
        record.run_id,
        record.agent_id,
        record.session_id,
        record.turn_id,
        record.type,
        record.payload,
        record.timestamp,
        namespace="",
    )


def check_stored_run_start(record: RunRecord, run: RunState) -> None:
    """The stored ``run_started`` agrees with the stored run (V4 against its
    metadata; the predecessor is only in the payload, §3.5)."""
    try:
        predecessor = lifecycle.decode_run_started(record.payload).predecessor_run_id
    except lifecycle.PayloadError as exc:
        raise _invalid(f"decode run_started payload: {exc}", "started", run_id=run.run_id) from None
    start = RunStart(
        run.run_id,
        run.agent_id,
        run.session_id,
        run.parent_run_id,
        predecessor,
        run.started_at,
        run.labels,
    )
    check_started_record(draft_of(record), start)


def check_stored_child_link(record: RunRecord, parent: RunState, child: RunState) -> None:
    """The stored ``child_run_linked`` agrees with the stored parent and child (V6)."""
    if parent.run_id != child.parent_run_id:
        raise _invalid(
            "stored parent run does not match child parent id", "parent_linked", run_id=child.run_id
        )
    if parent.session_id != child.session_id:
        raise _invalid(
            "stored parent and child belong to different sessions",
            "parent_linked",
            run_id=child.run_id,
        )
    link = draft_of(record)
    check_parent_link(
        link,
        RunStart(child.run_id, child.agent_id, child.session_id, child.parent_run_id),
    )
    if link.agent_id != parent.agent_id:
        raise _invalid("parent agent does not match stored run", "parent_linked", link)


def check_stored_intent(record: RunRecord, run: RunState) -> None:
    """The stored intent of a current stopped start carries the run's reason."""
    _check_intent_record(draft_of(record), run, run.cancellation_reason, "cancellation")


def check_continuation_link(
    previous: RunRecord, link: RecordDraft, predecessor_run_id: str
) -> None:
    """§10.2 [N]: a child continuation keeps the predecessor's parent tool
    call, tool name, parent agent and session and child agent; the execution
    parent run may differ. ``previous`` is already validated."""
    before = lifecycle.decode_child_run_linked(previous.payload)
    now = lifecycle.decode_child_run_linked(link.payload)
    if (
        before.tool_call_id != now.tool_call_id
        or before.tool_name != now.tool_name
        or previous.agent_id != link.agent_id
        or previous.session_id != link.session_id
        or before.child_agent_id != now.child_agent_id
    ):
        raise ContinuationMismatchError(
            "child continuation does not match predecessor parent tool call",
            run_id=now.child_run_id,
            session_id=link.session_id,
            event_key=link.event_key,
            field="parent_linked.payload",
            details={"predecessor_run_id": predecessor_run_id},
        )


def check_session_command(session_id: str, at: Nanos | None, at_field: str) -> None:
    """§9.1.1 step 1 (CreateSession); EndSession checks only the time."""
    if at_field == "created_at" and not session_id:
        raise _invalid("session id is required", "session_id")
    if at is None:
        raise _invalid(f"{at_field} is required", at_field, session_id=session_id)


PURGE_BATCH_DEFAULT = 100
PURGE_BATCH_MAX = 1000


def check_purge_batch(before: Nanos | None, before_field: str, limit: int) -> int:
    """A retention call's cut-off is required; its batch is 1..1000 (0: 100)."""
    if before is None:
        raise _invalid(f"{before_field} is required", before_field)
    if not 0 <= limit <= PURGE_BATCH_MAX:
        raise _invalid(f"limit must be between 0 and {PURGE_BATCH_MAX}", "limit")
    return limit or PURGE_BATCH_DEFAULT


def check_time_range(nanos: Nanos, field: str) -> Nanos:
    """Every time must be one a google.protobuf.Timestamp can carry."""
    if not MIN_NANOS <= nanos <= MAX_NANOS:
        raise _invalid(f"{field} is out of range (0001-01-01 to 9999-12-31 UTC)", field)
    return nanos
