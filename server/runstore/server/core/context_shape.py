"""Shape rules of context snapshots and transcript messages
(docs/contract.md, "Context store"), as pure functions over core values.

Every message and content block carries its type tag, and the tag must name
the block that is set; raw JSON (tool arguments, results, metadata) must be
JSON. The servicer turns the wire messages into these values, each with its
serialised bytes; the store checks them here and then keeps the bytes as they
are, never reinterpreting them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from runstore.contract.errors import ValidationError, quote
from runstore.server.core.input_rules import decode_json

MESSAGE_TYPES: Final = ("system", "user", "assistant")
BLOCK_TYPES: Final = (
    "text",
    "image",
    "document",
    "thinking",
    "tool_use",
    "tool_result",
    "citations",
    "cache_checkpoint",
)
IMAGE_FORMATS: Final = ("png", "jpeg", "gif", "webp")
LOCATION_KINDS: Final = ("document_char", "document_chunk", "document_page")


@dataclass(frozen=True, slots=True)
class ImageBlock:
    format: str
    has_source: bool
    """Data or a URL is set."""


@dataclass(frozen=True, slots=True)
class DocumentBlock:
    name: str
    sources: int
    """How many of data, text, chunks and uri are set."""
    chunks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: bytes


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    tool_use_id: str
    content: bytes


@dataclass(frozen=True, slots=True)
class CitationsBlock:
    location_kinds: tuple[str | None, ...]
    """Each citation's location kind; None where a citation has no location."""


BlockValue = ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | CitationsBlock


@dataclass(frozen=True, slots=True)
class ContentBlock:
    """A ContentBlock as the rules see it."""

    type: str
    """The block's type tag."""
    kind: str | None
    """Which value is set (one of ``BLOCK_TYPES``); None: none."""
    value: BlockValue | None = None
    """The set value, for the kinds with rules of their own."""


@dataclass(frozen=True, slots=True)
class ContextMessage:
    """A ContextMessage as the rules see it, with its serialised form."""

    type: str
    meta: bytes
    content: tuple[ContentBlock, ...]
    wire: bytes
    """The message serialised deterministically: what the store keeps."""


@dataclass(frozen=True, slots=True)
class ContextSnapshot:
    """A ContextSnapshot's messages, with the whole snapshot serialised."""

    messages: tuple[ContextMessage, ...]
    wire: bytes


def _json(raw: bytes, field: str, *, must_be_object: bool) -> None:
    value = decode_json(raw, field)
    if must_be_object and not isinstance(value, dict):
        raise ValidationError(f"{field} must be a JSON object", field=field)


def check_block(block: ContentBlock, field: str) -> None:
    """The block's tag names its value, and the value keeps its kind's rules."""
    kind, value = block.kind, block.value
    if kind is None:
        raise ValidationError("content block has no value", field=field)
    if block.type != kind:
        raise ValidationError(
            f"content block type {quote(block.type)} does not match its {kind} value",
            field=f"{field}.type",
        )
    if isinstance(value, ImageBlock):
        if value.format not in IMAGE_FORMATS:
            raise ValidationError(
                f"image format must be one of {', '.join(IMAGE_FORMATS)}",
                field=f"{field}.image.format",
            )
        if not value.has_source:
            raise ValidationError("image needs data or a url", field=f"{field}.image")
    elif isinstance(value, DocumentBlock):
        if not value.name:
            raise ValidationError("document name is required", field=f"{field}.document.name")
        if value.sources != 1:
            raise ValidationError(
                "document needs exactly one of data, text, chunks, uri",
                field=f"{field}.document",
            )
        if any(not chunk for chunk in value.chunks):
            raise ValidationError(
                "document chunks must not be empty", field=f"{field}.document.chunks"
            )
    elif isinstance(value, ToolUseBlock):
        if not value.id or not value.name:
            raise ValidationError("tool_use id and name are required", field=f"{field}.tool_use")
        _json(value.input, f"{field}.tool_use.input", must_be_object=True)
    elif isinstance(value, ToolResultBlock):
        if not value.tool_use_id:
            raise ValidationError(
                "tool_result tool_use_id is required", field=f"{field}.tool_result.tool_use_id"
            )
        if value.content:
            _json(value.content, f"{field}.tool_result.content", must_be_object=False)
    elif isinstance(value, CitationsBlock):
        for index, location_kind in enumerate(value.location_kinds):
            if location_kind is not None and location_kind not in LOCATION_KINDS:
                raise ValidationError(
                    f"citation location kind must be one of {', '.join(LOCATION_KINDS)}",
                    field=f"{field}.citations.citations[{index}].location.kind",
                )


def check_messages(messages: Iterable[ContextMessage], field: str) -> None:
    """Every message has a known type and well-formed, tagged blocks."""
    for index, message in enumerate(messages):
        where = f"{field}[{index}]"
        if message.type not in MESSAGE_TYPES:
            raise ValidationError(
                f"message type {quote(message.type)} must be one of {', '.join(MESSAGE_TYPES)}",
                field=f"{where}.type",
            )
        if message.meta:
            _json(message.meta, f"{where}.meta", must_be_object=True)
        for position, block in enumerate(message.content):
            check_block(block, f"{where}.content[{position}]")
