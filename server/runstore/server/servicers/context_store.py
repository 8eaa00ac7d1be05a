"""``runstore.v1.ContextStore``: the versioned conversation context (D5)."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from runstore.server import convert
from runstore.server.core.context import ContextStore
from runstore.server.error_status import maps_errors
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import context_store_pb2_grpc as ctx_grpc

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class ContextStoreServicer(ctx_grpc.ContextStoreServicer):
    def __init__(self, store: ContextStore) -> None:
        self._store = store

    @maps_errors
    async def GetContext(
        self, request: ctx.GetContextRequest, context: Context
    ) -> ctx.GetContextResponse:
        stored = await self._store.get_context(request.key, request.version)
        return ctx.GetContextResponse(
            key=stored.key,
            version=stored.version,
            snapshot=ctx.ContextSnapshot.FromString(stored.snapshot),
            saved_at=convert.timestamp_to_wire(stored.saved_at),
            current_version=stored.current_version,
        )

    @maps_errors
    async def SaveContext(
        self, request: ctx.SaveContextRequest, context: Context
    ) -> ctx.SaveContextResponse:
        snapshot = convert.context_snapshot_from_wire(request.snapshot)
        version = await self._store.save_context(request.key, snapshot, request.expected_version)
        return ctx.SaveContextResponse(version=version)

    @maps_errors
    async def DeleteContext(
        self, request: ctx.DeleteContextRequest, context: Context
    ) -> ctx.DeleteContextResponse:
        return ctx.DeleteContextResponse(deleted=await self._store.delete_context(request.key))

    @maps_errors
    async def AppendTranscript(
        self, request: ctx.AppendTranscriptRequest, context: Context
    ) -> ctx.AppendTranscriptResponse:
        messages = [convert.context_message_from_wire(message) for message in request.messages]
        outcome = await self._store.append_transcript(
            request.key, messages, request.idempotency_key
        )
        return ctx.AppendTranscriptResponse(
            first_position=outcome.first_position, count=outcome.count, inserted=outcome.inserted
        )

    @maps_errors
    async def ListTranscript(
        self, request: ctx.ListTranscriptRequest, context: Context
    ) -> ctx.ListTranscriptResponse:
        page = await self._store.list_transcript(request.key, request.cursor, request.limit)
        return ctx.ListTranscriptResponse(
            messages=[ctx.ContextMessage.FromString(raw) for raw in page.messages],
            next_cursor=page.next_cursor,
        )
