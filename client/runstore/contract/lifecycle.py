"""Lifecycle record payloads: canonical encoding and strict decoding (§5, D2).

The store decodes lifecycle payloads only to check them and always stores the
original bytes. Decoding is strict (§5.1): exactly one JSON object, canonical
key spellings only, no duplicate keys, declared JSON types, valid UTF-8, and not
the literal ``null``. ``runtime.cancellation_intent`` is the one lenient
payload (§5.6).

Encoding reproduces Go's ``encoding/json`` output for the runtime's structs
(compact, struct field order, omit-empty, HTML-safe escapes), so payloads built
here are byte-identical to those a Go worker writes; exact-retry equality
compares bytes (§6.1).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from runstore.contract._gofmt import json_string, quote
from runstore.contract._json import Members, NumberText, decoder, json_kind
from runstore.contract.model import RunStatus

RUN_STARTED: Final = "run_started"
CHILD_RUN_LINKED: Final = "child_run_linked"
CANCELLATION_INTENT: Final = "runtime.cancellation_intent"
RUN_SUSPENDED: Final = "run_suspended"
RUN_COMPLETED: Final = "run_completed"

LIFECYCLE_TYPES: Final = frozenset(
    {RUN_STARTED, CHILD_RUN_LINKED, CANCELLATION_INTENT, RUN_SUSPENDED, RUN_COMPLETED}
)
"""Record types only lifecycle operations may write (§3.2, V2)."""

TRANSCRIPT_SEEDED: Final = "transcript_messages_seeded"
TRANSCRIPT_APPENDED: Final = "transcript_messages_appended"
TRANSCRIPT_TYPES: Final = frozenset({TRANSCRIPT_SEEDED, TRANSCRIPT_APPENDED})

# Completion statuses in the run_completed payload (§5.3).
COMPLETION_SUCCESS: Final = "success"
COMPLETION_FAILED: Final = "failed"
COMPLETION_CANCELED: Final = "canceled"

TERMINAL_COMPLETION: Final[Mapping[RunStatus, tuple[str, str]]] = {
    RunStatus.COMPLETED: (COMPLETION_SUCCESS, "completed"),
    RunStatus.FAILED: (COMPLETION_FAILED, "failed"),
    RunStatus.CANCELED: (COMPLETION_CANCELED, "canceled"),
}
"""A RecordRunTerminal status -> the (status, phase) its ``run_completed`` carries (§5.3)."""

# Cancellation reasons with fixed meanings (§10.1).
REASON_USER_REQUESTED: Final = "user_requested"
REASON_SESSION_ENDED: Final = "session_ended"
REASON_ENGINE_CANCELED: Final = "engine_canceled"


class PayloadError(ValueError):
    """A lifecycle payload is not acceptable; the message says why."""


# --- Payload values -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunStartedPayload:
    """``run_started`` (§5.2)."""

    parent_run_id: str = ""
    predecessor_run_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunFailure:
    """The ``failure`` object of a failed ``run_completed`` (§5.3)."""

    message: str = ""
    debug_message: str = ""
    provider: str = ""
    operation: str = ""
    kind: str = ""
    code: str = ""
    http_status: int = 0
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class RunCompletedPayload:
    """``run_completed`` (§5.3). ``cancellation_reason`` is None when absent."""

    status: str
    phase: str
    failure: RunFailure | None = None
    cancellation_reason: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunSuspendedPayload:
    """``run_suspended`` (§5.4); keys are Go field names."""

    suspension_id: str
    version: str = ""
    pending_count: int = 0
    required_tools: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChildRunLinkedPayload:
    """``child_run_linked`` (§5.5); written on the parent run."""

    tool_name: str
    tool_call_id: str
    child_run_id: str
    child_agent_id: str


@dataclass(frozen=True, slots=True)
class CancellationIntentPayload:
    """``runtime.cancellation_intent`` (§5.6)."""

    reason: str


# --- Go-compatible encoding ---------------------------------------------------


def _go_string(value: str) -> str:
    return json_string(value, go=True)


def _go_labels(labels: Mapping[str, str]) -> str:
    items = ",".join(f"{_go_string(key)}:{_go_string(labels[key])}" for key in sorted(labels))
    return "{" + items + "}"


def _go_object(members: list[tuple[str, str]]) -> bytes:
    body = ",".join(f"{_go_string(key)}:{value}" for key, value in members)
    return ("{" + body + "}").encode("utf-8", "surrogatepass")


def encode_run_started(payload: RunStartedPayload) -> bytes:
    """Canonical ``run_started`` bytes (omit-empty on every key)."""
    members: list[tuple[str, str]] = []
    if payload.parent_run_id:
        members.append(("parent_run_id", _go_string(payload.parent_run_id)))
    if payload.predecessor_run_id:
        members.append(("predecessor_run_id", _go_string(payload.predecessor_run_id)))
    if payload.labels:
        members.append(("labels", _go_labels(payload.labels)))
    return _go_object(members)


def _encode_failure(failure: RunFailure) -> str:
    members: list[tuple[str, str]] = []
    for key in ("message", "debug_message", "provider", "operation", "kind", "code"):
        value = getattr(failure, key)
        if value:
            members.append((key, _go_string(value)))
    if failure.http_status:
        members.append(("http_status", str(int(failure.http_status))))
    members.append(("retryable", "true" if failure.retryable else "false"))
    return _go_object(members).decode("utf-8", "surrogatepass")


def encode_run_completed(payload: RunCompletedPayload) -> bytes:
    """Canonical ``run_completed`` bytes."""
    members = [("status", _go_string(payload.status)), ("phase", _go_string(payload.phase))]
    if payload.failure is not None:
        members.append(("failure", _encode_failure(payload.failure)))
    if payload.cancellation_reason is not None:
        members.append(
            ("cancellation", "{" + f'"reason":{_go_string(payload.cancellation_reason)}' + "}")
        )
    if payload.labels:
        members.append(("labels", _go_labels(payload.labels)))
    return _go_object(members)


def encode_run_suspended(payload: RunSuspendedPayload) -> bytes:
    """Canonical ``run_suspended`` bytes (every key always written)."""
    tools = (
        "null"
        if payload.required_tools is None
        else "[" + ",".join(_go_string(tool) for tool in payload.required_tools) + "]"
    )
    return _go_object(
        [
            ("SuspensionID", _go_string(payload.suspension_id)),
            ("Version", _go_string(payload.version)),
            ("PendingCount", str(int(payload.pending_count))),
            ("RequiredTools", tools),
        ]
    )


def encode_child_run_linked(payload: ChildRunLinkedPayload) -> bytes:
    """Canonical ``child_run_linked`` bytes."""
    return _go_object(
        [
            ("ToolName", _go_string(payload.tool_name)),
            ("ToolCallID", _go_string(payload.tool_call_id)),
            ("ChildRunID", _go_string(payload.child_run_id)),
            ("ChildAgentID", _go_string(payload.child_agent_id)),
        ]
    )


def encode_cancellation_intent(payload: CancellationIntentPayload) -> bytes:
    """Canonical ``runtime.cancellation_intent`` bytes."""
    return _go_object([("reason", _go_string(payload.reason))])


# --- Strict decoding (§5.1) ---------------------------------------------------


class _Float(NumberText):
    """A JSON number with a fraction or exponent, kept as text so that integer
    fields can reject it (Go cannot decode ``1.0`` into an int)."""


class _Int(NumberText):
    """A JSON integer kept as text: only integer fields convert it, so a huge
    literal anywhere else costs nothing and cannot trip Python's int limits."""


def _duplicate_field(key: str) -> PayloadError:
    return PayloadError(f"json: duplicate field {quote(key)}")


def _not_a_value(name: str) -> PayloadError:
    return PayloadError(f"invalid character {name[0]!r} looking for beginning of value")


_WHITESPACE = " \t\n\r"

_STRICT_DECODER = decoder(
    parse_int=_Int, parse_float=_Float, duplicate_key=_duplicate_field, constant=_not_a_value
)
_LENIENT_DECODER = decoder(
    parse_int=_Int, parse_float=_Float, duplicate_key=None, constant=_not_a_value
)


def _decode_one_value(payload: bytes, decoder: json.JSONDecoder) -> Any:
    """Exactly one JSON value followed only by whitespace (§5.1 rule 1, V8)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("record payload contains invalid UTF-8") from None
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = decoder.raw_decode(text, start)
    except PayloadError:
        raise
    except json.JSONDecodeError as exc:
        raise PayloadError(f"json: {exc.msg} at offset {exc.pos}") from None
    except RecursionError:
        raise PayloadError("json: exceeded max depth") from None
    rest = text[end:].lstrip(_WHITESPACE)
    if rest:
        try:  # is the rest another JSON value (whatever its keys), or garbage?
            _LENIENT_DECODER.raw_decode(rest)
        except (json.JSONDecodeError, PayloadError, RecursionError):
            raise PayloadError(
                f"invalid character {rest[0]!r} looking for beginning of value"
            ) from None
        raise PayloadError("multiple JSON values")
    return value


def _strict_object(payload: bytes) -> dict[str, Any]:
    value = _decode_one_value(payload, _STRICT_DECODER)
    if value is None:
        raise PayloadError("record payload must not be null")
    if not isinstance(value, dict):
        raise PayloadError(f"record payload must be a JSON object, not {json_kind(value)}")
    return value


_Reader = Callable[[Any, str], Any]


def _type_error(value: Any, where: str, wanted: str) -> str:
    return f"json: cannot unmarshal {json_kind(value)} into field {where} of type {wanted}"


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, NumberText)


def _string(value: Any, where: str) -> str:
    if value is None:
        return ""
    if _is_text(value):
        return str(value)
    raise PayloadError(_type_error(value, where, "string"))


def _integer(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, _Int):
        number = int(value) if len(value) <= 20 else None
        if number is not None and -(2**63) <= number < 2**63:
            return number
        raise PayloadError(
            f"json: cannot unmarshal number {value[:24]} into field {where} of type int64"
        )
    raise PayloadError(_type_error(value, where, "integer"))


def _boolean(value: Any, where: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise PayloadError(_type_error(value, where, "boolean"))


def _labels(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(_type_error(value, where, "object"))
    labels: dict[str, str] = {}
    for key, item in value.items():
        if not _is_text(item):
            raise PayloadError(_type_error(item, f'{where}["{key}"]', "string"))
        labels[key] = item
    return labels


def _string_list(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise PayloadError(_type_error(value, where, "array"))
    return tuple(_string(item, f"{where}[{index}]") for index, item in enumerate(value))


def _fields(obj: dict[str, Any], shape: Mapping[str, _Reader], where: str) -> dict[str, Any]:
    """Reads ``obj`` against ``shape``: unknown keys are rejected (§5.1 rule 2)."""
    for key in obj:
        if key not in shape:
            raise PayloadError(f"json: unknown field {quote(key)}")
    return {key: read(obj.get(key), f'"{where}{key}"') for key, read in shape.items()}


def _nested(shape: Mapping[str, _Reader], prefix: str) -> _Reader:
    def read(value: Any, where: str) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise PayloadError(_type_error(value, where, "object"))
        return _fields(value, shape, prefix)

    return read


_RUN_STARTED_SHAPE: Mapping[str, _Reader] = {
    "parent_run_id": _string,
    "predecessor_run_id": _string,
    "labels": _labels,
}
_FAILURE_SHAPE: Mapping[str, _Reader] = {
    "message": _string,
    "debug_message": _string,
    "provider": _string,
    "operation": _string,
    "kind": _string,
    "code": _string,
    "http_status": _integer,
    "retryable": _boolean,
}
_CANCELLATION_SHAPE: Mapping[str, _Reader] = {"reason": _string}
_RUN_COMPLETED_SHAPE: Mapping[str, _Reader] = {
    "status": _string,
    "phase": _string,
    "failure": _nested(_FAILURE_SHAPE, "failure."),
    "cancellation": _nested(_CANCELLATION_SHAPE, "cancellation."),
    "labels": _labels,
}
_RUN_SUSPENDED_SHAPE: Mapping[str, _Reader] = {
    "SuspensionID": _string,
    "Version": _string,
    "PendingCount": _integer,
    "RequiredTools": _string_list,
}
_CHILD_RUN_LINKED_SHAPE: Mapping[str, _Reader] = {
    "ToolName": _string,
    "ToolCallID": _string,
    "ChildRunID": _string,
    "ChildAgentID": _string,
}


def decode_run_started(payload: bytes) -> RunStartedPayload:
    """Strictly decodes ``run_started`` (§5.2)."""
    values = _fields(_strict_object(payload), _RUN_STARTED_SHAPE, "")
    return RunStartedPayload(**values)


def decode_run_completed(payload: bytes) -> RunCompletedPayload:
    """Strictly decodes ``run_completed`` and enforces its invariants (§5.3)."""
    values = _fields(_strict_object(payload), _RUN_COMPLETED_SHAPE, "")
    failure = RunFailure(**values["failure"]) if values["failure"] is not None else None
    cancellation = values["cancellation"]
    completed = RunCompletedPayload(
        status=values["status"],
        phase=values["phase"],
        failure=failure,
        cancellation_reason=cancellation["reason"] if cancellation is not None else None,
        labels=values["labels"],
    )
    check_run_completion_invariants(completed)
    return completed


def check_run_completion_invariants(payload: RunCompletedPayload) -> None:
    """Which outcome objects each status requires or forbids (§5.3)."""
    has_failure = payload.failure is not None
    has_cancellation = payload.cancellation_reason is not None
    if payload.status == COMPLETION_SUCCESS:
        if has_failure or has_cancellation:
            raise PayloadError("successful run completion must not carry terminal outcome payload")
    elif payload.status == COMPLETION_FAILED:
        if has_cancellation:
            raise PayloadError("failed run completion must not carry cancellation payload")
        if payload.failure is None:
            raise PayloadError("failed run completion requires failure payload")
        if not payload.failure.message:
            raise PayloadError("failed run completion requires failure message")
        if not payload.failure.kind:
            raise PayloadError("failed run completion requires failure kind")
    elif payload.status == COMPLETION_CANCELED:
        if has_failure:
            raise PayloadError("canceled run completion must not carry failure payload")
        if not has_cancellation:
            raise PayloadError("canceled run completion requires cancellation payload")
        if not payload.cancellation_reason:
            raise PayloadError("canceled run completion requires cancellation reason")
    else:
        raise PayloadError(f"unexpected run completion status {quote(payload.status)}")


def decode_run_suspended(payload: bytes) -> RunSuspendedPayload:
    """Strictly decodes ``run_suspended`` (§5.4)."""
    values = _fields(_strict_object(payload), _RUN_SUSPENDED_SHAPE, "")
    return RunSuspendedPayload(
        suspension_id=values["SuspensionID"],
        version=values["Version"],
        pending_count=values["PendingCount"],
        required_tools=values["RequiredTools"],
    )


def decode_child_run_linked(payload: bytes) -> ChildRunLinkedPayload:
    """Strictly decodes ``child_run_linked`` (§5.5)."""
    values = _fields(_strict_object(payload), _CHILD_RUN_LINKED_SHAPE, "")
    return ChildRunLinkedPayload(
        tool_name=values["ToolName"],
        tool_call_id=values["ToolCallID"],
        child_run_id=values["ChildRunID"],
        child_agent_id=values["ChildAgentID"],
    )


def decode_cancellation_intent(payload: bytes) -> CancellationIntentPayload:
    """Leniently decodes ``runtime.cancellation_intent`` (§5.6).

    Like Go's decoder: one JSON value (trailing data rejected), unknown keys
    ignored, keys matched case-insensitively, a repeated key overwrites.
    """
    value = _decode_one_value(payload, _LENIENT_DECODER)
    if value is None:
        return CancellationIntentPayload(reason="")
    if not isinstance(value, Members):
        raise PayloadError(f"record payload must be a JSON object, not {json_kind(value)}")
    reason = ""
    for key, item in value:
        if key.casefold() == "reason":
            reason = _string(item, '"reason"')
    return CancellationIntentPayload(reason=reason)
