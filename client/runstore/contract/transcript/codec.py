"""The transcript JSON codec (§13.1): strict, and numbers kept byte for byte."""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Final

from runstore.contract._gofmt import json_string
from runstore.contract._json import decoder, json_kind
from runstore.contract.transcript.model import (
    _CITATION_KEYS,
    _MESSAGE_KEYS,
    _PART_KINDS,
    _RANGE_KEYS,
    IMAGE_FORMATS,
    LOCATION_KINDS,
    PART_KEYS,
    ROLES,
    CacheCheckpointPart,
    Citation,
    CitationLocation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    JsonDecimal,
    JSONObject,
    JSONValue,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    TranscriptError,
)

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_MAX_INT_DIGITS: Final = 4000
"""Longer integer literals stay text (``JsonDecimal``): Python's int parser refuses
very long strings, and the text is all we need to write them back."""


# --- Rules shared by encoder and decoder (§13.1 "Rules" column) ------------------------


def _check_part(part: Part, where: str) -> None:
    """Enforces the §13.1 rules, so everything the encoder writes the decoder reads."""
    if isinstance(part, ImagePart):
        if part.format not in IMAGE_FORMATS:
            allowed = ", ".join(sorted(IMAGE_FORMATS))
            raise TranscriptError(f"{where}: image format {part.format!r} is not one of {allowed}")
        if not part.bytes:
            raise TranscriptError(f"{where}: image bytes are required")
    elif isinstance(part, DocumentPart):
        if not part.name:
            raise TranscriptError(f"{where}: document name is required")
        sources = [
            name
            for name, present in (
                ("bytes", bool(part.bytes)),
                ("text", bool(part.text)),
                ("chunks", bool(part.chunks)),
                ("uri", bool(part.uri)),
            )
            if present
        ]
        if len(sources) != 1:
            found = ", ".join(sources) if sources else "none"
            raise TranscriptError(
                f"{where}: document requires exactly one of bytes, text, chunks or uri "
                f"(found {found})"
            )
        for index, chunk in enumerate(part.chunks):
            if not chunk:
                raise TranscriptError(f"{where}: document chunks[{index}] must be non-empty")
    elif isinstance(part, ToolUsePart):
        if not part.id:
            raise TranscriptError(f"{where}: tool_use id is required")
        if not part.name:
            raise TranscriptError(f"{where}: tool_use name is required")
        if not isinstance(part.input, dict):
            raise TranscriptError(f"{where}: tool_use input must be a JSON object")
    elif isinstance(part, ToolResultPart) and not part.tool_use_id:
        raise TranscriptError(f"{where}: tool_result tool_use_id is required")


# --- Encoding ----------------------------------------------------------------------------


def _write(value: object, out: list[str], where: str) -> None:
    """Writes one JSON value compactly; numbers decoded earlier keep their literal text."""
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json_string(value, go=False))
    elif isinstance(value, int):
        try:
            out.append(int.__repr__(value))
        except ValueError:  # beyond Python's int-to-text digit limit
            raise TranscriptError(f"{where}: integer is too large to encode") from None
    elif isinstance(value, JsonDecimal):
        out.append(value.text)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise TranscriptError(f"{where}: {value} is not a JSON number")
        out.append(str(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise TranscriptError(f"{where}: {value} is not a JSON number")
        out.append(float.__repr__(value))
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out, f"{where}[{index}]")
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TranscriptError(f"{where}: object key {key!r} is not a string")
            if index:
                out.append(",")
            out.append(json_string(key, go=False))
            out.append(":")
            _write(item, out, f"{where}.{key}")
        out.append("}")
    else:
        raise TranscriptError(f"{where}: {type(value).__name__} is not a JSON value")


def encode_json(value: JSONValue) -> bytes:
    """Compact JSON of ``value``; numbers decoded by ``decode_json`` keep their text."""
    out: list[str] = []
    _write(value, out, "value")
    return "".join(out).encode("utf-8", "surrogatepass")


def decode_json(payload: bytes) -> JSONValue:
    """Parses JSON strictly (no duplicate keys, no NaN), keeping numbers exact."""
    return _parse(payload)


def _typed(value: object, kind: type, where: str, wanted: str) -> None:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TranscriptError(f"{where} must be {wanted}, not {type(value).__name__}")


def _enc_str(value: object, where: str) -> str:
    _typed(value, str, where, "a string")
    assert isinstance(value, str)
    return value


def _enc_bool(value: object, where: str) -> bool:
    _typed(value, bool, where, "a boolean")
    return bool(value)


def _enc_int(value: object, where: str) -> int:
    _typed(value, int, where, "an integer")
    assert isinstance(value, int)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise TranscriptError(f"{where} is out of the int64 range")
    return value


def _enc_bytes(value: object, where: str) -> str:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TranscriptError(f"{where} must be bytes, not {type(value).__name__}")
    return base64.b64encode(value).decode("ascii")


def _enc_strings(value: object, where: str) -> list[JSONValue]:
    if not isinstance(value, tuple | list):
        raise TranscriptError(f"{where} must be a tuple of strings")
    return [_enc_str(item, f"{where}[{index}]") for index, item in enumerate(value)]


def _enc_location(location: object, where: str) -> JSONObject:
    """All three location keys are written, the unused ones as null (§13.1)."""
    members: JSONObject = dict.fromkeys(LOCATION_KINDS)
    if location is None:
        return members
    if not isinstance(location, CitationLocation):
        raise TranscriptError(f"{where} must be a CitationLocation or None")
    if location.kind not in LOCATION_KINDS:
        raise TranscriptError(f"{where}: unknown location kind {location.kind!r}")
    members[location.kind] = {
        key: _enc_int(getattr(location, key), f"{where}.{location.kind}.{key}")
        for key in _RANGE_KEYS
    }
    return members


def _enc_citation(citation: object, where: str) -> JSONObject:
    if not isinstance(citation, Citation):
        raise TranscriptError(f"{where} must be a Citation")
    return {
        "title": _enc_str(citation.title, f"{where}.title"),
        "source": _enc_str(citation.source, f"{where}.source"),
        "location": _enc_location(citation.location, f"{where}.location"),
        "source_content": _enc_strings(citation.source_content, f"{where}.source_content"),
    }


def _part_object(part: Part, where: str) -> JSONObject:
    """The part as an ordered JSON object: ``kind`` first, then the §13.1 keys."""
    kind = _PART_KINDS.get(type(part))
    if kind is None:
        raise TranscriptError(f"{where}: {type(part).__name__} is not a transcript part")
    _check_part(part, where)
    fields: JSONObject = {"kind": kind}
    if isinstance(part, ThinkingPart):
        fields["text"] = _enc_str(part.text, f"{where}.text")
        fields["signature"] = _enc_str(part.signature, f"{where}.signature")
        fields["redacted"] = _enc_bytes(part.redacted, f"{where}.redacted")
        fields["index"] = _enc_int(part.index, f"{where}.index")
        fields["final"] = _enc_bool(part.final, f"{where}.final")
    elif isinstance(part, TextPart):
        fields["text"] = _enc_str(part.text, f"{where}.text")
    elif isinstance(part, ImagePart):
        fields["format"] = _enc_str(part.format, f"{where}.format")
        fields["bytes"] = _enc_bytes(part.bytes, f"{where}.bytes")
    elif isinstance(part, DocumentPart):
        fields["name"] = _enc_str(part.name, f"{where}.name")
        fields["format"] = _enc_str(part.format, f"{where}.format")
        fields["bytes"] = _enc_bytes(part.bytes, f"{where}.bytes")
        fields["text"] = _enc_str(part.text, f"{where}.text")
        fields["chunks"] = _enc_strings(part.chunks, f"{where}.chunks")
        fields["uri"] = _enc_str(part.uri, f"{where}.uri")
        fields["context"] = _enc_str(part.context, f"{where}.context")
        fields["cite"] = _enc_bool(part.cite, f"{where}.cite")
    elif isinstance(part, CitationsPart):
        fields["text"] = _enc_str(part.text, f"{where}.text")
        if not isinstance(part.citations, tuple | list):
            raise TranscriptError(f"{where}.citations must be a tuple of Citation")
        fields["citations"] = [
            _enc_citation(citation, f"{where}.citations[{index}]")
            for index, citation in enumerate(part.citations)
        ]
    elif isinstance(part, ToolUsePart):
        fields["id"] = _enc_str(part.id, f"{where}.id")
        fields["name"] = _enc_str(part.name, f"{where}.name")
        fields["input"] = part.input
        fields["thought_signature"] = _enc_str(part.thought_signature, f"{where}.thought_signature")
    elif isinstance(part, ToolResultPart):
        fields["tool_use_id"] = _enc_str(part.tool_use_id, f"{where}.tool_use_id")
        fields["content"] = part.content
        fields["is_error"] = _enc_bool(part.is_error, f"{where}.is_error")
    return fields


def _message_object(message: object, where: str) -> JSONObject:
    if not isinstance(message, Message):
        raise TranscriptError(f"{where} must be a Message, not {type(message).__name__}")
    if message.role not in ROLES:
        raise TranscriptError(f"{where}: role {message.role!r} is not system, user or assistant")
    if not isinstance(message.parts, tuple | list):
        raise TranscriptError(f"{where}.parts must be a tuple of parts")
    if message.meta is not None and not isinstance(message.meta, dict):
        raise TranscriptError(f"{where}.meta must be a JSON object or None")
    return {
        "role": message.role,
        "parts": [
            _part_object(part, f"{where}.parts[{index}]")
            for index, part in enumerate(message.parts)
        ],
        "meta": message.meta,
    }


def encode_messages(messages: Iterable[Message]) -> bytes:
    """Encodes messages as the JSON array a transcript record carries (§13.1, §13.2).

    Compact UTF-8 JSON; every part field is written (empty sequences as ``[]``, bytes
    as standard padded base64, an absent citation location as three null keys);
    numbers decoded by ``decode_messages`` are written back with their exact text.

    Raises:
        TranscriptError: a message or part breaks a §13.1 rule or holds a non-JSON value.
    """
    out: list[str] = ["["]
    try:
        for index, message in enumerate(messages):
            if index:
                out.append(",")
            _write(_message_object(message, f"messages[{index}]"), out, f"messages[{index}]")
    except RecursionError:
        raise TranscriptError("transcript value is nested too deeply to encode") from None
    out.append("]")
    return "".join(out).encode("utf-8")


# --- Decoding ----------------------------------------------------------------------------


def _parse_number(text: str) -> JsonDecimal:
    try:
        return JsonDecimal(text)
    except decimal.InvalidOperation:  # exponent beyond what Decimal can hold
        raise TranscriptError(f"invalid JSON: number {text[:40]} is out of range") from None


def _parse_int(text: str) -> int | JsonDecimal:
    """Integers become ``int`` unless ``int`` would lose the literal (``-0``, huge)."""
    if text == "-0" or len(text) > _MAX_INT_DIGITS:
        return _parse_number(text)
    return int(text)


def _duplicate_key(key: str) -> TranscriptError:
    return TranscriptError(f"invalid JSON: duplicate object key {key!r}")


def _not_a_value(name: str) -> TranscriptError:
    return TranscriptError(f"invalid JSON: {name} is not a JSON value")


_DECODER: Final = decoder(
    parse_int=_parse_int,
    parse_float=_parse_number,
    duplicate_key=_duplicate_key,
    constant=_not_a_value,
)


def _parse(payload: bytes) -> JSONValue:
    try:
        text = bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"transcript payload is not valid UTF-8 (byte {exc.start})") from None
    try:
        value: JSONValue = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise TranscriptError("invalid JSON: nested too deeply") from None
    return value


_WITH_ARTICLE: Final = {
    "null": "null",
    "boolean": "a boolean",
    "number": "a number",
    "string": "a string",
    "array": "an array",
    "object": "an object",
}


def _json_kind(value: JSONValue) -> str:
    return _WITH_ARTICLE[json_kind(value)]


def _object(value: JSONValue, where: str, keys: Sequence[str]) -> JSONObject:
    """``value`` as an object holding only ``keys`` (exact spelling, §13.1)."""
    if not isinstance(value, dict):
        raise TranscriptError(f"{where} must be a JSON object, not {_json_kind(value)}")
    for key in value:
        if key not in keys:
            hint = " (keys are case-sensitive)" if key.lower() in keys else ""
            expected = ", ".join(keys) if keys else "none"
            raise TranscriptError(f"{where}: unknown key {key!r}{hint}; expected keys: {expected}")
    return value


def _str(obj: JSONObject, key: str, where: str) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str):
        raise TranscriptError(f"{where}.{key} must be a string, not {_json_kind(value)}")
    return value


def _bool(obj: JSONObject, key: str, where: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise TranscriptError(f"{where}.{key} must be a boolean, not {_json_kind(value)}")
    return value


def _int(obj: JSONObject, key: str, where: str) -> int:
    value = obj.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TranscriptError(f"{where}.{key} must be an integer, not {_json_kind(value)}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise TranscriptError(f"{where}.{key} is out of the int64 range")
    return value


def _bytes(obj: JSONObject, key: str, where: str) -> bytes:
    """Standard padded base64; null (a Go encoder's empty slice) reads as empty."""
    value = obj.get(key)
    if value is None:
        return b""
    if not isinstance(value, str):
        raise TranscriptError(f"{where}.{key} must be a base64 string, not {_json_kind(value)}")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise TranscriptError(f"{where}.{key} is not valid standard base64") from None


def _array(obj: JSONObject, key: str, where: str) -> list[JSONValue]:
    """A JSON array; null (a Go encoder's empty slice) reads as empty."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TranscriptError(f"{where}.{key} must be an array, not {_json_kind(value)}")
    return value


def _strings(obj: JSONObject, key: str, where: str) -> tuple[str, ...]:
    items = _array(obj, key, where)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise TranscriptError(
                f"{where}.{key}[{index}] must be a string, not {_json_kind(item)}"
            )
    return tuple(str(item) for item in items)


def _location(obj: JSONObject, where: str) -> CitationLocation | None:
    """Null, or an object with at most one non-null ``document_*`` range (§13.1)."""
    value = obj.get("location")
    if value is None:
        return None
    members = _object(value, f"{where}.location", LOCATION_KINDS)
    found: CitationLocation | None = None
    for kind in LOCATION_KINDS:
        raw = members.get(kind)
        if raw is None:
            continue
        if found is not None:
            raise TranscriptError(
                f"{where}.location sets both {found.kind} and {kind}; at most one is allowed"
            )
        range_where = f"{where}.location.{kind}"
        bounds = _object(raw, range_where, _RANGE_KEYS)
        found = CitationLocation(
            kind=kind,
            document_index=_int(bounds, "document_index", range_where),
            start=_int(bounds, "start", range_where),
            end=_int(bounds, "end", range_where),
        )
    return found


def _citation(value: JSONValue, where: str) -> Citation:
    obj = _object(value, where, _CITATION_KEYS)
    return Citation(
        title=_str(obj, "title", where),
        source=_str(obj, "source", where),
        location=_location(obj, where),
        source_content=_strings(obj, "source_content", where),
    )


def _thinking(obj: JSONObject, where: str) -> Part:
    return ThinkingPart(
        text=_str(obj, "text", where),
        signature=_str(obj, "signature", where),
        redacted=_bytes(obj, "redacted", where),
        index=_int(obj, "index", where),
        final=_bool(obj, "final", where),
    )


def _text(obj: JSONObject, where: str) -> Part:
    return TextPart(text=_str(obj, "text", where))


def _image(obj: JSONObject, where: str) -> Part:
    return ImagePart(format=_str(obj, "format", where), bytes=_bytes(obj, "bytes", where))


def _document(obj: JSONObject, where: str) -> Part:
    return DocumentPart(
        name=_str(obj, "name", where),
        format=_str(obj, "format", where),
        bytes=_bytes(obj, "bytes", where),
        text=_str(obj, "text", where),
        chunks=_strings(obj, "chunks", where),
        uri=_str(obj, "uri", where),
        context=_str(obj, "context", where),
        cite=_bool(obj, "cite", where),
    )


def _citations(obj: JSONObject, where: str) -> Part:
    items = _array(obj, "citations", where)
    return CitationsPart(
        text=_str(obj, "text", where),
        citations=tuple(
            _citation(item, f"{where}.citations[{index}]") for index, item in enumerate(items)
        ),
    )


def _tool_use(obj: JSONObject, where: str) -> Part:
    raw_input = obj.get("input")
    if not isinstance(raw_input, dict):
        shown = "missing" if "input" not in obj else _json_kind(raw_input)
        raise TranscriptError(f"{where}: tool_use input must be a JSON object, not {shown}")
    return ToolUsePart(
        id=_str(obj, "id", where),
        name=_str(obj, "name", where),
        input=raw_input,
        thought_signature=_str(obj, "thought_signature", where),
    )


def _tool_result(obj: JSONObject, where: str) -> Part:
    return ToolResultPart(
        tool_use_id=_str(obj, "tool_use_id", where),
        content=obj.get("content"),
        is_error=_bool(obj, "is_error", where),
    )


def _cache_checkpoint(obj: JSONObject, where: str) -> Part:
    return CacheCheckpointPart()


_PART_DECODERS: Final[Mapping[str, Callable[[JSONObject, str], Part]]] = {
    "thinking": _thinking,
    "text": _text,
    "image": _image,
    "document": _document,
    "citations": _citations,
    "tool_use": _tool_use,
    "tool_result": _tool_result,
    "cache_checkpoint": _cache_checkpoint,
}


def _part(value: JSONValue, where: str) -> Part:
    if not isinstance(value, dict):
        raise TranscriptError(f"{where} must be a JSON object, not {_json_kind(value)}")
    if "kind" not in value:
        raise TranscriptError(f"{where}: part kind is required")
    kind = value["kind"]
    if not isinstance(kind, str):
        raise TranscriptError(f"{where}.kind must be a string, not {_json_kind(kind)}")
    decode = _PART_DECODERS.get(kind)
    if decode is None:
        raise TranscriptError(f"{where}: unknown part kind {kind!r}")
    where = f"{where} ({kind})"
    obj = _object(value, where, ("kind", *PART_KEYS[kind]))
    part = decode(obj, where)
    _check_part(part, where)
    return part


def _message(value: JSONValue, where: str) -> Message:
    obj = _object(value, where, _MESSAGE_KEYS)
    if "role" not in obj:
        raise TranscriptError(f"{where}: role is required")
    role = _str(obj, "role", where)
    if role not in ROLES:
        raise TranscriptError(f"{where}: role {role!r} is not system, user or assistant")
    parts = _array(obj, "parts", where)
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise TranscriptError(f"{where}.meta must be a JSON object or null, not {_json_kind(meta)}")
    return Message(
        role=role,
        parts=tuple(_part(item, f"{where}.parts[{index}]") for index, item in enumerate(parts)),
        meta=meta,
    )


def decode_messages(payload: bytes) -> list[Message]:
    """Strictly decodes a transcript payload: a JSON array of messages (§13.1).

    Only the §13.1 keys are accepted, spelled exactly; duplicate keys, NaN/Infinity,
    trailing data and invalid UTF-8 are rejected. ``parts``, ``meta``, bytes and list
    fields may be null (read as empty/None). Integers decode as ``int`` and other
    numbers as ``JsonDecimal``, so ``encode_messages`` writes them back unchanged.

    Raises:
        TranscriptError: the payload is not such an array; the message says where.
    """
    value = _parse(payload)
    if not isinstance(value, list):
        raise TranscriptError(
            f"transcript payload must be a JSON array of messages, not {_json_kind(value)}"
        )
    return [_message(item, f"messages[{index}]") for index, item in enumerate(value)]
