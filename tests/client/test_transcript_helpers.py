"""Transcript messages, codec, run-log replay and validators (§13.1, §13.3, §13.4).

Pure unit tests: no server. The codec must write every part field in the §13.1
order, accept exactly the §13.1 keys and keep numbers byte for byte; replay must
follow NextCursor with limit 512 and refuse broken pages (§6.4 rule 5); the
validators must implement each §13.4 rule and never touch their input.
"""

from __future__ import annotations

import copy
import json
import pickle
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from runstore.client.model import Page, RunRecord
from runstore.client.transcript import (
    PART_KEYS,
    CacheCheckpointPart,
    Citation,
    CitationLocation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    JsonDecimal,
    LocationKind,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    TranscriptError,
    TranscriptValidationError,
    build_messages_from_run_log,
    decode_messages,
    encode_messages,
    replay_run_log_events,
    validate_bedrock,
    validate_planner_transcript,
)
from runstore.contract.lifecycle import TRANSCRIPT_APPENDED, TRANSCRIPT_SEEDED

ALL_BYTES = bytes(range(256))

# --- Codec: round trips and encoding shape (§13.1) -------------------------------------

EVERY_PART: tuple[Part, ...] = (
    ThinkingPart(text="let me think", signature="sig+/=", redacted=b"", index=2, final=True),
    ThinkingPart(redacted=ALL_BYTES, index=0, final=False),
    TextPart(text='héllo <&> \u2028 \x00 "quoted" \\ 😀'),
    ImagePart(format="png", bytes=b"\x89PNG\r\n\x1a\n" + ALL_BYTES),
    ImagePart(format="webp", bytes=b"\x00"),
    DocumentPart(name="report", format="pdf", bytes=ALL_BYTES, context="ctx", cite=True),
    DocumentPart(name="notes", format="md", text="# notes"),
    DocumentPart(name="parts", format="txt", chunks=("one", "two")),
    DocumentPart(name="remote", uri="s3://bucket/key"),
    CitationsPart(
        text="cited",
        citations=(
            Citation(
                title="t",
                source="s",
                location=CitationLocation("document_char", document_index=1, start=2, end=3),
                source_content=("a", "b"),
            ),
            Citation(location=CitationLocation("document_chunk", 0, 4, 5)),
            Citation(location=CitationLocation("document_page", 7, 8, 9)),
            Citation(title="no location"),
        ),
    ),
    CitationsPart(),
    ToolUsePart(
        id="tu1",
        name="search",
        input={"q": "x", "n": 3, "nested": {"list": [1, None, True, "s"]}},
        thought_signature="ts",
    ),
    ToolUsePart(id="tu2", name="noop"),
    ToolResultPart(tool_use_id="tu1", content={"items": [], "score": Decimal("0.5")}),
    ToolResultPart(tool_use_id="tu2", content="boom", is_error=True),
    ToolResultPart(tool_use_id="tu3", content=None),
    ToolResultPart(tool_use_id="tu4", content=[1, "two", False]),
    CacheCheckpointPart(),
)


def test_every_part_kind_round_trips_exactly() -> None:
    messages = [
        Message(role="system", parts=(TextPart(text="rules"),)),
        Message(role="assistant", parts=EVERY_PART, meta={"trace": "abc", "n": 1}),
        Message(role="user", parts=(), meta={}),
    ]
    encoded = encode_messages(messages)
    decoded = decode_messages(encoded)
    assert decoded == messages
    assert encode_messages(decoded) == encoded
    # Binary content survives byte for byte, not just by equality of dataclasses.
    thinking = decoded[1].parts[1]
    image = decoded[1].parts[3]
    assert isinstance(thinking, ThinkingPart) and thinking.redacted == ALL_BYTES
    assert isinstance(image, ImagePart) and image.bytes == b"\x89PNG\r\n\x1a\n" + ALL_BYTES
    assert decoded[2].meta == {} and decoded[0].meta is None


def test_encoding_is_compact_utf8_with_standard_base64() -> None:
    message = Message(
        role="assistant",
        parts=(
            ThinkingPart(text="hm", signature="sig", redacted=b"\xfb\xff", index=1, final=True),
            ToolUsePart(id="t1", name="search", input={"q": "é"}, thought_signature="ts"),
        ),
    )
    assert (
        encode_messages([message])
        == (
            '[{"role":"assistant","parts":['
            '{"kind":"thinking","text":"hm","signature":"sig","redacted":"+/8=","index":1,'
            '"final":true},'
            '{"kind":"tool_use","id":"t1","name":"search","input":{"q":"é"},'
            '"thought_signature":"ts"}],"meta":null}]'
        ).encode()
    )


def test_empty_message_list_encodes_as_empty_array() -> None:
    assert encode_messages([]) == b"[]"
    assert decode_messages(b"[]") == []


# Key order of every part, straight from the §13.1 table.
TABLE_ORDER: dict[str, list[str]] = {
    "thinking": ["text", "signature", "redacted", "index", "final"],
    "text": ["text"],
    "image": ["format", "bytes"],
    "document": ["name", "format", "bytes", "text", "chunks", "uri", "context", "cite"],
    "citations": ["text", "citations"],
    "tool_use": ["id", "name", "input", "thought_signature"],
    "tool_result": ["tool_use_id", "content", "is_error"],
    "cache_checkpoint": [],
}
MINIMAL_PARTS: dict[str, Part] = {
    "thinking": ThinkingPart(),
    "text": TextPart(),
    "image": ImagePart(format="gif", bytes=b"G"),
    "document": DocumentPart(name="d", uri="u"),
    "citations": CitationsPart(citations=(Citation(),)),
    "tool_use": ToolUsePart(id="i", name="n"),
    "tool_result": ToolResultPart(tool_use_id="i"),
    "cache_checkpoint": CacheCheckpointPart(),
}


def test_part_keys_constant_follows_the_table() -> None:
    assert {kind: list(keys) for kind, keys in PART_KEYS.items()} == TABLE_ORDER


def ordered(payload: bytes) -> Any:
    """Decodes with objects as key/value pair lists, so key order is visible."""
    return json.loads(payload, object_pairs_hook=lambda pairs: pairs)


@pytest.mark.parametrize("kind", sorted(TABLE_ORDER))
def test_every_field_is_written_in_table_order_even_when_empty(kind: str) -> None:
    [message] = ordered(encode_messages([Message(role="user", parts=(MINIMAL_PARTS[kind],))]))
    assert [key for key, _ in message] == ["role", "parts", "meta"]
    [part] = dict(message)["parts"]
    assert [key for key, _ in part] == ["kind", *TABLE_ORDER[kind]]
    assert part[0] == ("kind", kind)


def test_empty_values_are_written_not_omitted() -> None:
    [message] = json.loads(
        encode_messages(
            [Message(role="user", parts=(ThinkingPart(), DocumentPart(name="d", text="t")))]
        )
    )
    assert message["parts"][0] == {
        "kind": "thinking",
        "text": "",
        "signature": "",
        "redacted": "",
        "index": 0,
        "final": False,
    }
    assert message["parts"][1]["bytes"] == ""
    assert message["parts"][1]["chunks"] == []
    assert message["parts"][1]["cite"] is False


def test_citation_keys_and_location_shape() -> None:
    part = CitationsPart(
        citations=(
            Citation(title="t", location=CitationLocation("document_page", 1, 2, 3)),
            Citation(title="none"),
        )
    )
    [message] = ordered(encode_messages([Message(role="assistant", parts=(part,))]))
    [encoded] = dict(message)["parts"]
    first, second = dict(encoded)["citations"]
    assert [key for key, _ in first] == ["title", "source", "location", "source_content"]
    location = dict(dict(first)["location"])
    assert list(location) == ["document_char", "document_chunk", "document_page"]
    assert location["document_char"] is None and location["document_chunk"] is None
    assert location["document_page"] == [("document_index", 1), ("start", 2), ("end", 3)]
    assert dict(dict(second)["location"]) == dict.fromkeys(location)


@pytest.mark.parametrize("kind", ["document_char", "document_chunk", "document_page"])
def test_each_location_kind_decodes(kind: LocationKind) -> None:
    payload = (
        '[{"role":"assistant","parts":[{"kind":"citations","text":"",'
        '"citations":[{"title":"","source":"","location":{"' + kind + '":'
        '{"document_index":4,"start":5,"end":6}},"source_content":null}]}],"meta":null}]'
    ).encode()
    [message] = decode_messages(payload)
    assert message.parts == (
        CitationsPart(citations=(Citation(location=CitationLocation(kind, 4, 5, 6)),)),
    )


@pytest.mark.parametrize(
    "location",
    ["null", '{"document_char":null,"document_chunk":null,"document_page":null}', "{}"],
)
def test_absent_location_decodes_as_none(location: str) -> None:
    payload = (
        '[{"role":"user","parts":[{"kind":"citations","citations":[{"location":'
        + location
        + "}]}]}]"
    ).encode()
    [message] = decode_messages(payload)
    assert message.parts == (CitationsPart(citations=(Citation(location=None),)),)


def test_parts_and_meta_may_be_null_or_absent() -> None:
    for payload in (
        b'[{"role":"user","parts":null,"meta":null}]',
        b'[{"role":"user"}]',
    ):
        assert decode_messages(payload) == [Message(role="user", parts=(), meta=None)]


def test_null_bytes_and_lists_read_as_empty() -> None:
    """A Go encoder writes nil slices as null; they mean "empty"."""
    payload = (
        b'[{"role":"user","parts":['
        b'{"kind":"thinking","text":"t","signature":"","redacted":null,"index":0,"final":false},'
        b'{"kind":"document","name":"d","format":"","bytes":null,"text":"x","chunks":null,'
        b'"uri":"","context":"","cite":false},'
        b'{"kind":"citations","text":"","citations":null}],"meta":null}]'
    )
    [message] = decode_messages(payload)
    assert message.parts == (
        ThinkingPart(text="t"),
        DocumentPart(name="d", text="x"),
        CitationsPart(),
    )


def test_missing_part_fields_take_zero_values() -> None:
    payload = b'[{"role":"assistant","parts":[{"kind":"thinking"},{"kind":"text"}]}]'
    [message] = decode_messages(payload)
    assert message.parts == (ThinkingPart(), TextPart())


def test_non_ascii_is_written_as_utf8_and_lone_surrogates_stay_escaped() -> None:
    message = Message(role="user", parts=(TextPart(text="日本 \ud800 x"),))
    encoded = encode_messages([message])
    assert "日本".encode() in encoded
    assert b"\\ud800" in encoded
    assert decode_messages(encoded) == [message]
    original = '[{"role":"user","parts":[{"kind":"text","text":"\\udfff\\u00e9"}],"meta":null}]'
    assert encode_messages(decode_messages(original.encode())) == (
        '[{"role":"user","parts":[{"kind":"text","text":"\\udfffé"}],"meta":null}]'.encode()
    )


# --- Codec: numbers are preserved exactly -----------------------------------------------

NUMBER_LITERALS = [
    "1.10",
    "1e400",
    "1E400",
    "1e-400",
    "12345678901234567890",
    "-12345678901234567890123456789",
    "0",
    "-0",
    "-0.0",
    "1.0",
    "2.50e+3",
    "0.1E-07",
    "3.141592653589793238462643383279502884197",
    "9" * 5000,
]


@pytest.mark.parametrize("literal", NUMBER_LITERALS)
def test_numbers_survive_decode_and_encode_byte_for_byte(literal: str) -> None:
    payload = (
        '[{"role":"assistant","parts":['
        '{"kind":"tool_use","id":"t","name":"n","input":{"v":'
        + literal
        + ',"l":['
        + literal
        + "]},"
        '"thought_signature":""}],"meta":{"m":' + literal + "}},"
        '{"role":"user","parts":[{"kind":"tool_result","tool_use_id":"t","content":'
        + literal
        + ',"is_error":false}],"meta":null}]'
    ).encode()
    assert encode_messages(decode_messages(payload)) == payload


def test_numbers_decode_as_int_or_decimal_never_float() -> None:
    payload = b'[{"role":"user","meta":{"i":12345678901234567890,"d":1.10,"e":1e400,"z":-0}}]'
    [message] = decode_messages(payload)
    assert message.meta is not None
    meta = message.meta
    assert type(meta["i"]) is int and meta["i"] == 12345678901234567890
    assert isinstance(meta["d"], Decimal) and meta["d"] == Decimal("1.10")
    assert isinstance(meta["e"], Decimal) and meta["e"] == Decimal("1e400")
    assert isinstance(meta["z"], JsonDecimal) and meta["z"].text == "-0"
    assert not any(isinstance(value, float) for value in meta.values())


def test_copies_and_pickles_keep_number_literals() -> None:
    payload = b'[{"role":"user","parts":[],"meta":{"x":1e400,"y":[2.50]}}]'
    messages = decode_messages(payload)
    assert encode_messages(copy.deepcopy(messages)) == payload
    assert encode_messages(pickle.loads(pickle.dumps(messages))) == payload


def test_plain_decimals_and_floats_encode_as_json_numbers() -> None:
    message = Message(
        role="user", meta={"d": Decimal("1.10"), "big": Decimal("1e400"), "f": 0.5, "i": -7}
    )
    assert encode_messages([message]) == (
        b'[{"role":"user","parts":[],"meta":{"d":1.10,"big":1E+400,"f":0.5,"i":-7}}]'
    )


# --- Codec: decoder rejections ------------------------------------------------------------


def part_payload(part: str) -> bytes:
    return ('[{"role":"user","parts":[' + part + '],"meta":null}]').encode()


REJECTED: list[tuple[str, bytes, str]] = [
    # Document shape.
    ("invalid utf-8", b'[{"role":"user","parts":[],"meta":{"a":"\xff"}}]', "not valid UTF-8"),
    ("not json", b"[{", "invalid JSON"),
    ("trailing data", b"[] []", "invalid JSON: Extra data"),
    ("empty payload", b"", "invalid JSON"),
    ("top-level object", b'{"role":"user"}', "must be a JSON array of messages, not an object"),
    ("top-level null", b"null", "must be a JSON array of messages, not null"),
    ("NaN", b'[{"role":"user","meta":{"x":NaN}}]', "NaN is not a JSON value"),
    ("Infinity", b'[{"role":"user","meta":{"x":-Infinity}}]', "-Infinity is not a JSON value"),
    (
        "number out of range",
        b'[{"role":"user","meta":{"x":1e-99999999999999999999}}]',
        "out of range",
    ),
    (
        "duplicate message key",
        b'[{"role":"user","role":"assistant"}]',
        "duplicate object key 'role'",
    ),
    (
        "duplicate key in meta",
        b'[{"role":"user","meta":{"a":1,"a":2}}]',
        "duplicate object key 'a'",
    ),
    # Messages.
    ("null message", b"[null]", "messages[0] must be a JSON object, not null"),
    ("string message", b'["hi"]', "messages[0] must be a JSON object, not a string"),
    ("mis-cased role key", b'[{"Role":"user"}]', "unknown key 'Role' (keys are case-sensitive)"),
    ("mis-cased parts key", b'[{"role":"user","Parts":[]}]', "unknown key 'Parts'"),
    ("unknown message key", b'[{"role":"user","name":"x"}]', "messages[0]: unknown key 'name'"),
    ("role missing", b'[{"parts":[]}]', "role is required"),
    ("role not allowed", b'[{"role":"tool"}]', "role 'tool' is not system, user or assistant"),
    ("role mis-cased", b'[{"role":"User"}]', "role 'User' is not system, user or assistant"),
    ("role not string", b'[{"role":1}]', "role must be a string, not a number"),
    ("parts not array", b'[{"role":"user","parts":{}}]', "parts must be an array, not an object"),
    ("meta not object", b'[{"role":"user","meta":[]}]', "meta must be a JSON object or null"),
    # Parts in general.
    ("part not object", part_payload('"text"'), "parts[0] must be a JSON object, not a string"),
    ("part null", part_payload("null"), "parts[0] must be a JSON object, not null"),
    ("kind missing", part_payload('{"text":"x"}'), "part kind is required"),
    ("kind mis-cased", part_payload('{"Kind":"text","text":"x"}'), "part kind is required"),
    ("kind not string", part_payload('{"kind":1}'), "kind must be a string, not a number"),
    ("unknown kind", part_payload('{"kind":"audio"}'), "unknown part kind 'audio'"),
    (
        "mis-cased part key",
        part_payload('{"kind":"text","Text":"x"}'),
        "parts[0] (text): unknown key 'Text' (keys are case-sensitive)",
    ),
    (
        "key of another kind",
        part_payload('{"kind":"text","text":"x","signature":"s"}'),
        "unknown key 'signature'",
    ),
    (
        "legacy Go key",
        part_payload('{"kind":"tool_use","id":"i","name":"n","Args":{}}'),
        "unknown key 'Args'",
    ),
    (
        "duplicate part key",
        part_payload('{"kind":"text","text":"a","text":"b"}'),
        "duplicate object key 'text'",
    ),
    (
        "cache checkpoint with field",
        part_payload('{"kind":"cache_checkpoint","text":""}'),
        "unknown key 'text'; expected keys: kind",
    ),
    # Field types.
    (
        "text not string",
        part_payload('{"kind":"text","text":5}'),
        "(text).text must be a string, not a number",
    ),
    ("text null", part_payload('{"kind":"text","text":null}'), "text must be a string, not null"),
    (
        "index fraction",
        part_payload('{"kind":"thinking","index":1.0}'),
        "index must be an integer, not a number",
    ),
    (
        "index string",
        part_payload('{"kind":"thinking","index":"1"}'),
        "index must be an integer, not a string",
    ),
    (
        "index beyond int64",
        part_payload('{"kind":"thinking","index":9223372036854775808}'),
        "index is out of the int64 range",
    ),
    (
        "final not bool",
        part_payload('{"kind":"thinking","final":1}'),
        "final must be a boolean, not a number",
    ),
    (
        "redacted not base64",
        part_payload('{"kind":"thinking","redacted":"@@@"}'),
        "redacted is not valid standard base64",
    ),
    (
        "redacted url-safe base64",
        part_payload('{"kind":"thinking","redacted":"-_8="}'),
        "redacted is not valid standard base64",
    ),
    (
        "redacted unpadded",
        part_payload('{"kind":"thinking","redacted":"+/8"}'),
        "redacted is not valid standard base64",
    ),
    (
        "redacted not string",
        part_payload('{"kind":"thinking","redacted":[1]}'),
        "redacted must be a base64 string, not an array",
    ),
    (
        "is_error not bool",
        part_payload('{"kind":"tool_result","tool_use_id":"t","is_error":"no"}'),
        "is_error must be a boolean, not a string",
    ),
    (
        "cite not bool",
        part_payload('{"kind":"document","name":"d","text":"t","cite":null}'),
        "cite must be a boolean, not null",
    ),
    # Images.
    (
        "image format unknown",
        part_payload('{"kind":"image","format":"bmp","bytes":"AA=="}'),
        "image format 'bmp' is not one of gif, jpeg, png, webp",
    ),
    (
        "image format mis-cased",
        part_payload('{"kind":"image","format":"PNG","bytes":"AA=="}'),
        "image format 'PNG'",
    ),
    ("image format missing", part_payload('{"kind":"image","bytes":"AA=="}'), "image format ''"),
    (
        "image bytes missing",
        part_payload('{"kind":"image","format":"png"}'),
        "image bytes are required",
    ),
    (
        "image bytes empty",
        part_payload('{"kind":"image","format":"png","bytes":""}'),
        "image bytes are required",
    ),
    # Documents.
    (
        "document name missing",
        part_payload('{"kind":"document","text":"t"}'),
        "document name is required",
    ),
    (
        "document no source",
        part_payload('{"kind":"document","name":"d"}'),
        "exactly one of bytes, text, chunks or uri (found none)",
    ),
    (
        "document empty sources",
        part_payload('{"kind":"document","name":"d","bytes":"","text":"","chunks":[],"uri":""}'),
        "(found none)",
    ),
    (
        "document two sources",
        part_payload('{"kind":"document","name":"d","text":"t","uri":"u"}'),
        "(found text, uri)",
    ),
    (
        "document bytes and chunks",
        part_payload('{"kind":"document","name":"d","bytes":"AA==","chunks":["c"]}'),
        "(found bytes, chunks)",
    ),
    (
        "document empty chunk",
        part_payload('{"kind":"document","name":"d","chunks":["a",""]}'),
        "document chunks[1] must be non-empty",
    ),
    (
        "document chunk not string",
        part_payload('{"kind":"document","name":"d","chunks":[1]}'),
        "chunks[0] must be a string, not a number",
    ),
    (
        "document chunks not array",
        part_payload('{"kind":"document","name":"d","chunks":"c"}'),
        "chunks must be an array, not a string",
    ),
    # Citations.
    (
        "citations not array",
        part_payload('{"kind":"citations","citations":{}}'),
        "citations must be an array, not an object",
    ),
    (
        "citation not object",
        part_payload('{"kind":"citations","citations":["x"]}'),
        "citations[0] must be a JSON object, not a string",
    ),
    (
        "citation unknown key",
        part_payload('{"kind":"citations","citations":[{"Title":"t"}]}'),
        "unknown key 'Title' (keys are case-sensitive)",
    ),
    (
        "location not object",
        part_payload('{"kind":"citations","citations":[{"location":1}]}'),
        "location must be a JSON object, not a number",
    ),
    (
        "location unknown kind",
        part_payload('{"kind":"citations","citations":[{"location":{"search_result":{}}}]}'),
        "unknown key 'search_result'",
    ),
    (
        "location two kinds",
        part_payload(
            '{"kind":"citations","citations":[{"location":{"document_char":{},"document_page":{}}}]}'
        ),
        "sets both document_char and document_page",
    ),
    (
        "location range unknown key",
        part_payload(
            '{"kind":"citations","citations":[{"location":{"document_char":{"DocumentIndex":1}}}]}'
        ),
        "unknown key 'DocumentIndex'",
    ),
    (
        "location range not int",
        part_payload(
            '{"kind":"citations","citations":[{"location":{"document_chunk":{"start":"1"}}}]}'
        ),
        "location.document_chunk.start must be an integer, not a string",
    ),
    (
        "source content not strings",
        part_payload('{"kind":"citations","citations":[{"source_content":[null]}]}'),
        "source_content[0] must be a string, not null",
    ),
    # Tool use.
    (
        "tool_use id missing",
        part_payload('{"kind":"tool_use","name":"n","input":{}}'),
        "tool_use id is required",
    ),
    (
        "tool_use name missing",
        part_payload('{"kind":"tool_use","id":"i","input":{}}'),
        "tool_use name is required",
    ),
    (
        "tool_use input missing",
        part_payload('{"kind":"tool_use","id":"i","name":"n"}'),
        "tool_use input must be a JSON object, not missing",
    ),
    (
        "tool_use input null",
        part_payload('{"kind":"tool_use","id":"i","name":"n","input":null}'),
        "tool_use input must be a JSON object, not null",
    ),
    (
        "tool_use input array",
        part_payload('{"kind":"tool_use","id":"i","name":"n","input":[]}'),
        "tool_use input must be a JSON object, not an array",
    ),
    (
        "tool_use input string",
        part_payload('{"kind":"tool_use","id":"i","name":"n","input":"{}"}'),
        "tool_use input must be a JSON object, not a string",
    ),
    # Tool result.
    (
        "tool_result id missing",
        part_payload('{"kind":"tool_result","content":"x"}'),
        "tool_result tool_use_id is required",
    ),
    (
        "tool_result id empty",
        part_payload('{"kind":"tool_result","tool_use_id":""}'),
        "tool_result tool_use_id is required",
    ),
]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [pytest.param(payload, expected, id=name) for name, payload, expected in REJECTED],
)
def test_decoder_rejects(payload: bytes, expected: str) -> None:
    with pytest.raises(TranscriptError) as info:
        decode_messages(payload)
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def test_rejection_names_the_message_and_part() -> None:
    payload = (
        b'[{"role":"user","parts":[{"kind":"text","text":"ok"}]},'
        b'{"role":"assistant","parts":[{"kind":"text"},{"kind":"image","format":"png"}]}]'
    )
    with pytest.raises(TranscriptError, match=r"^messages\[1\]\.parts\[1\] \(image\): "):
        decode_messages(payload)


# --- Codec: encoder rejections ------------------------------------------------------------

ENCODE_REJECTED: list[tuple[str, Message, str]] = [
    ("role", Message(role="tool"), "role 'tool' is not system, user or assistant"),
    ("image format", Message(role="user", parts=(ImagePart("tiff", b"x"),)), "image format"),
    ("image bytes", Message(role="user", parts=(ImagePart("png", b""),)), "image bytes"),
    (
        "document sources",
        Message(role="user", parts=(DocumentPart(name="d", text="t", uri="u"),)),
        "exactly one of bytes, text, chunks or uri",
    ),
    (
        "document name",
        Message(role="user", parts=(DocumentPart(name="", text="t"),)),
        "document name is required",
    ),
    (
        "document chunk",
        Message(role="user", parts=(DocumentPart(name="d", chunks=("",)),)),
        "chunks[0] must be non-empty",
    ),
    (
        "tool_use id",
        Message(role="assistant", parts=(ToolUsePart(id="", name="n"),)),
        "tool_use id is required",
    ),
    (
        "tool_use name",
        Message(role="assistant", parts=(ToolUsePart(id="i", name=""),)),
        "tool_use name is required",
    ),
    (
        "tool_result id",
        Message(role="user", parts=(ToolResultPart(tool_use_id=""),)),
        "tool_use_id is required",
    ),
    (
        "non-JSON meta",
        Message(role="user", meta={"s": {1, 2}}),  # type: ignore[dict-item]
        "set is not a JSON value",
    ),
    ("NaN", Message(role="user", meta={"x": float("nan")}), "nan is not a JSON number"),
    ("decimal NaN", Message(role="user", meta={"x": Decimal("NaN")}), "NaN is not a JSON number"),
    (
        "non-string key",
        Message(role="user", meta={"o": {1: "x"}}),  # type: ignore[dict-item]
        "object key 1 is not a string",
    ),
    (
        "index out of range",
        Message(role="assistant", parts=(ThinkingPart(index=2**63),)),
        "int64 range",
    ),
]


@pytest.mark.parametrize(
    ("message", "expected"),
    [pytest.param(message, expected, id=name) for name, message, expected in ENCODE_REJECTED],
)
def test_encoder_refuses_what_the_decoder_would_reject(message: Message, expected: str) -> None:
    with pytest.raises(TranscriptError) as info:
        encode_messages([message])
    assert expected in str(info.value)


def test_encoder_refuses_unknown_part_types() -> None:
    @dataclass(frozen=True)
    class AudioPart:
        data: bytes

    message = Message(role="user", parts=(AudioPart(b"x"),))  # type: ignore[arg-type]
    with pytest.raises(TranscriptError, match="AudioPart is not a transcript part"):
        encode_messages([message])


# --- Replay (§13.3) -----------------------------------------------------------------------

RUN = "run-1"
AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def record(key: str, type: str, payload: bytes, *, id: str = "", run_id: str = RUN) -> RunRecord:
    return RunRecord(
        event_key=key,
        run_id=run_id,
        agent_id="agent",
        type=type,
        payload=payload,
        timestamp=AT,
        id=id,
    )


def text_message(role: str, text: str) -> Message:
    return Message(role=role, parts=(TextPart(text=text),))


def transcript(
    key: str, *messages: Message, type: str = TRANSCRIPT_APPENDED, id: str = ""
) -> RunRecord:
    return record(key, type, encode_messages(messages), id=id)


def test_replay_concatenates_transcript_records_in_order() -> None:
    records = [
        None,
        record("started", "run_started", b"{}"),
        transcript(
            "seed", text_message("system", "s"), text_message("user", "u"), type=TRANSCRIPT_SEEDED
        ),
        record("tool", "tool_call_scheduled", b"not json at all"),
        None,
        transcript("turn-1", text_message("assistant", "a1")),
        transcript("turn-2", text_message("user", "u2"), text_message("assistant", "a2")),
        record("done", "run_completed", b"{"),
    ]
    messages, found = replay_run_log_events(records)
    assert found is True
    assert [(m.role, m.parts[0]) for m in messages] == [
        ("system", TextPart("s")),
        ("user", TextPart("u")),
        ("assistant", TextPart("a1")),
        ("user", TextPart("u2")),
        ("assistant", TextPart("a2")),
    ]


def test_replay_without_transcript_records_is_not_found() -> None:
    assert replay_run_log_events([]) == ([], False)
    assert replay_run_log_events([None, record("x", "run_started", b"{}")]) == ([], False)


@pytest.mark.parametrize("type", [TRANSCRIPT_SEEDED, TRANSCRIPT_APPENDED])
def test_an_empty_transcript_record_still_counts_as_found(type: str) -> None:
    assert replay_run_log_events([record("k", type, b"[]")]) == ([], True)


def test_replay_decode_failure_names_event_key_and_run() -> None:
    records = [
        transcript("ok", text_message("user", "u")),
        record("bad-key", TRANSCRIPT_APPENDED, b'[{"role":"robot"}]', run_id="run-9"),
    ]
    with pytest.raises(TranscriptError) as info:
        replay_run_log_events(records)
    message = str(info.value)
    assert "'bad-key'" in message and "'run-9'" in message
    assert "role 'robot'" in message
    assert isinstance(info.value.__cause__, TranscriptError)


@dataclass
class FakeRunLog:
    """A RunLogReader over a list of records with IDs "1".."N" (cursor = count consumed)."""

    records: list[RunRecord]
    cap: int | None = None
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page:
        self.calls.append((run_id, cursor, limit))
        start = int(cursor) if cursor else 0
        size = min(limit, self.cap) if self.cap else limit
        events = tuple(self.records[start : start + size])
        more = start + size < len(self.records)
        return Page(events=events, next_cursor=events[-1].id if more else "")


def interleaved_log(count: int) -> tuple[list[RunRecord], list[Message]]:
    """Transcript records every third position, other record types in between."""
    records: list[RunRecord] = []
    expected: list[Message] = []
    for position in range(1, count + 1):
        id = str(position)
        if position % 3 == 0:
            message = text_message("user" if position % 2 else "assistant", f"m{position}")
            expected.append(message)
            kind = TRANSCRIPT_SEEDED if position < 30 else TRANSCRIPT_APPENDED
            records.append(transcript(f"t{position}", message, type=kind, id=id))
        else:
            records.append(record(f"e{position}", "tool_result_received", b"!not json", id=id))
    return records, expected


async def test_build_pages_with_limit_512_and_chains_cursors() -> None:
    records, expected = interleaved_log(1100)
    store = FakeRunLog(records)
    messages = await build_messages_from_run_log(store, RUN)
    assert messages == expected
    assert len(messages) == 366
    assert store.calls == [(RUN, "", 512), (RUN, "512", 512), (RUN, "1024", 512)]


async def test_build_follows_a_store_that_caps_pages() -> None:
    records, expected = interleaved_log(250)
    store = FakeRunLog(records, cap=100)
    assert await build_messages_from_run_log(store, RUN) == expected
    assert store.calls == [(RUN, "", 512), (RUN, "100", 512), (RUN, "200", 512)]


async def test_build_keeps_messages_split_across_pages_in_order() -> None:
    records = [
        transcript("a", text_message("user", "q"), id="1"),
        transcript("b", text_message("assistant", "r"), id="2"),
        transcript("c", text_message("user", "q2"), id="3"),
    ]
    store = FakeRunLog(records, cap=1)
    messages = await build_messages_from_run_log(store, RUN)
    assert [m.parts[0] for m in messages] == [TextPart("q"), TextPart("r"), TextPart("q2")]
    assert [cursor for _, cursor, _ in store.calls] == ["", "1", "2"]


async def test_build_without_transcript_records_fails() -> None:
    records = [record(f"e{i}", "run_started", b"{}", id=str(i)) for i in range(1, 4)]
    with pytest.raises(TranscriptError) as info:
        await build_messages_from_run_log(FakeRunLog(records), RUN)
    assert str(info.value) == "runlog for run 'run-1' has no transcript message events"


async def test_build_on_an_empty_run_log_fails() -> None:
    with pytest.raises(TranscriptError, match="has no transcript message events"):
        await build_messages_from_run_log(FakeRunLog([]), RUN)


async def test_build_with_only_empty_transcript_records_returns_nothing() -> None:
    records = [record("k", TRANSCRIPT_SEEDED, b"[]", id="1")]
    assert await build_messages_from_run_log(FakeRunLog(records), RUN) == []


async def test_build_requires_store_and_run_id() -> None:
    with pytest.raises(TranscriptError, match="run id is required"):
        await build_messages_from_run_log(FakeRunLog([]), "")
    with pytest.raises(TranscriptError, match="store is required"):
        await build_messages_from_run_log(None, RUN)  # type: ignore[arg-type]


async def test_build_reports_the_undecodable_record() -> None:
    records = [
        transcript("good", text_message("user", "u"), id="1"),
        record("broken", TRANSCRIPT_APPENDED, b"[{", id="2"),
    ]
    with pytest.raises(TranscriptError, match="decode runlog event 'broken' for run 'run-1'"):
        await build_messages_from_run_log(FakeRunLog(records), RUN)


@dataclass
class ScriptedRunLog:
    """Returns fixed pages in turn, whatever is asked."""

    pages: list[Page]
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page:
        self.calls.append((run_id, cursor, limit))
        return self.pages[len(self.calls) - 1]


def page(*ids: str, next_cursor: str = "", run_id: str = RUN) -> Page:
    return Page(
        events=tuple(
            record(f"k{id}", TRANSCRIPT_APPENDED, b"[]", id=id, run_id=run_id) for id in ids
        ),
        next_cursor=next_cursor,
    )


BROKEN_PAGES: list[tuple[str, list[Page], str]] = [
    (
        "cursor is not the last id",
        [page("1", "2", next_cursor="1")],
        "next cursor '1' is not the last returned record ID '2'",
    ),
    (
        "cursor beyond the page",
        [page("1", next_cursor="7")],
        "next cursor '7' is not the last returned record ID '1'",
    ),
    (
        "cursor with empty page",
        [Page(events=(), next_cursor="5")],
        "next cursor '5' comes with an empty page",
    ),
    (
        "cursor repeats request cursor",
        [page("5", next_cursor="5"), page("6", next_cursor="5")],
        "at cursor '5': next cursor repeats the request cursor",
    ),
    ("record repeats", [page("1", "2", next_cursor="2"), page("2", "3")], "record ID '2' repeats"),
    ("record of another run", [page("1", run_id="run-2")], "record 0 belongs to run 'run-2'"),
    ("record without id", [page("1", "")], "record 1 has no ID"),
    ("null record", [Page(events=(None,))], "record 0 is null"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("pages", "expected"),
    [pytest.param(pages, expected, id=name) for name, pages, expected in BROKEN_PAGES],
)
async def test_build_detects_broken_pages(pages: list[Page], expected: str) -> None:
    store = ScriptedRunLog(pages)
    with pytest.raises(TranscriptError) as info:
        await build_messages_from_run_log(store, RUN)
    assert str(info.value).startswith("broken store page for run 'run-1'")
    assert expected in str(info.value)
    assert len(store.calls) == len(pages)


async def test_build_accepts_well_formed_scripted_pages() -> None:
    """The same scripts minus the defect pass, so the checks above are the cause."""
    store = ScriptedRunLog([page("1", "2", next_cursor="2"), page("3", next_cursor="3"), page()])
    assert await build_messages_from_run_log(store, RUN) == []
    assert [cursor for _, cursor, _ in store.calls] == ["", "2", "3"]


# --- Validators (§13.4) -------------------------------------------------------------------


def user(*parts: Part) -> Message:
    return Message(role="user", parts=parts)


def assistant(*parts: Part) -> Message:
    return Message(role="assistant", parts=parts)


def system(*parts: Part) -> Message:
    return Message(role="system", parts=parts)


def use(id: str) -> ToolUsePart:
    return ToolUsePart(id=id, name="tool", input={"id": id})


def result(id: str) -> ToolResultPart:
    return ToolResultPart(tool_use_id=id, content="ok")


THINK = ThinkingPart(text="thinking", signature="sig")
TEXT = TextPart(text="text")

VALID_PLANNER: list[tuple[str, list[Message | None]]] = [
    ("empty", []),
    ("no tools", [system(TEXT), user(TEXT), assistant(TEXT), user(TEXT), assistant(TEXT)]),
    ("one round", [user(TEXT), assistant(THINK, use("a")), user(result("a")), assistant(TEXT)]),
    (
        "several uses, results in another order",
        [user(TEXT), assistant(use("a"), use("b")), user(result("b"), result("a"))],
    ),
    (
        "group of two assistant messages",
        [
            user(TEXT),
            assistant(THINK, use("a")),
            assistant(TEXT, use("b")),
            user(result("a"), result("b")),
        ],
    ),
    (
        "group where only one message has tool use",
        [assistant(TEXT), assistant(use("a")), user(result("a"))],
    ),
    (
        "results with other parts",
        [
            assistant(use("a")),
            user(TEXT, result("a"), ImagePart("png", b"i"), DocumentPart(name="d", text="t")),
        ],
    ),
    (
        "rounds in a row",
        [
            assistant(use("a")),
            user(result("a")),
            assistant(use("b")),
            user(result("b")),
            assistant(TEXT),
            user(TEXT),
        ],
    ),
    (
        "group without tool use followed by anything",
        [assistant(TEXT), assistant(TEXT), system(TEXT), assistant(TEXT)],
    ),
    ("tool_result inside an assistant message is not covered", [assistant(TEXT, result("x"))]),
    (
        "ids reused in a later round",
        [assistant(use("a")), user(result("a")), assistant(use("a")), user(result("a"))],
    ),
    ("ends with a group without tool use", [user(TEXT), assistant(TEXT)]),
]


@pytest.mark.parametrize(
    "messages", [pytest.param(messages, id=name) for name, messages in VALID_PLANNER]
)
def test_planner_transcript_valid(messages: list[Message | None]) -> None:
    before = copy.deepcopy(messages)
    validate_planner_transcript(messages)
    assert messages == before


INVALID_PLANNER: list[tuple[str, list[Message | None], str]] = [
    # Rule 1.
    ("nil first", [None], "message[0] is nil"),
    ("nil later", [user(TEXT), assistant(TEXT), None], "message[2] is nil"),
    ("nil where the answer should be", [assistant(use("a")), None], "message[1] is nil"),
    (
        "nil after an answered round",
        [assistant(use("a")), user(result("a")), None],
        "message[2] is nil",
    ),
    # Rule 2.
    (
        "orphan tool_result first",
        [user(result("a"))],
        "user message[0] contains tool_result parts that do not answer",
    ),
    (
        "tool_result after group without tool use",
        [assistant(TEXT), user(result("a"))],
        "user message[1] contains tool_result",
    ),
    (
        "second tool_result message",
        [assistant(use("a")), user(result("a")), user(result("a"))],
        "user message[2] contains tool_result",
    ),
    (
        "tool_result in a system message",
        [system(result("a"))],
        "system message[0] contains tool_result",
    ),
    (
        "tool_result after an intervening user message",
        [assistant(TEXT), user(TEXT), user(result("a"))],
        "user message[2] contains tool_result",
    ),
    # Rule 4.
    (
        "group with tool use ends the transcript",
        [user(TEXT), assistant(use("a"))],
        "assistant message[1] with tool_use must be followed by a user tool_result message",
    ),
    (
        "two-message group ends the transcript",
        [assistant(use("a")), assistant(TEXT)],
        "assistant messages[0..1] with tool_use",
    ),
    (
        "group followed by a message of another role",
        [assistant(use("a")), Message(role="tool", parts=(result("a"),))],
        "must be followed immediately by a user tool_result message, not tool message[1]",
    ),
    (
        "group followed by system",
        [assistant(use("a")), system(result("a"))],
        "must be followed immediately by a user tool_result message, not system message[1]",
    ),
    (
        "empty tool_use id",
        [assistant(use("")), user(result(""))],
        "assistant message[0] has a tool_use with an empty id",
    ),
    (
        "duplicate tool_use id in one message",
        [assistant(use("a"), use("a")), user(result("a"), result("a"))],
        "repeats tool_use id 'a'",
    ),
    (
        "duplicate tool_use id across the group",
        [assistant(use("a")), assistant(use("a")), user(result("a"), result("b"))],
        "assistant messages[0..1] repeats tool_use id 'a'",
    ),
    # Rule 5.
    (
        "answer without tool_result",
        [assistant(use("a")), user(TEXT)],
        "user message[1] must contain tool_result parts",
    ),
    ("empty answer", [assistant(use("a")), user()], "user message[1] must contain tool_result"),
    (
        "too few results",
        [assistant(use("a"), use("b")), user(result("a"))],
        "must contain exactly 2 tool_result parts for assistant message[0], got 1",
    ),
    (
        "too many results",
        [assistant(use("a")), user(result("a"), result("b"))],
        "exactly 1 tool_result parts for assistant message[0], got 2",
    ),
    (
        "answer counts the whole group",
        [assistant(use("a")), assistant(use("b")), user(result("a"))],
        "exactly 2 tool_result parts for assistant messages[0..1], got 1",
    ),
    (
        "empty result id",
        [assistant(use("a")), user(result(""))],
        "user message[1] has a tool_result with an empty tool_use_id",
    ),
    (
        "duplicate result ids",
        [assistant(use("a"), use("b")), user(result("a"), result("a"))],
        "user message[1] repeats tool_result tool_use_id 'a'",
    ),
    (
        "mismatched ids",
        [assistant(use("a"), use("b")), user(result("a"), result("c"))],
        "user message[1] is missing tool_result for tool_use id 'b'",
    ),
    (
        "results answer an earlier round",
        [assistant(use("a")), user(result("a")), assistant(use("b")), user(result("a"))],
        "user message[3] is missing tool_result for tool_use id 'b'",
    ),
]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [pytest.param(messages, expected, id=name) for name, messages, expected in INVALID_PLANNER],
)
def test_planner_transcript_invalid(messages: list[Message | None], expected: str) -> None:
    before = copy.deepcopy(messages)
    with pytest.raises(TranscriptValidationError) as info:
        validate_planner_transcript(messages)
    assert expected in str(info.value)
    assert isinstance(info.value, TranscriptError)
    assert messages == before


def test_planner_validation_accepts_any_sequence() -> None:
    validate_planner_transcript((assistant(use("a")), user(result("a"))))


VALID_BEDROCK: list[tuple[str, list[Message | None]]] = [
    ("empty", []),
    ("thinking first", [user(TEXT), assistant(THINK, TEXT, use("a")), user(result("a"))]),
    ("redacted thinking first", [assistant(ThinkingPart(redacted=b"\x00"), use("a"))]),
    ("no tool use needs no thinking", [assistant(TEXT), assistant(TEXT, THINK)]),
    (
        "each message of a group checked alone",
        [assistant(THINK, use("a")), assistant(THINK, use("b")), user(result("a"), result("b"))],
    ),
    ("nil messages are skipped", [None, assistant(THINK, use("a")), None]),
    ("planner rules are not checked", [user(result("orphan")), assistant(THINK, use("a"))]),
    ("user tool_result needs no thinking", [assistant(THINK, use("a")), user(result("a"))]),
]


@pytest.mark.parametrize(
    "messages", [pytest.param(messages, id=name) for name, messages in VALID_BEDROCK]
)
def test_bedrock_valid_with_thinking(messages: list[Message | None]) -> None:
    before = copy.deepcopy(messages)
    validate_bedrock(messages, thinking_enabled=True)
    assert messages == before


INVALID_BEDROCK: list[tuple[str, list[Message | None], str]] = [
    (
        "no thinking",
        [user(TEXT), assistant(use("a")), user(result("a"))],
        "assistant message[1] with tool_use must start with thinking (parts: tool_use)",
    ),
    (
        "thinking not first",
        [assistant(TEXT, THINK, use("a"))],
        "assistant message[0] with tool_use must start with thinking (parts: text, thinking, "
        "tool_use)",
    ),
    (
        "per message, not per group",
        [assistant(THINK, TEXT), assistant(use("a"))],
        "assistant message[1] with tool_use must start with thinking",
    ),
    (
        "later message in a group",
        [assistant(THINK, use("a")), assistant(TEXT, use("b"))],
        "assistant message[1]",
    ),
    ("after a nil message", [None, assistant(use("a"))], "assistant message[1]"),
]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [pytest.param(messages, expected, id=name) for name, messages, expected in INVALID_BEDROCK],
)
def test_bedrock_invalid_with_thinking(messages: list[Message | None], expected: str) -> None:
    before = copy.deepcopy(messages)
    with pytest.raises(TranscriptValidationError) as info:
        validate_bedrock(messages, thinking_enabled=True)
    assert expected in str(info.value)
    assert messages == before


@pytest.mark.parametrize(
    "messages", [pytest.param(messages, id=name) for name, messages, _ in INVALID_BEDROCK]
)
def test_bedrock_without_thinking_is_always_valid(messages: list[Message | None]) -> None:
    validate_bedrock(messages, thinking_enabled=False)
    validate_bedrock([None, user(result("orphan"))], thinking_enabled=False)
