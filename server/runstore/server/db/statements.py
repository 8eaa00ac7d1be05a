"""Every statement of the store, compiled once per dialect (``compiled``).

The statements are built in modules of their own: ``runtime_sql``,
``fast_path_sql``, ``batch_sql``, ``listings`` and ``memory_context_sql``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Dialect

from runstore.server.db.batch_sql import RecordBatchStatements
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.fast_path_sql import fast_path_sources, guarded_change_sources
from runstore.server.db.listings import ListingStatements
from runstore.server.db.memory_context_sql import memory_context_sources
from runstore.server.db.namespace_sql import NamespaceStatements
from runstore.server.db.runtime_sql import runtime_sources
from runstore.server.db.seed_sql import SeedStatements


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement of the store, compiled for one dialect."""

    session: Compiled
    session_for_update: Compiled
    session_of_run_for_update: Compiled
    is_tombstoned: Compiled
    run: Compiled
    run_for_update: Compiled
    record_by_key: Compiled
    record_by_id: Compiled
    run_tail: Compiled
    session_tail: Compiled
    run_records: Compiled
    typed_run_records: Compiled
    session_records: Compiled
    transcript_records: Compiled
    runs_by_session: Compiled
    session_has_running_runs: Compiled
    purgeable_sessions: Compiled
    insert_session: Compiled
    end_session: Compiled
    purge_records: Compiled
    purge_runs: Compiled
    purge_session: Compiled
    insert_tombstone: Compiled
    run_tombstoned: Compiled
    insert_run_tombstone: Compiled
    purgeable_sessionless_runs: Compiled
    namespace_retention: Compiled
    run_ending_for_update: Compiled
    child_run_endings_for_update: Compiled
    delete_run_records: Compiled
    delete_run: Compiled
    insert_run: Compiled
    change_run: Compiled
    record_target: Compiled
    lock_run: Compiled
    insert_session_record: Compiled
    insert_sessionless_record: Compiled
    append_if_writable_in_session: Compiled
    append_if_writable_sessionless: Compiled
    start_if_new: Compiled
    start_one_shot_if_new: Compiled
    start_child_if_new: Compiled
    start_one_shot_child_if_new: Compiled
    end_if_running_in_session: Compiled
    end_if_running_sessionless: Compiled
    guarded_changes: dict[str, Compiled]
    """RecordRunCancellation's and RecordRunSuspension's fast paths
    (``fast_path_sql.change_if_running_name``)."""
    memory_event_count: Compiled
    memory_run_create: Compiled
    memory_run_lock: Compiled
    memory_events: Compiled
    insert_memory_event: Compiled
    grow_memory_run: Compiled
    memory_append_request: Compiled
    insert_memory_append: Compiled
    delete_memory_events: Compiled
    delete_memory_appends: Compiled
    delete_memory_run: Compiled
    context_head: Compiled
    context_create: Compiled
    context_lock: Compiled
    context_version: Compiled
    insert_context_version: Compiled
    set_context_version: Compiled
    prune_context_versions: Compiled
    delete_context_versions: Compiled
    delete_context_transcript: Compiled
    delete_context_appends: Compiled
    delete_context_key: Compiled
    context_transcript: Compiled
    insert_context_message: Compiled
    grow_context_transcript: Compiled
    context_append_request: Compiled
    insert_context_append: Compiled
    stale_contexts: Compiled
    listings: ListingStatements
    """ListSessions and ListRuns, compiled per filter shape on first use."""
    record_batches: RecordBatchStatements
    """AppendRunRecords, compiled per batch size on first use."""
    namespaces: NamespaceStatements
    """NamespaceAdmin's and the namespace purge's (``namespace_sql``)."""
    seeds: SeedStatements
    """Seeds' and preparations' (``seed_sql``)."""

    @classmethod
    def compile(cls, dialect: Dialect) -> Statements:
        sources = {
            **runtime_sources(),
            **fast_path_sources(dialect),
            **memory_context_sources(dialect),
        }
        compiled = {name: compile_for(stmt, dialect) for name, stmt in sources.items()}
        return cls(
            **compiled,
            guarded_changes={
                name: compile_for(statement, dialect)
                for name, statement in guarded_change_sources(dialect).items()
            },
            listings=ListingStatements(dialect),
            record_batches=RecordBatchStatements(dialect),
            namespaces=NamespaceStatements.compile(dialect),
            seeds=SeedStatements.compile(dialect),
        )
