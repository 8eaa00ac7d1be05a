"""``runstore.v1.MemoryStore``: per-run memory events (§12, D5)."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from runstore.server import convert
from runstore.server.core.memory import MemoryStore
from runstore.server.core.model import MemoryEvent
from runstore.server.error_status import maps_errors
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import memory_store_pb2_grpc as ms_grpc

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


def _event_from_wire(message: ms.MemoryEvent, index: int) -> MemoryEvent:
    return MemoryEvent(
        type=message.type,
        timestamp=convert.nanos_from_wire(message, "timestamp", f"events[{index}].timestamp"),
        data=message.data,
        labels=dict(message.labels),
    )


def _event_to_wire(event: MemoryEvent) -> ms.MemoryEvent:
    assert event.timestamp is not None
    return ms.MemoryEvent(
        type=event.type,
        timestamp=convert.timestamp_to_wire(event.timestamp),
        data=event.data,
        labels=event.labels,
    )


class MemoryStoreServicer(ms_grpc.MemoryStoreServicer):
    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    @maps_errors
    async def LoadRun(
        self, request: ms.MemoryLoadRunRequest, context: Context
    ) -> ms.MemoryLoadRunResponse:
        page = await self._store.load_run(
            request.agent_id, request.run_id, request.cursor, request.limit
        )
        return ms.MemoryLoadRunResponse(
            agent_id=request.agent_id,
            run_id=request.run_id,
            events=[_event_to_wire(event) for event in page.events],
            meta={"event_count": str(page.event_count)},
            next_cursor=page.next_cursor,
        )

    @maps_errors
    async def AppendEvents(
        self, request: ms.AppendEventsRequest, context: Context
    ) -> ms.AppendEventsResponse:
        events = [_event_from_wire(event, index) for index, event in enumerate(request.events)]
        outcome = await self._store.append_events(
            request.agent_id, request.run_id, events, request.idempotency_key
        )
        return ms.AppendEventsResponse(
            first_position=outcome.first_position, count=outcome.count, inserted=outcome.inserted
        )

    @maps_errors
    async def DeleteRun(
        self, request: ms.MemoryDeleteRunRequest, context: Context
    ) -> ms.MemoryDeleteRunResponse:
        deleted = await self._store.delete_run(request.agent_id, request.run_id)
        return ms.MemoryDeleteRunResponse(deleted=deleted)
