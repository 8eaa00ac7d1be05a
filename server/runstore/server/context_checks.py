"""Shape rules of context snapshots and transcript messages (seed 004, D5).

Every message and content block carries its type tag, and the tag must name
the block that is set; raw JSON (tool arguments, results, metadata) must be
JSON. Pure functions over the wire messages: the store keeps the serialised
messages byte for byte and never reinterprets them afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from runstore.contract.errors import ValidationError, quote
from runstore.server.core.input_rules import decode_json
from runstore.v1 import context_store_pb2 as ctx

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


def _json(raw: bytes, field: str, *, must_be_object: bool) -> None:
    value = decode_json(raw, field)
    if must_be_object and not isinstance(value, dict):
        raise ValidationError(f"{field} must be a JSON object", field=field)


def _check_block(block: ctx.ContentBlock, field: str) -> None:
    kind = block.WhichOneof("block")
    if kind is None:
        raise ValidationError("content block has no value", field=field)
    if block.type != kind:
        raise ValidationError(
            f"content block type {quote(block.type)} does not match its {kind} value",
            field=f"{field}.type",
        )
    if kind == "image":
        if block.image.format not in IMAGE_FORMATS:
            raise ValidationError(
                f"image format must be one of {', '.join(IMAGE_FORMATS)}",
                field=f"{field}.image.format",
            )
        if not (block.image.data or block.image.url):
            raise ValidationError("image needs data or a url", field=f"{field}.image")
    elif kind == "document":
        document = block.document
        if not document.name:
            raise ValidationError("document name is required", field=f"{field}.document.name")
        sources = [
            bool(document.data),
            bool(document.text),
            bool(document.chunks),
            bool(document.uri),
        ]
        if sum(sources) != 1:
            raise ValidationError(
                "document needs exactly one of data, text, chunks, uri",
                field=f"{field}.document",
            )
        if any(not chunk for chunk in document.chunks):
            raise ValidationError(
                "document chunks must not be empty", field=f"{field}.document.chunks"
            )
    elif kind == "tool_use":
        if not block.tool_use.id or not block.tool_use.name:
            raise ValidationError("tool_use id and name are required", field=f"{field}.tool_use")
        _json(block.tool_use.input, f"{field}.tool_use.input", must_be_object=True)
    elif kind == "tool_result":
        if not block.tool_result.tool_use_id:
            raise ValidationError(
                "tool_result tool_use_id is required", field=f"{field}.tool_result.tool_use_id"
            )
        if block.tool_result.content:
            _json(block.tool_result.content, f"{field}.tool_result.content", must_be_object=False)
    elif kind == "citations":
        for index, citation in enumerate(block.citations.citations):
            if citation.HasField("location") and citation.location.kind not in LOCATION_KINDS:
                raise ValidationError(
                    f"citation location kind must be one of {', '.join(LOCATION_KINDS)}",
                    field=f"{field}.citations.citations[{index}].location.kind",
                )


def check_messages(messages: Iterable[ctx.ContextMessage], field: str) -> None:
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
            _check_block(block, f"{where}.content[{position}]")


def snapshot_bytes(snapshot: ctx.ContextSnapshot) -> bytes:
    """The checked snapshot, serialised deterministically for storage."""
    check_messages(snapshot.messages, "snapshot.messages")
    serialised: bytes = snapshot.SerializeToString(deterministic=True)
    return serialised


def message_bytes(messages: Iterable[ctx.ContextMessage]) -> list[bytes]:
    """The checked transcript messages, each serialised for storage."""
    messages = list(messages)
    check_messages(messages, "messages")
    return [message.SerializeToString(deterministic=True) for message in messages]
