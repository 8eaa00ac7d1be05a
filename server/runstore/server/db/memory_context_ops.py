"""The memory store's (§12) and context store's (D5) operations of a
transaction, over the statement primitives (mixed into ``SqlTransaction``)."""

from __future__ import annotations

import json

from runstore.server.core.model import ContextHead, ContextVersion, MemoryEvent, Nanos, StoredAppend
from runstore.server.db import row_codecs
from runstore.server.db.primitives import StatementPrimitives
from runstore.server.db.statements import Statements


class MemoryContextOperations(StatementPrimitives):
    """``core.ports.Transaction``'s memory and context operations."""

    _sql: Statements
    contexts_purged: int  # SqlTransaction's counter

    # --- Memory store (§12) ---------------------------------------------------------

    async def memory_event_count(self, agent_id: str, run_id: str) -> int:
        row = await self._one(self._sql.memory_event_count, agent_id=agent_id, run_id=run_id)
        return int(row[0]) if row is not None else 0

    async def memory_events(
        self, agent_id: str, run_id: str, after: int, limit: int
    ) -> list[MemoryEvent]:
        rows = await self._all(
            self._sql.memory_events, agent_id=agent_id, run_id=run_id, after=after, limit=limit
        )
        return [
            MemoryEvent(
                row[0], row_codecs.join_nanos(row[1], row[2]), bytes(row[3]), json.loads(row[4])
            )
            for row in rows
        ]

    async def delete_memory_run(self, agent_id: str, run_id: str) -> bool:
        locked = await self._one(self._sql.memory_run_lock, agent_id=agent_id, run_id=run_id)
        if locked is None:
            return False
        ids = {"agent_id": agent_id, "run_id": run_id}
        await self._run(self._sql.delete_memory_events, **ids)
        await self._run(self._sql.delete_memory_appends, **ids)
        await self._run(self._sql.delete_memory_run, **ids)
        return True

    async def lock_memory_run(self, agent_id: str, run_id: str) -> int:
        # A DeleteRun that committed while this lock waited leaves no row to lock
        # (READ COMMITTED re-reads it as gone): create it anew and lock that.
        while True:
            await self._run(self._sql.memory_run_create, agent_id=agent_id, run_id=run_id)
            row = await self._one(self._sql.memory_run_lock, agent_id=agent_id, run_id=run_id)
            if row is not None:
                return int(row[0])

    async def append_memory_events(
        self, agent_id: str, run_id: str, first_position: int, events: list[MemoryEvent]
    ) -> None:
        await self._many(
            self._sql.insert_memory_event,
            [
                {
                    "agent_id": agent_id,
                    "run_id": run_id,
                    "position": first_position + offset,
                    "type": event.type,
                    "timestamp_s": seconds,
                    "timestamp_ns": nanos,
                    "data": event.data,
                    "labels": row_codecs.labels_to_text(event.labels),
                }
                for offset, event in enumerate(events)
                for seconds, nanos in [row_codecs.split_nanos(event.timestamp or 0)]
            ],
        )
        await self._run(
            self._sql.grow_memory_run, agent_id=agent_id, run_id=run_id, added=len(events)
        )

    async def memory_append_request(
        self, agent_id: str, run_id: str, idempotency_key: str
    ) -> StoredAppend | None:
        row = await self._one(
            self._sql.memory_append_request,
            agent_id=agent_id,
            run_id=run_id,
            key_digest=row_codecs.key_digest(idempotency_key),
        )
        return StoredAppend(bytes(row[0]), row[1], row[2]) if row is not None else None

    async def remember_memory_append(
        self, agent_id: str, run_id: str, idempotency_key: str, stored: StoredAppend
    ) -> None:
        await self._run(
            self._sql.insert_memory_append,
            agent_id=agent_id,
            run_id=run_id,
            key_digest=row_codecs.key_digest(idempotency_key),
            idempotency_key=idempotency_key,
            digest=stored.digest,
            first_position=stored.first_position,
            count=stored.count,
        )

    # --- Context store (D5) -----------------------------------------------------------

    async def context_head(self, key: str) -> ContextHead | None:
        row = await self._one(self._sql.context_head, context_key=key)
        return ContextHead(row[0], row[1], row[2]) if row is not None else None

    async def lock_context(self, key: str, now: Nanos) -> ContextHead:
        # A delete (DeleteContext, retention) that committed while this lock
        # waited leaves no row to lock (READ COMMITTED re-reads it as gone):
        # create the key anew and lock that.
        while True:
            await self._run(self._sql.context_create, context_key=key, written_at=now)
            row = await self._one(self._sql.context_lock, context_key=key)
            if row is not None:
                return ContextHead(row[0], row[1], row[2])

    async def context_version(self, key: str, version: int) -> ContextVersion | None:
        row = await self._one(self._sql.context_version, context_key=key, version=version)
        return ContextVersion(row[0], bytes(row[1]), row[2]) if row is not None else None

    async def save_context_version(self, key: str, version: ContextVersion, keep_from: int) -> None:
        await self._run(
            self._sql.insert_context_version,
            context_key=key,
            version=version.version,
            snapshot=version.snapshot,
            saved_at=version.saved_at,
        )
        await self._run(
            self._sql.set_context_version,
            context_key=key,
            version=version.version,
            saved_at=version.saved_at,
        )
        await self._run(self._sql.prune_context_versions, context_key=key, keep_from=keep_from)

    async def delete_context(self, key: str) -> bool:
        existed = await self._one(self._sql.context_lock, context_key=key) is not None
        await self._delete_context_rows(key)
        return existed

    async def _delete_context_rows(self, key: str) -> None:
        for statement in (
            self._sql.delete_context_versions,
            self._sql.delete_context_transcript,
            self._sql.delete_context_appends,
            self._sql.delete_context_key,
        ):
            await self._run(statement, context_key=key)

    async def purge_stale_contexts(self, written_before: Nanos, limit: int) -> int:
        rows = await self._all(self._sql.stale_contexts, written_before=written_before, limit=limit)
        for row in rows:
            await self._delete_context_rows(str(row[0]))
        self.contexts_purged += len(rows)
        return len(rows)

    async def context_transcript(self, key: str, after: int, limit: int) -> list[bytes]:
        rows = await self._all(
            self._sql.context_transcript, context_key=key, after=after, limit=limit
        )
        return [bytes(row[0]) for row in rows]

    async def append_context_transcript(
        self, key: str, first_position: int, messages: list[bytes], now: Nanos
    ) -> None:
        await self._many(
            self._sql.insert_context_message,
            [
                {"context_key": key, "position": first_position + offset, "message": message}
                for offset, message in enumerate(messages)
            ],
        )
        await self._run(
            self._sql.grow_context_transcript, context_key=key, added=len(messages), written_at=now
        )

    async def context_append_request(self, key: str, idempotency_key: str) -> StoredAppend | None:
        row = await self._one(
            self._sql.context_append_request, context_key=key, idempotency_key=idempotency_key
        )
        return StoredAppend(bytes(row[0]), row[1], row[2]) if row is not None else None

    async def remember_context_append(
        self, key: str, idempotency_key: str, stored: StoredAppend
    ) -> None:
        await self._run(
            self._sql.insert_context_append,
            context_key=key,
            idempotency_key=idempotency_key,
            digest=stored.digest,
            first_position=stored.first_position,
            count=stored.count,
        )
