"""The per-run memory store over gRPC, typed (§12, D5).

``RemoteMemoryStore.append_events`` makes one idempotency key per logical call
and sends it on every retry, so a reply lost in transit never appends twice.
Event builders write each type's data keys as §12 lists them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runstore.client import convert
from runstore.client.calls import Client
from runstore.client.transcript import JSONObject, JSONValue, decode_json, encode_json
from runstore.contract.model import AppendOutcome
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import memory_store_pb2_grpc as ms_grpc

USER_MESSAGE = "user_message"
ASSISTANT_MESSAGE = "assistant_message"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
PLANNER_NOTE = "planner_note"
THINKING = "thinking"


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One memory event; ``data`` is the JSON object's exact bytes."""

    type: str
    timestamp: datetime
    data: bytes
    labels: Mapping[str, str] = field(default_factory=dict)

    def decoded(self) -> JSONObject:
        """The data as a JSON object (numbers exact)."""
        value = decode_json(self.data)
        if not isinstance(value, dict):
            raise ValueError("memory event data is not a JSON object")
        return value


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """An agent's run memory: its events in order, and its metadata (§12)."""

    agent_id: str
    run_id: str
    events: tuple[MemoryEvent, ...]
    meta: Mapping[str, str] = field(default_factory=dict)


# --- Event builders (§12) ---------------------------------------------------------


def _event(
    type_: str, data: JSONObject, timestamp: datetime, labels: Mapping[str, str] | None
) -> MemoryEvent:
    return MemoryEvent(type_, timestamp, encode_json(data), dict(labels or {}))


def _omit_empty(**values: JSONValue) -> JSONObject:
    return {key: value for key, value in values.items() if value not in (None, "", {}, [])}


def user_message(
    message: str = "",
    *,
    structured: JSONValue = None,
    timestamp: datetime,
    labels: Mapping[str, str] | None = None,
) -> MemoryEvent:
    return _event(
        USER_MESSAGE, _omit_empty(message=message, structured=structured), timestamp, labels
    )


def assistant_message(
    message: str = "",
    *,
    structured: JSONValue = None,
    timestamp: datetime,
    labels: Mapping[str, str] | None = None,
) -> MemoryEvent:
    return _event(
        ASSISTANT_MESSAGE, _omit_empty(message=message, structured=structured), timestamp, labels
    )


def tool_call(
    tool_call_id: str,
    tool_name: str,
    *,
    payload: str = "",
    parent_tool_call_id: str = "",
    queue: str = "",
    expected_children_total: int = 0,
    timestamp: datetime,
    labels: Mapping[str, str] | None = None,
) -> MemoryEvent:
    """``payload`` is the tool input JSON as a string (§12)."""
    data: JSONObject = {"tool_call_id": tool_call_id, "tool_name": tool_name}
    data.update(_omit_empty(parent_tool_call_id=parent_tool_call_id, payload=payload, queue=queue))
    if expected_children_total:
        data["expected_children_total"] = expected_children_total
    return _event(TOOL_CALL, data, timestamp, labels)


def tool_result(
    tool_call_id: str,
    tool_name: str,
    *,
    result_json: str = "",
    parent_tool_call_id: str = "",
    preview: str = "",
    bounds: JSONObject | None = None,
    duration_ns: int = 0,
    error_message: str = "",
    timestamp: datetime,
    labels: Mapping[str, str] | None = None,
) -> MemoryEvent:
    """``result_json`` is the result JSON as a string; ``duration_ns`` in nanoseconds."""
    data: JSONObject = {"tool_call_id": tool_call_id, "tool_name": tool_name}
    data.update(
        _omit_empty(
            parent_tool_call_id=parent_tool_call_id,
            result_json=result_json,
            preview=preview,
            bounds=bounds,
            error_message=error_message,
        )
    )
    if duration_ns:
        data["duration"] = duration_ns
    return _event(TOOL_RESULT, data, timestamp, labels)


def planner_note(
    note: str, *, timestamp: datetime, labels: Mapping[str, str] | None = None
) -> MemoryEvent:
    return _event(PLANNER_NOTE, {"note": note}, timestamp, labels)


def thinking(
    *,
    text: str = "",
    signature: str = "",
    redacted: str = "",
    content_index: int = 0,
    final: bool = False,
    timestamp: datetime,
    labels: Mapping[str, str] | None = None,
) -> MemoryEvent:
    """``redacted`` is base64 text; ``content_index`` and ``final`` are always written."""
    data: JSONObject = _omit_empty(text=text, signature=signature, redacted=redacted)
    data["content_index"] = content_index
    data["final"] = final
    return _event(THINKING, data, timestamp, labels)


# --- The client ---------------------------------------------------------------------


def _to_wire(event: MemoryEvent) -> ms.MemoryEvent:
    return ms.MemoryEvent(
        type=event.type,
        timestamp=convert.timestamp(event.timestamp),
        data=event.data,
        labels=dict(event.labels),
    )


def _from_wire(message: ms.MemoryEvent) -> MemoryEvent:
    return MemoryEvent(
        type=message.type,
        timestamp=convert.from_timestamp(message.timestamp),
        data=message.data,
        labels=dict(message.labels),
    )


class RemoteMemoryStore(Client):
    """``runstore.v1.MemoryStore`` over gRPC; options as for ``RemoteStore``."""

    def __init__(self, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self.stub = ms_grpc.MemoryStoreStub(self.channel)

    async def load_run_page(
        self, agent_id: str, run_id: str, cursor: str = "", limit: int = 0
    ) -> tuple[tuple[MemoryEvent, ...], str]:
        """One page of events and the next cursor ("" at the end)."""
        request = ms.MemoryLoadRunRequest(
            agent_id=agent_id, run_id=run_id, cursor=cursor, limit=limit
        )
        response = await self._call(self.stub.LoadRun, request)
        return tuple(_from_wire(event) for event in response.events), response.next_cursor

    async def load_run(self, agent_id: str, run_id: str) -> MemorySnapshot:
        """Every event of the run, oldest first; an unknown run is empty (§12)."""
        events: list[MemoryEvent] = []
        cursor = ""
        meta: dict[str, str] = {}
        while True:
            request = ms.MemoryLoadRunRequest(agent_id=agent_id, run_id=run_id, cursor=cursor)
            response = await self._call(self.stub.LoadRun, request)
            events.extend(_from_wire(event) for event in response.events)
            meta = dict(response.meta)
            if not response.next_cursor:
                return MemorySnapshot(agent_id, run_id, tuple(events), meta)
            cursor = response.next_cursor

    async def append_events(
        self,
        agent_id: str,
        run_id: str,
        events: Sequence[MemoryEvent],
        *,
        idempotency_key: str | None = None,
    ) -> AppendOutcome:
        """Appends atomically in order. Without a key, one is made for this call
        (pass "" to send none)."""
        key = uuid.uuid4().hex if idempotency_key is None else idempotency_key
        request = ms.AppendEventsRequest(
            agent_id=agent_id,
            run_id=run_id,
            events=[_to_wire(event) for event in events],
            idempotency_key=key,
        )
        response = await self._call(self.stub.AppendEvents, request)
        return AppendOutcome(response.first_position, response.count, response.inserted)

    async def delete_run(self, agent_id: str, run_id: str) -> bool:
        """Deletes the run's memory; False when there was none (safe to retry)."""
        request = ms.MemoryDeleteRunRequest(agent_id=agent_id, run_id=run_id)
        return bool((await self._call(self.stub.DeleteRun, request)).deleted)
