"""The per-run memory store (§12, D5): ordered events per (agent, run).

Independent of the runtime store: no lifecycle rules, own tables. Appends are
atomic and keep the given order; an optional idempotency key makes a retried
call append nothing (Q18, D5).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from runstore.contract.errors import ReadArgumentError, ValidationError
from runstore.contract.model import AppendOutcome
from runstore.server.config import DEFAULTS
from runstore.server.core import idempotency, paging
from runstore.server.core.input_rules import check_ids, check_labels, check_text, decode_json
from runstore.server.core.model import MemoryEvent, StoredAppend
from runstore.server.core.ports import Database, Transaction

DEFAULT_MEMORY_PAGE: Final = DEFAULTS.page_limit

# Event types and the data keys each must carry (§12, "req.").
REQUIRED_DATA_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "user_message": (),
    "assistant_message": (),
    "tool_call": ("tool_call_id", "tool_name"),
    "tool_result": ("tool_call_id", "tool_name"),
    "planner_note": ("note",),
    "thinking": (),
}


@dataclass(frozen=True, slots=True)
class MemoryPage:
    events: list[MemoryEvent]
    event_count: int
    next_cursor: str = ""


def check_memory_event(event: MemoryEvent, index: int) -> None:
    """The event shape of §12: a known type, a time, a JSON object with the
    type's required string keys."""
    where = f"events[{index}]"
    if event.type not in REQUIRED_DATA_KEYS:
        known = ", ".join(REQUIRED_DATA_KEYS)
        raise ValidationError(
            f"memory event type {event.type!r} is not one of {known}", field=f"{where}.type"
        )
    if event.timestamp is None:
        raise ValidationError("memory event timestamp is required", field=f"{where}.timestamp")
    check_text(event.type, f"{where}.type")
    check_labels(event.labels, f"{where}.labels")
    data = decode_json(event.data, f"{where}.data", "memory event data must be a JSON object")
    if not isinstance(data, dict):
        raise ValidationError("memory event data must be a JSON object", field=f"{where}.data")
    for key in REQUIRED_DATA_KEYS[event.type]:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise ValidationError(
                f"{event.type} data requires a non-empty string {key!r}", field=f"{where}.data"
            )


def _size(event: MemoryEvent) -> int:
    """What an event weighs in a page: its data, type and labels."""
    labels = sum(len(key.encode()) + len(value.encode()) for key, value in event.labels.items())
    return len(event.data) + len(event.type.encode()) + labels


def _digest(events: Sequence[MemoryEvent]) -> bytes:
    """What an idempotent retry must repeat exactly."""
    return idempotency.digest(
        part
        for event in events
        for part in (
            event.type.encode(),
            str(event.timestamp).encode(),
            event.data,
            json.dumps(dict(event.labels), sort_keys=True).encode(),
        )
    )


class MemoryStore:
    """The memory store's rules over a ``Database``."""

    def __init__(
        self,
        db: Database,
        *,
        page_limit: int = DEFAULT_MEMORY_PAGE,
        page_bytes: int = DEFAULTS.page_bytes,
    ) -> None:
        self._db = db
        self._page_limit = page_limit
        self._page_bytes = page_bytes

    async def load_run(self, agent_id: str, run_id: str, cursor: str, limit: int) -> MemoryPage:
        """Events oldest first; an unknown run is an empty snapshot (§12).
        Pages end at the page limit or the page's byte budget (§6.4)."""
        _check_ids(agent_id, run_id)
        if limit < 0:
            raise ReadArgumentError("limit must not be negative", field="limit")
        after = paging.parse_cursor(cursor)
        page_size = min(limit or self._page_limit, self._page_limit)

        async def tx_fn(tx: Transaction) -> MemoryPage:
            count = await tx.memory_event_count(agent_id, run_id)
            if not count:
                return MemoryPage([], 0)
            events = await tx.memory_events(agent_id, run_id, after, page_size)
            del events[paging.page_length(map(_size, events), page_size, self._page_bytes) :]
            end = after + len(events)
            return MemoryPage(events, count, str(end) if end < count else "")

        return await self._db.read(tx_fn)

    async def append_events(
        self, agent_id: str, run_id: str, events: Sequence[MemoryEvent], idempotency_key: str
    ) -> AppendOutcome:
        """Appends atomically in order; zero events is a no-op (§12)."""
        _check_ids(agent_id, run_id, idempotency_key)
        for index, event in enumerate(events):
            check_memory_event(event, index)
        digest = _digest(events)

        async def tx_fn(tx: Transaction) -> AppendOutcome:
            count = await tx.lock_memory_run(agent_id, run_id)
            if idempotency_key:
                earlier = await tx.memory_append_request(agent_id, run_id, idempotency_key)
                if earlier is not None:
                    return idempotency.replay(earlier, digest, {"idempotency_key": idempotency_key})
            if events:
                await tx.append_memory_events(agent_id, run_id, count, list(events))
            if idempotency_key:
                await tx.remember_memory_append(
                    agent_id, run_id, idempotency_key, StoredAppend(digest, count, len(events))
                )
            return AppendOutcome(count, len(events), True)

        return await self._db.write(tx_fn)

    async def delete_run(self, agent_id: str, run_id: str) -> bool:
        """Deletes a run's memory (retention, a user's erasure); an unknown run is
        ``False``, not an error, so a retried delete succeeds. A later append
        starts a new history at position 0."""
        _check_ids(agent_id, run_id)

        async def tx_fn(tx: Transaction) -> bool:
            return await tx.delete_memory_run(agent_id, run_id)

        return await self._db.write(tx_fn)


def _check_ids(agent_id: str, run_id: str, idempotency_key: str = "") -> None:
    if not agent_id:
        raise ValidationError("agent id is required", field="agent_id")
    if not run_id:
        raise ValidationError("run id is required", field="run_id")
    check_ids(agent_id=agent_id, run_id=run_id, idempotency_key=idempotency_key)
