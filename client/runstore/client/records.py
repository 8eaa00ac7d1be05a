"""Builders for lifecycle records and start commands, so no worker hand-writes
lifecycle JSON (§5).

Payloads are the canonical bytes of ``runstore.contract.lifecycle`` (what a Go
worker writes), and timestamps default to "now" truncated to whole
milliseconds (V1). Record owners are taken from a ``RunStart`` or ``RunMeta``;
event keys default to stable names derived from the run, so a retried worker
step rebuilds the identical command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from runstore.client.model import (
    Checkpoint,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunRecord,
    RunStart,
    RunStatus,
    RunSuspension,
    RunTerminal,
)
from runstore.contract import lifecycle
from runstore.contract.lifecycle import RunFailure

__all__ = [
    "RunFailure",
    "cancellation_intent_record",
    "child_run_linked_record",
    "child_run_start",
    "ended_session_record",
    "json_payload",
    "now",
    "one_shot_child_run_start",
    "one_shot_run_start",
    "root_run_start",
    "run_cancellation",
    "run_completed_record",
    "run_started_record",
    "run_suspended_record",
    "run_suspension",
    "run_terminal",
]


class RunOwner(Protocol):
    """Anything that names a run's owner: a ``RunStart`` or a ``RunMeta``."""

    @property
    def run_id(self) -> str: ...

    @property
    def agent_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


def json_payload(value: Any) -> bytes:
    """``value`` as a record payload: compact JSON in UTF-8 (no spaces, non-ASCII
    as is). ``runstore records ... --json`` and ``runstore export`` show such a
    payload as JSON; other bytes (spaced JSON included) as ``payload_base64``,
    so that every line gives the exact bytes back (docs/export.md)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def now() -> datetime:
    """The current UTC time in whole milliseconds, as records require (V1)."""
    moment = datetime.now(UTC)
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def _record(
    owner: RunOwner, event_key: str, type_: str, payload: bytes, timestamp: datetime, turn_id: str
) -> RunRecord:
    return RunRecord(
        event_key=event_key,
        run_id=owner.run_id,
        agent_id=owner.agent_id,
        session_id=owner.session_id,
        turn_id=turn_id,
        type=type_,
        payload=payload,
        timestamp=timestamp,
    )


# --- Lifecycle records ----------------------------------------------------------


def run_started_record(
    run: RunStart, *, event_key: str = "run_started", turn_id: str = ""
) -> RunRecord:
    """The ``run_started`` record of a start (V4): stamped at ``started_at``."""
    payload = lifecycle.encode_run_started(
        lifecycle.RunStartedPayload(
            parent_run_id=run.parent_run_id,
            predecessor_run_id=run.predecessor_run_id,
            labels=dict(run.labels),
        )
    )
    return _record(run, event_key, lifecycle.RUN_STARTED, payload, run.started_at, turn_id)


def ended_session_record(
    run: RunStart, *, event_key: str = "run_canceled_session_ended", turn_id: str = ""
) -> RunRecord:
    """The canceled ``run_completed`` (reason ``session_ended``) every session
    start carries, stored only if the session has ended (V5, §10.1)."""
    return run_completed_record(
        run,
        RunStatus.CANCELED,
        cancellation_reason=lifecycle.REASON_SESSION_ENDED,
        event_key=event_key,
        timestamp=run.started_at,
        turn_id=turn_id,
    )


def session_ended_intent_record(
    run: RunStart, *, event_key: str = "run_cancellation_session_ended", turn_id: str = ""
) -> RunRecord:
    """The ``session_ended`` cancellation intent a current session start
    (one with a request digest) carries instead, stored only if the session
    has ended; the run then stays running (V5, §10.1)."""
    return cancellation_intent_record(
        run,
        lifecycle.REASON_SESSION_ENDED,
        event_key=event_key,
        timestamp=run.started_at,
        turn_id=turn_id,
    )


def child_run_linked_record(
    child: RunStart,
    *,
    parent_agent_id: str,
    tool_name: str,
    tool_call_id: str,
    event_key: str | None = None,
    timestamp: datetime | None = None,
    turn_id: str = "",
) -> RunRecord:
    """The ``child_run_linked`` record, owned by the parent run (V6)."""
    payload = lifecycle.encode_child_run_linked(
        lifecycle.ChildRunLinkedPayload(
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            child_run_id=child.run_id,
            child_agent_id=child.agent_id,
        )
    )
    return RunRecord(
        event_key=event_key or f"child_run_linked:{child.run_id}",
        run_id=child.parent_run_id,
        agent_id=parent_agent_id,
        session_id=child.session_id,
        turn_id=turn_id,
        type=lifecycle.CHILD_RUN_LINKED,
        payload=payload,
        timestamp=timestamp or child.started_at,
    )


def cancellation_intent_record(
    run: RunOwner,
    reason: str,
    *,
    event_key: str | None = None,
    timestamp: datetime | None = None,
    turn_id: str = "",
) -> RunRecord:
    """The ``runtime.cancellation_intent`` record of a cancellation request."""
    payload = lifecycle.encode_cancellation_intent(lifecycle.CancellationIntentPayload(reason))
    return _record(
        run,
        event_key or f"cancellation:{reason}",
        lifecycle.CANCELLATION_INTENT,
        payload,
        timestamp or now(),
        turn_id,
    )


def run_suspended_record(
    run: RunOwner,
    suspension_id: str,
    *,
    version: str = "",
    pending_count: int = 0,
    required_tools: Sequence[str] | None = None,
    event_key: str = "run_suspended",
    timestamp: datetime | None = None,
    turn_id: str = "",
) -> RunRecord:
    """The ``run_suspended`` record; ``suspension_id`` names the checkpoint."""
    payload = lifecycle.encode_run_suspended(
        lifecycle.RunSuspendedPayload(
            suspension_id=suspension_id,
            version=version,
            pending_count=pending_count,
            required_tools=tuple(required_tools) if required_tools is not None else None,
        )
    )
    return _record(run, event_key, lifecycle.RUN_SUSPENDED, payload, timestamp or now(), turn_id)


def run_completed_record(
    run: RunOwner,
    status: RunStatus,
    *,
    failure: RunFailure | None = None,
    cancellation_reason: str | None = None,
    event_key: str = "run_completed",
    timestamp: datetime | None = None,
    turn_id: str = "",
) -> RunRecord:
    """The ``run_completed`` record for a terminal ``status`` (§5.3).

    A canceled ending carries the run's stored cancellation reason, which the
    server checks (§10.1): given a ``RunMeta`` (``store.load_run``), its
    ``cancellation_reason`` is used; given a ``RunStart``, pass the reason the
    run's ``run_cancellation`` asked for as ``cancellation_reason``, or none
    when nobody asked (``engine_canceled``). A failed ending needs a
    ``RunFailure`` with a message and a kind.
    """
    if status not in lifecycle.TERMINAL_COMPLETION:
        raise ValueError(f"run_completed needs completed, failed or canceled, not {status}")
    completion, phase = lifecycle.TERMINAL_COMPLETION[status]
    if status is RunStatus.CANCELED and cancellation_reason is None:
        stored = run.cancellation_reason if isinstance(run, RunMeta) else ""
        cancellation_reason = stored or lifecycle.REASON_ENGINE_CANCELED
    payload = lifecycle.RunCompletedPayload(
        status=completion,
        phase=phase,
        failure=failure if status is RunStatus.FAILED else None,
        cancellation_reason=cancellation_reason if status is RunStatus.CANCELED else None,
        labels=dict(run.labels),
    )
    lifecycle.check_run_completion_invariants(payload)
    return _record(
        run,
        event_key,
        lifecycle.RUN_COMPLETED,
        lifecycle.encode_run_completed(payload),
        timestamp or now(),
        turn_id,
    )


# --- Commands -------------------------------------------------------------------


def root_run_start(run: RunStart, *, request_digest: bytes = b"") -> RootRunStart:
    """A root start with its ``run_started`` and ended-session records: the
    seed-era canceled completion, or with a 32-byte ``request_digest`` the
    current generation's intent (D1)."""
    if request_digest:
        return RootRunStart(
            run=run,
            started=run_started_record(run),
            request_digest=request_digest,
            cancellation=session_ended_intent_record(run),
        )
    return RootRunStart(
        run=run, started=run_started_record(run), canceled=ended_session_record(run)
    )


def child_run_start(
    run: RunStart,
    *,
    parent_agent_id: str,
    tool_name: str,
    tool_call_id: str,
    request_digest: bytes = b"",
) -> ChildRunStart:
    """A session child start: the link on the parent plus the child's records
    (the ended-session record as in ``root_run_start``)."""
    link = child_run_linked_record(
        run, parent_agent_id=parent_agent_id, tool_name=tool_name, tool_call_id=tool_call_id
    )
    if request_digest:
        return ChildRunStart(
            run=run,
            parent_linked=link,
            started=run_started_record(run),
            request_digest=request_digest,
            cancellation=session_ended_intent_record(run),
        )
    return ChildRunStart(
        run=run,
        parent_linked=link,
        started=run_started_record(run),
        canceled=ended_session_record(run),
    )


def one_shot_run_start(run: RunStart, *, request_digest: bytes = b"") -> OneShotRunStart:
    """A sessionless start with its ``run_started`` record."""
    return OneShotRunStart(run=run, started=run_started_record(run), request_digest=request_digest)


def one_shot_child_run_start(
    run: RunStart,
    *,
    parent_agent_id: str,
    tool_name: str,
    tool_call_id: str,
    request_digest: bytes = b"",
) -> OneShotChildRunStart:
    """A sessionless child start: the link on the parent and the child's
    ``run_started`` record."""
    return OneShotChildRunStart(
        run=run,
        parent_linked=child_run_linked_record(
            run, parent_agent_id=parent_agent_id, tool_name=tool_name, tool_call_id=tool_call_id
        ),
        started=run_started_record(run),
        request_digest=request_digest,
    )


def run_cancellation(
    run: RunOwner, reason: str, *, event_key: str | None = None, timestamp: datetime | None = None
) -> RunCancellation:
    """``record_run_cancellation``'s command: ``reason`` and its
    ``runtime.cancellation_intent`` record. The run's canceled ending later
    carries the same reason (``run_terminal``)."""
    return RunCancellation(
        run_id=run.run_id,
        reason=reason,
        record=cancellation_intent_record(run, reason, event_key=event_key, timestamp=timestamp),
    )


def run_suspension(
    run: RunOwner,
    checkpoint: Checkpoint,
    *,
    version: str = "",
    pending_count: int = 0,
    required_tools: Sequence[str] | None = None,
    event_key: str = "run_suspended",
    timestamp: datetime | None = None,
) -> RunSuspension:
    """``record_run_suspension``'s command: the checkpoint and its
    ``run_suspended`` record."""
    return RunSuspension(
        run_id=run.run_id,
        suspension=checkpoint,
        record=run_suspended_record(
            run,
            checkpoint.id,
            version=version,
            pending_count=pending_count,
            required_tools=required_tools,
            event_key=event_key,
            timestamp=timestamp,
        ),
    )


def run_terminal(
    run: RunOwner,
    status: RunStatus,
    *,
    failure: RunFailure | None = None,
    cancellation_reason: str | None = None,
    event_key: str = "run_completed",
    timestamp: datetime | None = None,
) -> RunTerminal:
    """``record_run_terminal``'s command: the run ends with ``status`` and its
    ``run_completed`` record (``run_completed_record``: a canceled ending takes
    a ``RunMeta``'s stored reason, or ``cancellation_reason``)."""
    return RunTerminal(
        run_id=run.run_id,
        status=status,
        record=run_completed_record(
            run,
            status,
            failure=failure,
            cancellation_reason=cancellation_reason,
            event_key=event_key,
            timestamp=timestamp,
        ),
    )
