"""The versioned conversation context over gRPC, typed (docs/contract.md, "Context store"; D5).

Snapshots hold ``transcript.Message`` values (the §13.1 message and part
classes, shared with the transcript helpers) plus ``ImageURLPart`` for images
kept by URL. Every message and block travels with its type tag; tool
arguments, tool results and metadata travel as exact JSON.

    state = await contexts.load_context("conversation-42")
    ... run the agent ...
    try:
        await contexts.save_context(key, new_snapshot, expected_version=state.version)
    except ContextVersionConflictError as stale:
        ... reload (stale.current_version), merge, save again ...
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias, cast

from runstore.client import convert
from runstore.client.calls import Client
from runstore.client.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationLocation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    JSONObject,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    decode_json,
    encode_json,
)
from runstore.contract.errors import ContextNotFoundError
from runstore.contract.model import AppendOutcome
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import context_store_pb2_grpc as ctx_grpc


@dataclass(frozen=True, slots=True)
class ImageURLPart:
    """An image kept by URL rather than bytes (the context store keeps either)."""

    format: str
    url: str


ContextPart: TypeAlias = Part | ImageURLPart


@dataclass(frozen=True, slots=True)
class ContextMessage:
    """A context message: its type (role), tagged parts and optional metadata."""

    type: str
    parts: tuple[ContextPart, ...] = ()
    meta: JSONObject | None = None

    @classmethod
    def of(cls, message: Message) -> ContextMessage:
        return cls(message.role, tuple(message.parts), message.meta)


@dataclass(frozen=True, slots=True)
class ContextSnapshot:
    """The continuation state: instruction, compaction summary, replayable messages."""

    system_prompt: str = ""
    summary: str = ""
    messages: tuple[ContextMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class VersionedContext:
    """A saved context snapshot with its version, and the key's current version."""

    key: str
    version: int
    snapshot: ContextSnapshot
    saved_at: datetime
    current_version: int


# --- Conversion ---------------------------------------------------------------------


def _location_to_wire(location: CitationLocation | None) -> ctx.CitationLocation | None:
    if location is None:
        return None
    return ctx.CitationLocation(
        kind=location.kind,
        document_index=location.document_index,
        start=location.start,
        end=location.end,
    )


def block_to_wire(part: ContextPart) -> ctx.ContentBlock:
    """A part as a tagged content block."""
    if isinstance(part, TextPart):
        return ctx.ContentBlock(type="text", text=ctx.TextBlock(text=part.text))
    if isinstance(part, ImagePart):
        return ctx.ContentBlock(
            type="image", image=ctx.ImageBlock(format=part.format, data=part.bytes)
        )
    if isinstance(part, ImageURLPart):
        return ctx.ContentBlock(
            type="image", image=ctx.ImageBlock(format=part.format, url=part.url)
        )
    if isinstance(part, DocumentPart):
        return ctx.ContentBlock(
            type="document",
            document=ctx.DocumentBlock(
                name=part.name,
                format=part.format,
                data=part.bytes,
                text=part.text,
                chunks=list(part.chunks),
                uri=part.uri,
                context=part.context,
                cite=part.cite,
            ),
        )
    if isinstance(part, ThinkingPart):
        return ctx.ContentBlock(
            type="thinking",
            thinking=ctx.ThinkingBlock(
                text=part.text,
                signature=part.signature,
                redacted=part.redacted,
                index=part.index,
                final=part.final,
            ),
        )
    if isinstance(part, ToolUsePart):
        return ctx.ContentBlock(
            type="tool_use",
            tool_use=ctx.ToolUseBlock(
                id=part.id,
                name=part.name,
                input=encode_json(part.input),
                thought_signature=part.thought_signature,
            ),
        )
    if isinstance(part, ToolResultPart):
        return ctx.ContentBlock(
            type="tool_result",
            tool_result=ctx.ToolResultBlock(
                tool_use_id=part.tool_use_id,
                content=encode_json(part.content),
                is_error=part.is_error,
            ),
        )
    if isinstance(part, CitationsPart):
        citations = []
        for citation in part.citations:
            message = ctx.Citation(
                title=citation.title,
                source=citation.source,
                source_content=list(citation.source_content),
            )
            location = _location_to_wire(citation.location)
            if location is not None:
                message.location.CopyFrom(location)
            citations.append(message)
        return ctx.ContentBlock(
            type="citations", citations=ctx.CitationsBlock(text=part.text, citations=citations)
        )
    if isinstance(part, CacheCheckpointPart):
        return ctx.ContentBlock(
            type="cache_checkpoint", cache_checkpoint=ctx.CacheCheckpointBlock()
        )
    raise TypeError(f"not a context part: {type(part).__name__}")


def block_from_wire(block: ctx.ContentBlock) -> ContextPart:
    kind = block.WhichOneof("block")
    if kind == "text":
        return TextPart(text=block.text.text)
    if kind == "image":
        if block.image.WhichOneof("source") == "url":
            return ImageURLPart(format=block.image.format, url=block.image.url)
        return ImagePart(format=block.image.format, bytes=block.image.data)
    if kind == "document":
        d = block.document
        return DocumentPart(
            name=d.name,
            format=d.format,
            bytes=d.data,
            text=d.text,
            chunks=tuple(d.chunks),
            uri=d.uri,
            context=d.context,
            cite=d.cite,
        )
    if kind == "thinking":
        t = block.thinking
        return ThinkingPart(
            text=t.text, signature=t.signature, redacted=t.redacted, index=t.index, final=t.final
        )
    if kind == "tool_use":
        u = block.tool_use
        return ToolUsePart(
            id=u.id,
            name=u.name,
            input=cast("JSONObject", decode_json(u.input)),
            thought_signature=u.thought_signature,
        )
    if kind == "tool_result":
        r = block.tool_result
        content = decode_json(r.content) if r.content else None
        return ToolResultPart(tool_use_id=r.tool_use_id, content=content, is_error=r.is_error)
    if kind == "citations":
        return CitationsPart(
            text=block.citations.text,
            citations=tuple(
                Citation(
                    title=c.title,
                    source=c.source,
                    location=CitationLocation(
                        kind=cast(Any, c.location.kind),
                        document_index=c.location.document_index,
                        start=c.location.start,
                        end=c.location.end,
                    )
                    if c.HasField("location")
                    else None,
                    source_content=tuple(c.source_content),
                )
                for c in block.citations.citations
            ),
        )
    if kind == "cache_checkpoint":
        return CacheCheckpointPart()
    raise ValueError(f"content block without a value (type {block.type!r})")


def message_to_wire(message: ContextMessage | Message) -> ctx.ContextMessage:
    if isinstance(message, Message):
        message = ContextMessage.of(message)
    return ctx.ContextMessage(
        type=message.type,
        content=[block_to_wire(part) for part in message.parts],
        meta=encode_json(message.meta) if message.meta is not None else b"",
    )


def message_from_wire(message: ctx.ContextMessage) -> ContextMessage:
    meta = decode_json(message.meta) if message.meta else None
    return ContextMessage(
        type=message.type,
        parts=tuple(block_from_wire(block) for block in message.content),
        meta=cast("JSONObject | None", meta),
    )


def snapshot_to_wire(snapshot: ContextSnapshot) -> ctx.ContextSnapshot:
    return ctx.ContextSnapshot(
        system_prompt=snapshot.system_prompt,
        summary=snapshot.summary,
        messages=[message_to_wire(message) for message in snapshot.messages],
    )


def snapshot_from_wire(snapshot: ctx.ContextSnapshot) -> ContextSnapshot:
    return ContextSnapshot(
        system_prompt=snapshot.system_prompt,
        summary=snapshot.summary,
        messages=tuple(message_from_wire(message) for message in snapshot.messages),
    )


# --- The client ---------------------------------------------------------------------


class RemoteContextStore(Client):
    """``runstore.v1.ContextStore`` over gRPC; options as for ``RemoteStore``.

    A stale save raises ``ContextVersionConflictError`` (never retried: reload,
    merge, save again); ``current_version`` on the error says what to reload.
    """

    def __init__(self, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self.stub = ctx_grpc.ContextStoreStub(self.channel)

    async def get_context(self, key: str, version: int = 0) -> VersionedContext:
        """The current snapshot, or a kept older ``version``."""
        response = await self._call(
            self.stub.GetContext, ctx.GetContextRequest(key=key, version=version)
        )
        return VersionedContext(
            key=response.key,
            version=response.version,
            snapshot=snapshot_from_wire(response.snapshot),
            saved_at=convert.from_timestamp(response.saved_at),
            current_version=response.current_version,
        )

    async def load_context(self, key: str) -> VersionedContext | None:
        """The current snapshot, or None for a key never saved (save with version 0)."""
        try:
            return await self.get_context(key)
        except ContextNotFoundError:
            return None

    async def save_context(self, key: str, snapshot: ContextSnapshot, expected_version: int) -> int:
        """Saves over ``expected_version`` (0 creates); returns the new version."""
        request = ctx.SaveContextRequest(
            key=key, snapshot=snapshot_to_wire(snapshot), expected_version=expected_version
        )
        return int((await self._call(self.stub.SaveContext, request)).version)

    async def delete_context(self, key: str) -> bool:
        response = await self._call(self.stub.DeleteContext, ctx.DeleteContextRequest(key=key))
        return bool(response.deleted)

    async def append_transcript(
        self,
        key: str,
        messages: Sequence[ContextMessage | Message],
        *,
        idempotency_key: str | None = None,
    ) -> AppendOutcome:
        """Appends to the key's transcript; one idempotency key per call (or "")."""
        request = ctx.AppendTranscriptRequest(
            key=key,
            messages=[message_to_wire(message) for message in messages],
            idempotency_key=uuid.uuid4().hex if idempotency_key is None else idempotency_key,
        )
        response = await self._call(self.stub.AppendTranscript, request)
        return AppendOutcome(response.first_position, response.count, response.inserted)

    async def list_transcript(
        self, key: str, cursor: str = "", limit: int = 0
    ) -> tuple[tuple[ContextMessage, ...], str]:
        """One page of the transcript and the next cursor ("" at the end)."""
        request = ctx.ListTranscriptRequest(key=key, cursor=cursor, limit=limit)
        response = await self._call(self.stub.ListTranscript, request)
        return tuple(message_from_wire(m) for m in response.messages), response.next_cursor
