"""Transcript messages, their JSON codec, run-log replay and validators (§13).

Transcript records (``transcript_messages_seeded`` / ``transcript_messages_appended``,
§13.2) carry a JSON array of messages. The store never looks inside them (Q15);
this module is the caller's side: typed messages and parts (§13.1), a strict codec
that preserves numbers byte for byte, replay of a run log into one message list
(§13.3) and the pure transcript validators (§13.4).
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Literal, Protocol, TypeAlias

from runstore.client.model import Page, RunRecord
from runstore.contract.lifecycle import TRANSCRIPT_TYPES

JSONValue: TypeAlias = (
    "bool | int | float | Decimal | str | list[JSONValue] | dict[str, JSONValue] | None"
)
"""A decoded JSON value. Decoding yields ``int`` for integers and ``JsonDecimal`` for
other numbers, never ``float``; encoding also accepts finite floats, plain Decimals
and tuples."""

JSONObject: TypeAlias = "dict[str, JSONValue]"

ROLES: Final = frozenset({"system", "user", "assistant"})
IMAGE_FORMATS: Final = frozenset({"png", "jpeg", "gif", "webp"})
DOCUMENT_FORMATS: Final = frozenset(
    {"pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md"}
)
"""Listed by §13.1 for documents; informative only, the codec does not enforce it."""

REPLAY_PAGE_SIZE: Final = 512
"""Records per ListRunRecords call when rebuilding a transcript (§13.3)."""

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_MAX_INT_DIGITS: Final = 4000
"""Longer integer literals stay text (``JsonDecimal``): Python's int parser refuses
very long strings, and the text is all we need to write them back."""


class TranscriptError(ValueError):
    """A transcript payload, message or run log is not acceptable; the message says why."""


class TranscriptValidationError(TranscriptError):
    """A message list breaks a §13.4 invariant."""


class JsonDecimal(Decimal):
    """A JSON number kept with its literal text so encoding writes it back byte for byte.

    ``Decimal`` alone would turn ``1e400`` into ``1E+400``; §13.1 requires decoders to
    preserve numbers exactly. It compares and computes like any Decimal.
    """

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> JsonDecimal:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __repr__(self) -> str:
        return f"JsonDecimal({self.text!r})"

    # Decimal would rebuild a subclass from str(self) and lose the literal.
    def __reduce__(self) -> tuple[type[JsonDecimal], tuple[str]]:
        return (JsonDecimal, (self.text,))

    def __copy__(self) -> JsonDecimal:
        return self

    def __deepcopy__(self, memo: object) -> JsonDecimal:
        return self


# --- Messages and parts (§13.1) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThinkingPart:
    """Provider reasoning: plaintext with a signature, or opaque redacted bytes."""

    text: str = ""
    signature: str = ""
    redacted: bytes = b""
    index: int = 0
    final: bool = False


@dataclass(frozen=True, slots=True)
class TextPart:
    """Visible text."""

    text: str = ""


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An inline image; ``format`` is one of ``IMAGE_FORMATS`` and ``bytes`` is required."""

    format: str
    bytes: bytes


@dataclass(frozen=True, slots=True)
class DocumentPart:
    """A document given by exactly one of ``bytes``, ``text``, ``chunks`` or ``uri``."""

    name: str
    format: str = ""
    bytes: bytes = b""
    text: str = ""
    chunks: tuple[str, ...] = ()
    uri: str = ""
    context: str = ""
    cite: bool = False


LocationKind: TypeAlias = Literal["document_char", "document_chunk", "document_page"]
LOCATION_KINDS: Final[tuple[LocationKind, ...]] = (
    "document_char",
    "document_chunk",
    "document_page",
)


@dataclass(frozen=True, slots=True)
class CitationLocation:
    """Where cited content sits in a source document; ``kind`` names the unit counted."""

    kind: LocationKind
    document_index: int = 0
    start: int = 0
    end: int = 0


@dataclass(frozen=True, slots=True)
class Citation:
    """Links generated text back to a source document."""

    title: str = ""
    source: str = ""
    location: CitationLocation | None = None
    source_content: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CitationsPart:
    """Text with the citations that support it."""

    text: str = ""
    citations: tuple[Citation, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolUsePart:
    """A tool call requested by the assistant; ``input`` is a JSON object."""

    id: str
    name: str
    input: JSONObject = field(default_factory=dict)
    thought_signature: str = ""


@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """The answer to a tool call; ``content`` is any JSON value (error text if is_error)."""

    tool_use_id: str
    content: JSONValue = None
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class CacheCheckpointPart:
    """A prompt-cache boundary marker; it has no fields."""


Part: TypeAlias = (
    ThinkingPart
    | TextPart
    | ImagePart
    | DocumentPart
    | CitationsPart
    | ToolUsePart
    | ToolResultPart
    | CacheCheckpointPart
)


@dataclass(frozen=True, slots=True)
class Message:
    """One transcript message; part order is significant and never changed (§13.1)."""

    role: str
    """``system``, ``user`` or ``assistant``."""
    parts: tuple[Part, ...] = ()
    meta: JSONObject | None = None
    """A free JSON object; None encodes as ``null``."""


# JSON keys of each part kind in the order of the §13.1 table (after "kind").
PART_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "thinking": ("text", "signature", "redacted", "index", "final"),
    "text": ("text",),
    "image": ("format", "bytes"),
    "document": ("name", "format", "bytes", "text", "chunks", "uri", "context", "cite"),
    "citations": ("text", "citations"),
    "tool_use": ("id", "name", "input", "thought_signature"),
    "tool_result": ("tool_use_id", "content", "is_error"),
    "cache_checkpoint": (),
}
_PART_KINDS: Final[Mapping[type, str]] = {
    ThinkingPart: "thinking",
    TextPart: "text",
    ImagePart: "image",
    DocumentPart: "document",
    CitationsPart: "citations",
    ToolUsePart: "tool_use",
    ToolResultPart: "tool_result",
    CacheCheckpointPart: "cache_checkpoint",
}
_MESSAGE_KEYS: Final = ("role", "parts", "meta")
_CITATION_KEYS: Final = ("title", "source", "location", "source_content")
_RANGE_KEYS: Final = ("document_index", "start", "end")


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

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _quote(text: str) -> str:
    """A JSON string in UTF-8 form; lone surrogates (legal JSON escapes) stay escaped."""
    quoted = json.dumps(text, ensure_ascii=False)
    if _SURROGATE.search(quoted):
        quoted = _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", quoted)
    return quoted


def _write(value: object, out: list[str], where: str) -> None:
    """Writes one JSON value compactly; numbers decoded earlier keep their literal text."""
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_quote(value))
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
            out.append(_quote(key))
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


def _reject_constant(name: str) -> JSONValue:
    raise TranscriptError(f"invalid JSON: {name} is not a JSON value")


def _unique_object(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    obj: JSONObject = {}
    for key, value in pairs:
        if key in obj:
            raise TranscriptError(f"invalid JSON: duplicate object key {key!r}")
        obj[key] = value
    return obj


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique_object,
    parse_float=_parse_number,
    parse_int=_parse_int,
    parse_constant=_reject_constant,
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


def _json_kind(value: JSONValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | Decimal | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


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


# --- Rebuilding a transcript from the run log (§13.3) -----------------------------------


def replay_run_log_events(records: Iterable[RunRecord | None]) -> tuple[list[Message], bool]:
    """Concatenates the messages of the transcript records in ``records`` (§13.3).

    Nulls and other record types are skipped. Returns the messages and whether at
    least one transcript record was seen (an empty transcript array still counts).

    Raises:
        TranscriptError: a transcript payload does not decode; names event key and run.
    """
    messages: list[Message] = []
    found = False
    for record in records:
        if record is None or record.type not in TRANSCRIPT_TYPES:
            continue
        try:
            messages.extend(decode_messages(record.payload))
        except TranscriptError as exc:
            raise TranscriptError(
                f"decode runlog event {record.event_key!r} for run {record.run_id!r}: {exc}"
            ) from exc
        found = True
    return messages, found


class RunLogReader(Protocol):
    """The one store read ``build_messages_from_run_log`` needs (ListRunRecords, §9.6.3)."""

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page: ...


def _check_page(run_id: str, cursor: str, page: Page, seen: set[str]) -> None:
    """Rejects a page no correct store returns (§6.4 rule 5, [N] client checks)."""

    def broken(reason: str) -> TranscriptError:
        return TranscriptError(
            f"broken store page for run {run_id!r} at cursor {cursor!r}: {reason}"
        )

    for index, record in enumerate(page.events):
        if record is None:
            raise broken(f"record {index} is null")
        if record.run_id != run_id:
            raise broken(f"record {index} belongs to run {record.run_id!r}")
        if not record.id:
            raise broken(f"record {index} has no ID")
        if record.id in seen:
            raise broken(f"record ID {record.id!r} repeats")
        seen.add(record.id)
    if not page.next_cursor:
        return
    if not page.events:
        raise broken(f"next cursor {page.next_cursor!r} comes with an empty page")
    if page.next_cursor == cursor:
        raise broken("next cursor repeats the request cursor")
    if page.next_cursor != page.events[-1].id:
        raise broken(
            f"next cursor {page.next_cursor!r} is not the last returned record ID "
            f"{page.events[-1].id!r}"
        )


async def build_messages_from_run_log(store: RunLogReader, run_id: str) -> list[Message]:
    """Rebuilds a run's transcript from its run log (§13.3, CORE).

    Pages ListRunRecords from the empty cursor, ``REPLAY_PAGE_SIZE`` records at a
    time, until the next cursor is empty, checking every page as the [N] client does,
    and replays the transcript records in order. Published seeds ([N] SeedEndID and
    prefix replay) are not consulted: only the run's own records count.

    Raises:
        TranscriptError: no store or run ID; a broken page; an undecodable transcript
            record; or no transcript record at all.
    """
    if store is None:
        raise TranscriptError("runlog store is required")
    if not run_id:
        raise TranscriptError("run id is required")
    messages: list[Message] = []
    found = False
    seen: set[str] = set()
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor, REPLAY_PAGE_SIZE)
        _check_page(run_id, cursor, page, seen)
        delta, page_found = replay_run_log_events(page.events)
        messages.extend(delta)
        found = found or page_found
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    if not found:
        raise TranscriptError(f"runlog for run {run_id!r} has no transcript message events")
    return messages


# --- Validators (§13.4) -----------------------------------------------------------------


def _tool_uses(message: Message) -> list[ToolUsePart]:
    return [part for part in message.parts if isinstance(part, ToolUsePart)]


def _tool_results(message: Message) -> list[ToolResultPart]:
    return [part for part in message.parts if isinstance(part, ToolResultPart)]


def _nil(index: int) -> TranscriptValidationError:
    return TranscriptValidationError(f"transcript: message[{index}] is nil")


def _check_answer(uses: list[ToolUsePart], group: str, answer: Message, answer_index: int) -> None:
    """Rule 5: the user answer holds exactly the group's tool results, by ID."""
    where = f"transcript: user message[{answer_index}]"
    results = _tool_results(answer)
    if not results:
        raise TranscriptValidationError(
            f"{where} must contain tool_result parts for the tool_use of {group}"
        )
    if len(results) != len(uses):
        raise TranscriptValidationError(
            f"{where} must contain exactly {len(uses)} tool_result parts for {group}, "
            f"got {len(results)}"
        )
    result_ids: set[str] = set()
    for result in results:
        if not result.tool_use_id:
            raise TranscriptValidationError(f"{where} has a tool_result with an empty tool_use_id")
        if result.tool_use_id in result_ids:
            raise TranscriptValidationError(
                f"{where} repeats tool_result tool_use_id {result.tool_use_id!r}"
            )
        result_ids.add(result.tool_use_id)
    use_ids = {use.id for use in uses}
    missing = sorted(use_ids - result_ids)
    if missing:
        raise TranscriptValidationError(
            f"{where} is missing tool_result for tool_use id {missing[0]!r} of {group}"
        )
    extra = sorted(result_ids - use_ids)
    if extra:  # unreachable with equal counts and unique IDs; kept for clarity
        raise TranscriptValidationError(
            f"{where} has tool_result id {extra[0]!r} matching no tool_use of {group}"
        )


def validate_planner_transcript(messages: Sequence[Message | None]) -> None:
    """Checks the tool-loop invariants of §13.4 before planning resumes.

    Consecutive assistant messages form a group; a group with tool uses must be
    answered by the very next message, a user message carrying exactly one
    tool_result per tool_use ID. A tool_result anywhere else is an error. Pure: the
    input is never modified.

    Raises:
        TranscriptValidationError: the first broken rule, naming the message index.
    """
    index = 0
    count = len(messages)
    while index < count:
        message = messages[index]
        if message is None:
            raise _nil(index)
        if message.role != "assistant":
            if _tool_results(message):
                raise TranscriptValidationError(
                    f"transcript: {message.role} message[{index}] contains tool_result parts "
                    "that do not answer an immediately preceding assistant tool_use group"
                )
            index += 1
            continue
        start = index
        uses: list[ToolUsePart] = []
        while index < count:
            member = messages[index]
            if member is None or member.role != "assistant":
                break
            uses.extend(_tool_uses(member))
            index += 1
        if not uses:
            continue
        group = (
            f"assistant message[{start}]"
            if index - start == 1
            else f"assistant messages[{start}..{index - 1}]"
        )
        use_ids: set[str] = set()
        for use in uses:
            if not use.id:
                raise TranscriptValidationError(
                    f"transcript: {group} has a tool_use with an empty id"
                )
            if use.id in use_ids:
                raise TranscriptValidationError(
                    f"transcript: {group} repeats tool_use id {use.id!r}"
                )
            use_ids.add(use.id)
        if index >= count:
            raise TranscriptValidationError(
                f"transcript: {group} with tool_use must be followed by a user tool_result "
                "message, but the transcript ends"
            )
        answer = messages[index]
        if answer is None:
            raise _nil(index)
        if answer.role != "user":
            raise TranscriptValidationError(
                f"transcript: {group} with tool_use must be followed immediately by a user "
                f"tool_result message, not {answer.role} message[{index}]"
            )
        _check_answer(uses, group, answer, index)
        index += 1


def validate_bedrock(messages: Sequence[Message | None], thinking_enabled: bool) -> None:
    """Adds Bedrock's thinking rule to a canonically valid transcript (§13.4).

    With thinking enabled, every non-null assistant message holding a tool_use must
    start with a ThinkingPart (per message, not per group). Canonical validation is
    the caller's job. Pure: the input is never modified.

    Raises:
        TranscriptValidationError: the first assistant message breaking the rule.
    """
    if not thinking_enabled:
        return
    for index, message in enumerate(messages):
        if message is None or message.role != "assistant" or not _tool_uses(message):
            continue
        if not isinstance(message.parts[0], ThinkingPart):
            kinds = ", ".join(_PART_KINDS.get(type(part), "?") for part in message.parts)
            raise TranscriptValidationError(
                f"bedrock: assistant message[{index}] with tool_use must start with thinking "
                f"(parts: {kinds})"
            )
