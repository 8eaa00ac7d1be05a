"""Lifecycle payload codecs: strict decoding, lenient cancellation, Go-compatible encoding.

§5.1–§5.6 and D2: the four hook payloads are decoded strictly with canonical key
spellings (duplicate keys, non-canonical case, top-level null and invalid UTF-8
rejected); ``runtime.cancellation_intent`` is lenient except for trailing values.
Encoders must produce the bytes Go's ``encoding/json`` writes, because exact
retries compare payload bytes (§6.1).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runstore.contract import lifecycle
from runstore.contract.lifecycle import (
    CancellationIntentPayload,
    ChildRunLinkedPayload,
    PayloadError,
    RunCompletedPayload,
    RunFailure,
    RunStartedPayload,
    RunSuspendedPayload,
)

Decoder = Callable[[bytes], Any]

# A valid payload of each strictly decoded type, written the way Go writes it.
STRICT: dict[str, tuple[Decoder, bytes]] = {
    "run_started": (lifecycle.decode_run_started, b'{"parent_run_id":"p"}'),
    "run_completed": (lifecycle.decode_run_completed, b'{"status":"success","phase":"completed"}'),
    "run_suspended": (
        lifecycle.decode_run_suspended,
        b'{"SuspensionID":"s","Version":"v","PendingCount":1,"RequiredTools":null}',
    ),
    "child_run_linked": (
        lifecycle.decode_child_run_linked,
        b'{"ToolName":"t","ToolCallID":"c","ChildRunID":"r","ChildAgentID":"a"}',
    ),
}
STRICT_TYPES = sorted(STRICT)


def decode_error(decoder: Decoder, payload: bytes) -> str:
    with pytest.raises(PayloadError) as info:
        decoder(payload)
    return str(info.value)


def with_member(payload: bytes, member: bytes) -> bytes:
    """Adds ``member`` (``"k":v``) as the last member of a non-empty object."""
    assert payload.endswith(b"}")
    return payload[:-1] + b"," + member + b"}"


# --- Strict decoding: shape of the document (§5.1 rule 1, V8) ---------------------------


@pytest.mark.parametrize("kind", STRICT_TYPES)
def test_strict_decoder_accepts_one_object_with_surrounding_whitespace(kind: str) -> None:
    decoder, payload = STRICT[kind]
    assert decoder(b" \t\r\n" + payload + b"\n\t \r") == decoder(payload)


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize("trailer", [b"{}", b" 1", b'\n"x"', b"[]", b"null", b" true"])
def test_strict_decoder_rejects_a_second_json_value(kind: str, trailer: bytes) -> None:
    """§5.1 rule 1: 'multiple JSON values'."""
    decoder, payload = STRICT[kind]
    assert decode_error(decoder, payload + trailer) == "multiple JSON values"


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize(("trailer", "char"), [(b"x", "x"), (b" }", "}"), (b"]", "]"), (b",", ",")])
def test_strict_decoder_rejects_trailing_garbage_as_syntax_error(
    kind: str, trailer: bytes, char: str
) -> None:
    """§5.1 rule 1 / upstream §3.12: Go's syntax error text."""
    decoder, payload = STRICT[kind]
    assert decode_error(decoder, payload + trailer) == (
        f"invalid character '{char}' looking for beginning of value"
    )


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize("payload", [b"null", b" null\n"])
def test_strict_decoder_rejects_top_level_null(kind: str, payload: bytes) -> None:
    """V8 / D2: 'record payload must not be null'."""
    decoder, _ = STRICT[kind]
    assert decode_error(decoder, payload) == "record payload must not be null"


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize("payload", [b"[]", b'"x"', b"1", b"true", b"1.5"])
def test_strict_decoder_rejects_non_object_documents(kind: str, payload: bytes) -> None:
    """§5.1 rule 1: exactly one JSON object."""
    decoder, _ = STRICT[kind]
    decode_error(decoder, payload)


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize("payload", [b"", b" ", b"\n\t", b"{", b'{"a":', b'{"a"}'])
def test_strict_decoder_rejects_empty_or_truncated_documents(kind: str, payload: bytes) -> None:
    decoder, _ = STRICT[kind]
    decode_error(decoder, payload)


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\x80"],
    ids=["ff", "overlong", "surrogate", "truncated", "continuation"],
)
def test_strict_decoder_rejects_invalid_utf8(kind: str, bad: bytes) -> None:
    """V8 / D2: 'record payload contains invalid UTF-8', also inside free-form values."""
    decoder, payload = STRICT[kind]
    broken = with_member(payload, b'"x":"' + bad + b'"')
    assert decode_error(decoder, broken) == "record payload contains invalid UTF-8"


@pytest.mark.parametrize("kind", STRICT_TYPES)
def test_strict_decoder_rejects_unknown_top_level_key(kind: str) -> None:
    """§5.1 rule 2."""
    decoder, payload = STRICT[kind]
    assert decode_error(decoder, with_member(payload, b'"k":1')) == 'json: unknown field "k"'


@pytest.mark.parametrize("kind", STRICT_TYPES)
def test_strict_decoder_rejects_duplicate_keys(kind: str) -> None:
    """D2 / Q7: Go would keep the last value; runstore rejects the payload."""
    decoder, payload = STRICT[kind]
    first_member = payload[1 : payload.index(b",") if b"," in payload else -1]
    decode_error(decoder, with_member(payload, first_member))


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_strict_decoder_rejects_non_json_number_constants(kind: str, constant: bytes) -> None:
    """Only RFC 8259 JSON: NaN and Infinity are not numbers."""
    decoder, payload = STRICT[kind]
    decode_error(decoder, with_member(payload, b'"k":' + constant))


# --- run_started (§5.2) -----------------------------------------------------------------


def test_run_started_decodes_every_key() -> None:
    payload = b'{"parent_run_id":"p","predecessor_run_id":"q","labels":{"a":"1","":"empty"}}'
    assert lifecycle.decode_run_started(payload) == RunStartedPayload(
        parent_run_id="p", predecessor_run_id="q", labels={"a": "1", "": "empty"}
    )


def test_run_started_empty_object_is_a_label_less_root() -> None:
    assert lifecycle.decode_run_started(b"{}") == RunStartedPayload()


def test_run_started_null_fields_are_absent() -> None:
    """§5.1 rule 3."""
    payload = b'{"parent_run_id":null,"predecessor_run_id":null,"labels":null}'
    assert lifecycle.decode_run_started(payload) == RunStartedPayload()


@pytest.mark.parametrize(
    "key",
    ["Labels", "ParentRunID", "Parent_Run_ID", "PARENT_RUN_ID", "labels ", "predecessorRunID"],
)
def test_run_started_keys_are_case_sensitive(key: str) -> None:
    """D2 / Q6, Q7: canonical spellings only."""
    payload = b'{"' + key.encode() + b'":{}}'
    assert decode_error(lifecycle.decode_run_started, payload) == f'json: unknown field "{key}"'


@pytest.mark.parametrize(
    "payload",
    [
        b'{"parent_run_id":1}',
        b'{"parent_run_id":true}',
        b'{"parent_run_id":["p"]}',
        b'{"parent_run_id":{}}',
        b'{"predecessor_run_id":1.5}',
        b'{"labels":[]}',
        b'{"labels":"a=1"}',
        b'{"labels":{"a":1}}',
        b'{"labels":{"a":true}}',
        b'{"labels":{"a":{"b":"c"}}}',
        b'{"labels":{"a":1.0}}',
    ],
)
def test_run_started_rejects_wrong_value_types(payload: bytes) -> None:
    """§5.1 rule 3; Go's type error prefix."""
    assert decode_error(lifecycle.decode_run_started, payload).startswith("json: cannot unmarshal")


def test_run_started_labels_are_a_free_map() -> None:
    """§5.1 rule 2: free maps accept any keys, including field-like names."""
    payload = b'{"labels":{"labels":"x","parent_run_id":"y","k":"z"}}'
    assert dict(lifecycle.decode_run_started(payload).labels) == {
        "labels": "x",
        "parent_run_id": "y",
        "k": "z",
    }


def test_run_started_duplicate_label_keys_are_rejected() -> None:
    decode_error(lifecycle.decode_run_started, b'{"labels":{"a":"1","a":"1"}}')


def test_run_started_duplicate_top_level_keys_are_rejected_even_when_equal() -> None:
    decode_error(lifecycle.decode_run_started, b'{"parent_run_id":"p","parent_run_id":"p"}')


def test_run_started_decodes_json_escapes() -> None:
    payload = b'{"labels":{"\\u003c":"\\u0026\\n\\u00e9\\ud83d\\ude00"}}'
    assert dict(lifecycle.decode_run_started(payload).labels) == {"<": "&\né😀"}


# --- run_completed (§5.3) -------------------------------------------------------------------


FAILURE_JSON = b'{"message":"m","kind":"k","retryable":false}'


def test_run_completed_decodes_a_full_failure() -> None:
    payload = (
        b'{"status":"failed","phase":"failed","failure":{"message":"m","debug_message":"d",'
        b'"provider":"p","operation":"o","kind":"k","code":"c","http_status":503,'
        b'"retryable":true},"labels":{"a":"1"}}'
    )
    assert lifecycle.decode_run_completed(payload) == RunCompletedPayload(
        status="failed",
        phase="failed",
        failure=RunFailure("m", "d", "p", "o", "k", "c", 503, True),
        labels={"a": "1"},
    )


def test_run_completed_decodes_a_cancellation() -> None:
    payload = b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"user_requested"}}'
    decoded = lifecycle.decode_run_completed(payload)
    assert (decoded.cancellation_reason, decoded.failure) == ("user_requested", None)


def test_run_completed_null_outcome_objects_are_absent() -> None:
    """§5.1 rule 3: null failure/cancellation/labels mean absent, so success is valid."""
    payload = (
        b'{"status":"success","phase":"completed","failure":null,"cancellation":null,"labels":null}'
    )
    assert lifecycle.decode_run_completed(payload) == RunCompletedPayload("success", "completed")


def test_run_completed_null_failure_fields_are_zero_values() -> None:
    payload = (
        b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k",'
        b'"debug_message":null,"http_status":null,"retryable":null}}'
    )
    assert lifecycle.decode_run_completed(payload).failure == RunFailure(message="m", kind="k")


def test_run_completed_phase_is_not_checked_by_the_codec() -> None:
    """§3.12: lifecycle validation, not the codec, checks the phase."""
    decoded = lifecycle.decode_run_completed(b'{"status":"success","phase":"planning"}')
    assert decoded.phase == "planning"


@pytest.mark.parametrize(
    "payload",
    [
        b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","retryable":false,"k":1}}',
        b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"r","k":1}}',
        b'{"status":"success","phase":"completed","k":1}',
    ],
)
def test_run_completed_rejects_unknown_keys_at_every_fixed_level(payload: bytes) -> None:
    """§5.1 rule 2: recursive for failure and cancellation."""
    assert decode_error(lifecycle.decode_run_completed, payload) == 'json: unknown field "k"'


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        (b'{"Status":"success","phase":"completed"}', "Status"),
        (b'{"status":"canceled","phase":"canceled","cancellation":{"Reason":"r"}}', "Reason"),
        (
            b'{"status":"failed","phase":"failed","failure":{"Message":"m","kind":"k"}}',
            "Message",
        ),
        (
            b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","HTTPStatus":1}}',
            "HTTPStatus",
        ),
    ],
)
def test_run_completed_keys_are_case_sensitive_at_every_level(payload: bytes, key: str) -> None:
    assert decode_error(lifecycle.decode_run_completed, payload) == f'json: unknown field "{key}"'


@pytest.mark.parametrize(
    "payload",
    [
        b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","kind":"k"}}',
        b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"r","reason":"r"}}',
        b'{"status":"success","status":"success","phase":"completed"}',
    ],
)
def test_run_completed_rejects_duplicate_keys_at_every_level(payload: bytes) -> None:
    decode_error(lifecycle.decode_run_completed, payload)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (b"1.0", "number"),
        (b"1e3", "number"),
        (b"5.03e2", "number"),
        (b"-0.0", "number"),
        (b'"503"', "string"),
        (b"true", "bool"),
        (b"[503]", "array"),
        (b"{}", "object"),
    ],
)
def test_run_completed_http_status_must_be_an_integer(value: bytes, kind: str) -> None:
    """Go cannot decode 1.0 or 1e3 into an int; match the type error's prefix only."""
    payload = (
        b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","http_status":'
        + value
        + b"}}"
    )
    message = decode_error(lifecycle.decode_run_completed, payload)
    assert message.startswith(f"json: cannot unmarshal {kind}")


@pytest.mark.parametrize("value", [b'"true"', b"1", b"0", b"[]"])
def test_run_completed_retryable_must_be_a_boolean(value: bytes) -> None:
    payload = (
        b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","retryable":'
        + value
        + b"}}"
    )
    assert decode_error(lifecycle.decode_run_completed, payload).startswith(
        "json: cannot unmarshal"
    )


@pytest.mark.parametrize(
    "payload",
    [
        b'{"status":1,"phase":"completed"}',
        b'{"status":"success","phase":false}',
        b'{"status":"failed","phase":"failed","failure":"boom"}',
        b'{"status":"failed","phase":"failed","failure":[]}',
        b'{"status":"canceled","phase":"canceled","cancellation":"user_requested"}',
        b'{"status":"canceled","phase":"canceled","cancellation":{"reason":1}}',
        b'{"status":"success","phase":"completed","labels":["a"]}',
    ],
)
def test_run_completed_rejects_wrong_value_types(payload: bytes) -> None:
    assert decode_error(lifecycle.decode_run_completed, payload).startswith(
        "json: cannot unmarshal"
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            b'{"status":"success","phase":"completed","failure":{}}',
            "successful run completion must not carry terminal outcome payload",
        ),
        (
            b'{"status":"success","phase":"completed","cancellation":{"reason":"x"}}',
            "successful run completion must not carry terminal outcome payload",
        ),
        (
            b'{"status":"failed","phase":"failed","cancellation":{"reason":"x"}}',
            "failed run completion must not carry cancellation payload",
        ),
        (
            b'{"status":"failed","phase":"failed","failure":'
            + FAILURE_JSON
            + b',"cancellation":{}}',
            "failed run completion must not carry cancellation payload",
        ),
        (b'{"status":"failed","phase":"failed"}', "failed run completion requires failure payload"),
        (
            b'{"status":"failed","phase":"failed","failure":{"kind":"k"}}',
            "failed run completion requires failure message",
        ),
        (
            b'{"status":"failed","phase":"failed","failure":{}}',
            "failed run completion requires failure message",
        ),
        (
            b'{"status":"failed","phase":"failed","failure":{"message":"m"}}',
            "failed run completion requires failure kind",
        ),
        (
            b'{"status":"canceled","phase":"canceled","failure":' + FAILURE_JSON + b"}",
            "canceled run completion must not carry failure payload",
        ),
        (
            b'{"status":"canceled","phase":"canceled","failure":{},"cancellation":{"reason":"x"}}',
            "canceled run completion must not carry failure payload",
        ),
        (
            b'{"status":"canceled","phase":"canceled"}',
            "canceled run completion requires cancellation payload",
        ),
        (
            b'{"status":"canceled","phase":"canceled","cancellation":{}}',
            "canceled run completion requires cancellation reason",
        ),
        (
            b'{"status":"canceled","phase":"canceled","cancellation":{"reason":null}}',
            "canceled run completion requires cancellation reason",
        ),
        (
            b'{"status":"completed","phase":"completed"}',
            'unexpected run completion status "completed"',
        ),
        (b'{"status":"Success","phase":"completed"}', 'unexpected run completion status "Success"'),
        (b'{"phase":"completed"}', 'unexpected run completion status ""'),
        (b'{"status":null,"phase":"completed"}', 'unexpected run completion status ""'),
        (b"{}", 'unexpected run completion status ""'),
    ],
)
def test_run_completed_invariants_use_the_upstream_texts(payload: bytes, message: str) -> None:
    """§5.3 / upstream §3.12, checked in the documented order."""
    assert decode_error(lifecycle.decode_run_completed, payload) == message


# --- run_suspended (§5.4) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tools_json", "tools"),
    [(b"null", None), (b"[]", ()), (b'["a","b"]', ("a", "b")), (b"[null]", ("",))],
)
def test_run_suspended_required_tools_null_empty_and_values(
    tools_json: bytes, tools: tuple[str, ...] | None
) -> None:
    payload = (
        b'{"SuspensionID":"s","Version":"v6","PendingCount":2,"RequiredTools":' + tools_json + b"}"
    )
    assert lifecycle.decode_run_suspended(payload) == RunSuspendedPayload("s", "v6", 2, tools)


def test_run_suspended_missing_keys_are_zero_values() -> None:
    assert lifecycle.decode_run_suspended(b"{}") == RunSuspendedPayload("", "", 0, None)


@pytest.mark.parametrize("key", ["suspensionID", "suspension_id", "Suspensionid", "pendingCount"])
def test_run_suspended_keys_are_case_sensitive(key: str) -> None:
    payload = b'{"' + key.encode() + b'":"s"}'
    assert decode_error(lifecycle.decode_run_suspended, payload) == f'json: unknown field "{key}"'


@pytest.mark.parametrize("value", [b"1.0", b"1e3", b"2.5", b'"1"', b"true", b"[1]", b"{}"])
def test_run_suspended_pending_count_must_be_an_integer(value: bytes) -> None:
    decode_error(
        lifecycle.decode_run_suspended, b'{"SuspensionID":"s","PendingCount":' + value + b"}"
    )


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), 0, -1])
def test_run_suspended_pending_count_accepts_int64(value: int) -> None:
    payload = b'{"PendingCount":' + str(value).encode() + b"}"
    assert lifecycle.decode_run_suspended(payload).pending_count == value


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_run_suspended_pending_count_overflow_is_rejected(value: int) -> None:
    decode_error(lifecycle.decode_run_suspended, b'{"PendingCount":' + str(value).encode() + b"}")


@pytest.mark.parametrize("value", [b'"a"', b"[1]", b'[["a"]]', b"{}", b"true"])
def test_run_suspended_required_tools_must_be_a_string_list(value: bytes) -> None:
    decode_error(lifecycle.decode_run_suspended, b'{"RequiredTools":' + value + b"}")


# --- child_run_linked (§5.5) ----------------------------------------------------------------


def test_child_run_linked_decodes_go_field_names() -> None:
    payload = b'{"ToolName":"t","ToolCallID":"c","ChildRunID":"r","ChildAgentID":"a"}'
    assert lifecycle.decode_child_run_linked(payload) == ChildRunLinkedPayload("t", "c", "r", "a")


@pytest.mark.parametrize("key", ["toolName", "tool_name", "ToolCallId", "childRunID"])
def test_child_run_linked_keys_are_case_sensitive(key: str) -> None:
    payload = b'{"' + key.encode() + b'":"x"}'
    assert (
        decode_error(lifecycle.decode_child_run_linked, payload) == f'json: unknown field "{key}"'
    )


@pytest.mark.parametrize(
    "payload", [b'{"ToolName":1}', b'{"ChildRunID":["r"]}', b'{"ChildAgentID":false}']
)
def test_child_run_linked_rejects_wrong_value_types(payload: bytes) -> None:
    assert decode_error(lifecycle.decode_child_run_linked, payload).startswith(
        "json: cannot unmarshal"
    )


# --- runtime.cancellation_intent: lenient (§5.6) ------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"reason":"user_requested"}', "user_requested"),
        (b' {"reason":"user_requested"}\n', "user_requested"),
        (b'{"reason":"x","extra":1,"nested":{"a":[1,{"b":null}],"a":2}}', "x"),
        (b'{"Reason":"x"}', "x"),
        (b'{"REASON":"x"}', "x"),
        (b'{"reason":"a","reason":"b"}', "b"),
        (b'{"reason":"a","Reason":"b"}', "b"),
        (b'{"Reason":"a","reason":"b"}', "b"),
        (b'{"reason":"a","reason":null}', ""),
        (b'{"reason":null}', ""),
        (b"{}", ""),
        (b"null", ""),
        (b'{"reasons":"x"}', ""),
    ],
)
def test_cancellation_intent_is_decoded_leniently(payload: bytes, reason: str) -> None:
    """§5.6: unknown keys ignored, key case ignored, last duplicate wins, null = empty."""
    assert lifecycle.decode_cancellation_intent(payload) == CancellationIntentPayload(reason)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"reason":"x"} {}', "multiple JSON values"),
        (b'{"reason":"x"}{"reason":"y"}', "multiple JSON values"),
        (b'{"reason":"x"} 1', "multiple JSON values"),
        (b'{"reason":"x"}x', "invalid character 'x' looking for beginning of value"),
    ],
)
def test_cancellation_intent_rejects_trailing_values(payload: bytes, message: str) -> None:
    """§5.6: one JSON value; trailing data rejected."""
    assert decode_error(lifecycle.decode_cancellation_intent, payload) == message


@pytest.mark.parametrize(
    "payload",
    [
        b"[]",
        b'["reason"]',
        b'"user_requested"',
        b"1",
        b"true",
        b"",
        b"{",
        b'{"reason":1}',
        b'{"n":NaN}',
    ],
)
def test_cancellation_intent_rejects_non_objects_and_bad_json(payload: bytes) -> None:
    decode_error(lifecycle.decode_cancellation_intent, payload)


# --- Go-compatible encoding -----------------------------------------------------------------------


def test_run_started_encoding_is_compact_ordered_and_omits_empty() -> None:
    assert lifecycle.encode_run_started(RunStartedPayload()) == b"{}"
    assert lifecycle.encode_run_started(RunStartedPayload(labels={})) == b"{}"
    assert lifecycle.encode_run_started(RunStartedPayload(predecessor_run_id="q")) == (
        b'{"predecessor_run_id":"q"}'
    )
    full = RunStartedPayload(parent_run_id="p", predecessor_run_id="q", labels={"b": "2", "a": "1"})
    assert lifecycle.encode_run_started(full) == (
        b'{"parent_run_id":"p","predecessor_run_id":"q","labels":{"a":"1","b":"2"}}'
    )


def test_labels_are_sorted_by_key_bytes() -> None:
    """Go sorts map keys bytewise (UTF-8 byte order == code point order)."""
    labels = {"é": "4", "b": "2", "a": "1", "B": "3", "": "0", "aa": "5", "😀": "6", "ｚ": "7"}
    encoded = lifecycle.encode_run_started(RunStartedPayload(labels=labels))
    expected = '{"labels":{"":"0","B":"3","a":"1","aa":"5","b":"2","é":"4","ｚ":"7","😀":"6"}}'
    assert encoded == expected.encode()


def test_run_completed_success_encoding() -> None:
    payload = RunCompletedPayload("success", "completed", labels={"site": "one"})
    assert lifecycle.encode_run_completed(payload) == (
        b'{"status":"success","phase":"completed","labels":{"site":"one"}}'
    )


def test_run_completed_failure_encoding_writes_every_field_in_struct_order() -> None:
    failure = RunFailure("m", "d", "p", "o", "k", "c", 503, True)
    payload = RunCompletedPayload("failed", "failed", failure=failure, labels={"a": "1"})
    assert lifecycle.encode_run_completed(payload) == (
        b'{"status":"failed","phase":"failed","failure":{"message":"m","debug_message":"d",'
        b'"provider":"p","operation":"o","kind":"k","code":"c","http_status":503,'
        b'"retryable":true},"labels":{"a":"1"}}'
    )


def test_failure_encoding_omits_empty_fields_and_always_writes_retryable() -> None:
    """§5.3: omitempty everywhere except retryable; http_status omitted when 0."""
    payload = RunCompletedPayload("failed", "failed", failure=RunFailure(message="m", kind="k"))
    assert lifecycle.encode_run_completed(payload) == (
        b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","retryable":false}}'
    )
    assert (
        lifecycle.encode_run_completed(
            RunCompletedPayload("failed", "failed", failure=RunFailure())
        )
        == b'{"status":"failed","phase":"failed","failure":{"retryable":false}}'
    )
    negative = RunCompletedPayload("failed", "failed", failure=RunFailure(http_status=-1))
    assert b'"http_status":-1,' in lifecycle.encode_run_completed(negative)


def test_run_completed_cancellation_encoding() -> None:
    payload = RunCompletedPayload("canceled", "canceled", cancellation_reason="user_requested")
    assert lifecycle.encode_run_completed(payload) == (
        b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"user_requested"}}'
    )
    empty = RunCompletedPayload("canceled", "canceled", cancellation_reason="")
    assert lifecycle.encode_run_completed(empty) == (
        b'{"status":"canceled","phase":"canceled","cancellation":{"reason":""}}'
    )


def test_run_suspended_always_writes_all_four_keys() -> None:
    """§5.4: RequiredTools null (nil slice) versus [] (empty slice)."""
    assert lifecycle.encode_run_suspended(RunSuspendedPayload("")) == (
        b'{"SuspensionID":"","Version":"","PendingCount":0,"RequiredTools":null}'
    )
    assert lifecycle.encode_run_suspended(RunSuspendedPayload("s", "v6", 1, ())) == (
        b'{"SuspensionID":"s","Version":"v6","PendingCount":1,"RequiredTools":[]}'
    )
    assert lifecycle.encode_run_suspended(RunSuspendedPayload("s", "v6", 2, ("a", "<b>"))) == (
        b'{"SuspensionID":"s","Version":"v6","PendingCount":2,"RequiredTools":["a","\\u003cb\\u003e"]}'
    )


def test_child_run_linked_encoding() -> None:
    payload = ChildRunLinkedPayload("t", "c", "r", "a")
    assert lifecycle.encode_child_run_linked(payload) == (
        b'{"ToolName":"t","ToolCallID":"c","ChildRunID":"r","ChildAgentID":"a"}'
    )


def test_cancellation_intent_encoding() -> None:
    assert lifecycle.encode_cancellation_intent(CancellationIntentPayload("user_requested")) == (
        b'{"reason":"user_requested"}'
    )
    assert lifecycle.encode_cancellation_intent(CancellationIntentPayload("")) == b'{"reason":""}'


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("<", b"\\u003c"),
        (">", b"\\u003e"),
        ("&", b"\\u0026"),
        ("<a href='x'>&amp;</a>", b"\\u003ca href='x'\\u003e\\u0026amp;\\u003c/a\\u003e"),
        ("\u2028", b"\\u2028"),
        ("\u2029", b"\\u2029"),
        ('"', b'\\"'),
        ("\\", b"\\\\"),
        ("/", b"/"),
        ("\n", b"\\n"),
        ("\r", b"\\r"),
        ("\t", b"\\t"),
        ("\b", b"\\b"),
        ("\f", b"\\f"),
        ("\x00", b"\\u0000"),
        ("\x01", b"\\u0001"),
        ("\x0b", b"\\u000b"),
        ("\x1b", b"\\u001b"),
        ("\x1f", b"\\u001f"),
        ("\x7f", b"\x7f"),
        ("\x80", "\x80".encode()),
        ("é", "é".encode()),
        ("€", "€".encode()),
        ("日本", "日本".encode()),
        ("😀", "😀".encode()),
        ("\ufeff", "\ufeff".encode()),
        ("\u2027\u202a", "\u2027\u202a".encode()),
    ],
)
def test_strings_are_escaped_like_go(text: str, escaped: bytes) -> None:
    """Go encoding/json (>= 1.22): HTML-safe, U+2028/9 escaped, \\b \\f short forms,
    other controls as lowercase \\u00XX, DEL and non-ASCII kept as UTF-8."""
    encoded = lifecycle.encode_cancellation_intent(CancellationIntentPayload(text))
    assert encoded == b'{"reason":"' + escaped + b'"}'


def test_escapes_apply_to_label_keys_too() -> None:
    encoded = lifecycle.encode_run_started(RunStartedPayload(labels={"<k>": "v&", "a\nb": ""}))
    assert encoded == b'{"labels":{"\\u003ck\\u003e":"v\\u0026","a\\nb":""}}'


def test_encodings_are_valid_json_that_python_reads_back() -> None:
    text = '<&>\u2028\x00é😀"\\'
    encoded = lifecycle.encode_run_started(
        RunStartedPayload(parent_run_id=text, labels={text: text})
    )
    assert json.loads(encoded) == {"parent_run_id": text, "labels": {text: text}}


# --- Round trips ------------------------------------------------------------------------------


TEXTS = [
    "",
    "x",
    "run-0123",
    "<script>&amp;</script>",
    "\u2028\u2029",
    "".join(chr(c) for c in range(0x20)),
    "\x7f\x80\xff",
    "é日本😀\ufeff",
    'quote " and backslash \\ and slash /',
    "ＡＢＣ",
    "\U0010ffff",
]


def started_values() -> list[RunStartedPayload]:
    values = [RunStartedPayload()]
    for text in TEXTS:
        values.append(RunStartedPayload(parent_run_id=text))
        values.append(RunStartedPayload(predecessor_run_id=text, labels={text: text, "k": text}))
        values.append(RunStartedPayload(text, text + "p", {"a": text, text + "b": ""}))
    return values


def completed_values() -> list[RunCompletedPayload]:
    values: list[RunCompletedPayload] = []
    for text in TEXTS:
        labels = {text: text} if text else {}
        values.append(RunCompletedPayload("success", text, labels=labels))
        values.append(
            RunCompletedPayload(
                "failed",
                "failed",
                failure=RunFailure(
                    "m" + text, text, text, text, "k" + text, text, len(text), bool(text)
                ),
                labels=labels,
            )
        )
        values.append(RunCompletedPayload("canceled", "canceled", cancellation_reason="r" + text))
    for status in (0, 1, 200, 599, -1, 2**63 - 1, -(2**63)):
        values.append(
            RunCompletedPayload(
                "failed", "failed", failure=RunFailure("m", kind="k", http_status=status)
            )
        )
    return values


def suspended_values() -> list[RunSuspendedPayload]:
    values: list[RunSuspendedPayload] = []
    for index, text in enumerate(TEXTS):
        values.append(RunSuspendedPayload(text, text, index))
        values.append(RunSuspendedPayload(text, "v", -index, ()))
        values.append(RunSuspendedPayload("s", text, 2**63 - 1, (text, text, "t")))
    return values


def linked_values() -> list[ChildRunLinkedPayload]:
    return [ChildRunLinkedPayload(text, text + "c", "r" + text, text) for text in TEXTS]


ROUND_TRIPS: list[tuple[Callable[[Any], bytes], Decoder, list[Any]]] = [
    (lifecycle.encode_run_started, lifecycle.decode_run_started, started_values()),
    (lifecycle.encode_run_completed, lifecycle.decode_run_completed, completed_values()),
    (lifecycle.encode_run_suspended, lifecycle.decode_run_suspended, suspended_values()),
    (lifecycle.encode_child_run_linked, lifecycle.decode_child_run_linked, linked_values()),
    (
        lifecycle.encode_cancellation_intent,
        lifecycle.decode_cancellation_intent,
        [CancellationIntentPayload(text) for text in TEXTS],
    ),
]


@pytest.mark.parametrize(
    ("encode", "decode", "values"),
    ROUND_TRIPS,
    ids=["run_started", "run_completed", "run_suspended", "child_run_linked", "cancellation"],
)
def test_decode_inverts_encode(
    encode: Callable[[Any], bytes], decode: Decoder, values: list[Any]
) -> None:
    """decode(encode(x)) == x, and re-encoding the decoded value gives the same bytes."""
    assert values
    for value in values:
        encoded = encode(value)
        decoded = decode(encoded)
        assert decoded == value, encoded
        assert encode(decoded) == encoded


@pytest.mark.parametrize(
    ("encode", "decode", "payload"),
    [
        (lifecycle.encode_run_started, lifecycle.decode_run_started, b"{}"),
        (
            lifecycle.encode_run_started,
            lifecycle.decode_run_started,
            b'{"parent_run_id":"p","labels":{"a":"\\u003c\\u0026\\u003e","b":"\\u2028"}}',
        ),
        (
            lifecycle.encode_run_completed,
            lifecycle.decode_run_completed,
            b'{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"},'
            b'"labels":{"site":"one"}}',
        ),
        (
            lifecycle.encode_run_completed,
            lifecycle.decode_run_completed,
            b'{"status":"failed","phase":"failed","failure":{"message":"boom","kind":"internal",'
            b'"http_status":500,"retryable":true}}',
        ),
        (
            lifecycle.encode_run_suspended,
            lifecycle.decode_run_suspended,
            b'{"SuspensionID":"suspension","Version":"v6","PendingCount":1,"RequiredTools":null}',
        ),
        (
            lifecycle.encode_child_run_linked,
            lifecycle.decode_child_run_linked,
            b'{"ToolName":"ada.search","ToolCallID":"call-1","ChildRunID":"c","ChildAgentID":"a"}',
        ),
        (
            lifecycle.encode_cancellation_intent,
            lifecycle.decode_cancellation_intent,
            b'{"reason":"user_requested"}',
        ),
    ],
)
def test_go_encoded_payloads_reencode_byte_for_byte(
    encode: Callable[[Any], bytes], decode: Decoder, payload: bytes
) -> None:
    """Canonical Go bytes survive decode + encode unchanged (§6.1 compares bytes)."""
    assert encode(decode(payload)) == payload


# --- Further strict-decoding edge cases --------------------------------------------------------


@pytest.mark.parametrize("kind", STRICT_TYPES)
def test_strict_decoder_reports_a_trailing_object_with_repeated_keys_as_a_second_value(
    kind: str,
) -> None:
    """§5.1 rule 1: any further JSON value is 'multiple JSON values'. Repeated keys are
    valid JSON syntax, so the trailer is still a value (Go decodes it into an empty
    target and reports 'multiple JSON values')."""
    decoder, payload = STRICT[kind]
    assert decode_error(decoder, payload + b' {"a":1,"a":1}') == "multiple JSON values"


@pytest.mark.parametrize("kind", STRICT_TYPES)
@pytest.mark.parametrize("raw", [b"\n", b"\t", b"\x00", b"\x1f"])
def test_strict_decoder_rejects_raw_control_characters_in_strings(kind: str, raw: bytes) -> None:
    """RFC 8259: control characters inside strings must be escaped (Go rejects them)."""
    decoder, payload = STRICT[kind]
    decode_error(decoder, with_member(payload, b'"x":"a' + raw + b'b"'))


def test_unknown_field_name_is_quoted_like_go() -> None:
    """Go builds the text with %q: a quote inside the key is escaped."""
    payload = b'{"a\\"b":1}'
    assert decode_error(lifecycle.decode_run_started, payload) == 'json: unknown field "a\\"b"'


def test_unexpected_completion_status_is_quoted_like_go() -> None:
    """upstream: fmt.Errorf("unexpected run completion status %q", status)."""
    payload = b'{"status":"a\\"b\\n","phase":"x"}'
    assert decode_error(lifecycle.decode_run_completed, payload) == (
        'unexpected run completion status "a\\"b\\n"'
    )


HUGE_INTEGER = b"1" * 5000
"""Valid JSON, but longer than CPython's default int-parsing limit (4300 digits)."""


@pytest.mark.parametrize(
    ("decoder", "payload"),
    [
        (lifecycle.decode_run_suspended, b'{"PendingCount":' + HUGE_INTEGER + b"}"),
        (
            lifecycle.decode_run_completed,
            b'{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k",'
            b'"http_status":' + HUGE_INTEGER + b"}}",
        ),
        (lifecycle.decode_run_started, b'{"labels":{"a":' + HUGE_INTEGER + b"}}"),
        (lifecycle.decode_run_started, b'{"k":' + HUGE_INTEGER + b"}"),
    ],
    ids=["pending_count", "http_status", "label_value", "unknown_key"],
)
def test_huge_integer_literal_is_a_payload_error(decoder: Decoder, payload: bytes) -> None:
    """Any rejection must be a PayloadError (the validators turn only PayloadError into a
    permanent INVALID_ARGUMENT); an escaping ValueError would become an INTERNAL error."""
    decode_error(decoder, payload)


@pytest.mark.parametrize("kind", STRICT_TYPES)
def test_huge_integer_trailing_value_is_a_second_value(kind: str) -> None:
    decoder, payload = STRICT[kind]
    assert decode_error(decoder, payload + b" " + HUGE_INTEGER) == "multiple JSON values"


def test_cancellation_intent_ignores_huge_numbers_under_unknown_keys() -> None:
    """§5.6: unknown keys are ignored whatever valid JSON they hold (Go skips them)."""
    payload = b'{"reason":"user_requested","n":' + HUGE_INTEGER + b"}"
    assert lifecycle.decode_cancellation_intent(payload) == CancellationIntentPayload(
        "user_requested"
    )
