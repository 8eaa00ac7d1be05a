"""The statements of MemoryStore and ContextStore."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, bindparam, delete, insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from runstore.server.db.record_writes import in_namespace, namespace_param
from runstore.server.db.schema import (
    context_appends,
    context_keys,
    context_transcript,
    context_versions,
    memory_appends,
    memory_events,
    memory_runs,
)


def _insert_if_missing(dialect: Dialect, table: Any, **values: Any) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING in the dialect's own spelling."""
    if dialect.name == "postgresql":
        return postgresql_insert(table).values(**values).on_conflict_do_nothing()
    return sqlite_insert(table).values(**values).on_conflict_do_nothing()


def memory_context_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    def binds(table: Any) -> dict[str, Any]:
        return {column.name: bindparam(column.name) for column in table.columns}

    memory_run = (
        in_namespace(memory_runs)
        & (memory_runs.c.agent_id == bindparam("agent_id"))
        & (memory_runs.c.run_id == bindparam("run_id"))
    )
    memory_count = select(memory_runs.c.event_count).where(memory_run)
    context_key = in_namespace(context_keys) & (
        context_keys.c.context_key == bindparam("context_key")
    )
    head = select(context_keys.c.version, context_keys.c.transcript_count, context_keys.c.saved_at)
    return {
        "memory_event_count": memory_count,
        "memory_run_create": _insert_if_missing(
            dialect,
            memory_runs,
            namespace=namespace_param(),
            agent_id=bindparam("agent_id"),
            run_id=bindparam("run_id"),
            event_count=0,
        ),
        "memory_run_lock": memory_count.with_for_update(),
        "memory_events": select(
            memory_events.c.type,
            memory_events.c.timestamp_s,
            memory_events.c.timestamp_ns,
            memory_events.c.data,
            memory_events.c.labels,
        )
        .where(
            in_namespace(memory_events),
            memory_events.c.agent_id == bindparam("agent_id"),
            memory_events.c.run_id == bindparam("run_id"),
            memory_events.c.position >= bindparam("after"),
        )
        .order_by(memory_events.c.position)
        .limit(bindparam("limit")),
        "insert_memory_event": insert(memory_events).values(binds(memory_events)),
        "grow_memory_run": update(memory_runs)
        .where(memory_run)
        .values(event_count=memory_runs.c.event_count + bindparam("added", type_=BigInteger)),
        "memory_append_request": select(
            memory_appends.c.digest, memory_appends.c.first_position, memory_appends.c.count
        ).where(
            in_namespace(memory_appends),
            memory_appends.c.agent_id == bindparam("agent_id"),
            memory_appends.c.run_id == bindparam("run_id"),
            memory_appends.c.key_digest == bindparam("key_digest"),
        ),
        "insert_memory_append": insert(memory_appends).values(binds(memory_appends)),
        "delete_memory_events": delete(memory_events).where(
            in_namespace(memory_events),
            memory_events.c.agent_id == bindparam("agent_id"),
            memory_events.c.run_id == bindparam("run_id"),
        ),
        "delete_memory_appends": delete(memory_appends).where(
            in_namespace(memory_appends),
            memory_appends.c.agent_id == bindparam("agent_id"),
            memory_appends.c.run_id == bindparam("run_id"),
        ),
        "delete_memory_run": delete(memory_runs).where(memory_run),
        "context_head": head.where(context_key),
        "context_create": _insert_if_missing(
            dialect,
            context_keys,
            namespace=namespace_param(),
            context_key=bindparam("context_key"),
            version=0,
            saved_at=None,
            transcript_count=0,
            written_at=bindparam("written_at"),
        ),
        "context_lock": head.where(context_key).with_for_update(),
        "context_version": select(
            context_versions.c.version, context_versions.c.snapshot, context_versions.c.saved_at
        ).where(
            in_namespace(context_versions),
            context_versions.c.context_key == bindparam("context_key"),
            context_versions.c.version == bindparam("version"),
        ),
        "insert_context_version": insert(context_versions).values(binds(context_versions)),
        "set_context_version": update(context_keys)
        .where(context_key)
        .values(
            version=bindparam("version"),
            saved_at=bindparam("saved_at"),
            written_at=bindparam("saved_at"),
        ),
        "prune_context_versions": delete(context_versions).where(
            in_namespace(context_versions),
            context_versions.c.context_key == bindparam("context_key"),
            context_versions.c.version < bindparam("keep_from"),
        ),
        "delete_context_versions": delete(context_versions).where(
            in_namespace(context_versions),
            context_versions.c.context_key == bindparam("context_key"),
        ),
        "delete_context_transcript": delete(context_transcript).where(
            in_namespace(context_transcript),
            context_transcript.c.context_key == bindparam("context_key"),
        ),
        "delete_context_appends": delete(context_appends).where(
            in_namespace(context_appends), context_appends.c.context_key == bindparam("context_key")
        ),
        "delete_context_key": delete(context_keys).where(context_key),
        "context_transcript": select(context_transcript.c.message)
        .where(
            in_namespace(context_transcript),
            context_transcript.c.context_key == bindparam("context_key"),
            context_transcript.c.position >= bindparam("after"),
        )
        .order_by(context_transcript.c.position)
        .limit(bindparam("limit")),
        "insert_context_message": insert(context_transcript).values(binds(context_transcript)),
        "grow_context_transcript": update(context_keys)
        .where(context_key)
        .values(
            transcript_count=context_keys.c.transcript_count + bindparam("added", type_=BigInteger),
            written_at=bindparam("written_at"),
        ),
        # --retain-contexts: keys not written since the cut-off, oldest first,
        # locked; a key a writer holds is skipped (it is being written now).
        "stale_contexts": select(context_keys.c.context_key)
        .where(in_namespace(context_keys), context_keys.c.written_at < bindparam("written_before"))
        .order_by(context_keys.c.written_at, context_keys.c.context_key)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True),
        "context_append_request": select(
            context_appends.c.digest, context_appends.c.first_position, context_appends.c.count
        ).where(
            in_namespace(context_appends),
            context_appends.c.context_key == bindparam("context_key"),
            context_appends.c.idempotency_key == bindparam("idempotency_key"),
        ),
        "insert_context_append": insert(context_appends).values(binds(context_appends)),
    }
