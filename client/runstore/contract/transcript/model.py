"""Transcript messages and parts (§13.1), the JSON value types and the errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Literal, TypeAlias

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
