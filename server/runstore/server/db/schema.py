"""The runtime database schema: the one source of truth for tables and indexes.

Alembic migrations are checked against this metadata (autogenerate must find
no difference). Types are portable between SQLite and PostgreSQL:

* times are exact over the whole ``google.protobuf.Timestamp`` range (years
  1 to 9999, D7): caller times with full precision (session and memory event
  times) are two columns, ``<name>_s`` (BIGINT, UTC seconds since the
  epoch) and ``<name>_ns`` (0 to 999,999,999); record and start times are
  whole milliseconds (V1, V3), one BIGINT ``<name>_ms``; times the server's own
  clock sets (``updated_at``, ``saved_at``, ``written_at``, ``purged_at``) are
  BIGINT UTC nanoseconds;
* every key starts with ``namespace`` (docs/namespaces.md);
* IDs and keys are text; a sessionless run has ``session_id = ''`` (§3.4);
* payloads and checkpoints are bytes, stored byte for byte (D2);
* labels are a JSON object with sorted keys, compared as maps (V7).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

CHILDREN_ONLY = "parent_run_id <> ''"
"""The condition of the children's index of ``runs``; a query that means to
read that index states it in these words (``db.listings``)."""


def _namespace() -> Column[str]:
    """The first column of every key (docs/namespaces.md): the same IDs in two
    namespaces are two independent objects."""
    return Column("namespace", Text, primary_key=True, server_default=text("'default'"))


sessions = Table(
    "sessions",
    metadata,
    _namespace(),
    Column("session_id", Text, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("created_at_s", BigInteger, nullable=False),
    Column("created_at_ns", Integer, nullable=False),
    Column("ended_at_s", BigInteger, nullable=True),
    Column("ended_at_ns", Integer, nullable=True),
    # ListSessions (§9.8.1): the order, alone and after a status.
    Index(None, "namespace", "created_at_s", "created_at_ns", "session_id"),
    Index(
        "ix_sessions_namespace_status_created_at_session_id",
        "namespace",
        "status",
        "created_at_s",
        "created_at_ns",
        "session_id",
    ),
)

session_tombstones = Table(
    "session_tombstones",
    metadata,
    _namespace(),
    Column("session_id", Text, primary_key=True),
    Column("purged_at", BigInteger, nullable=False),
)

run_tombstones = Table(
    "run_tombstones",
    metadata,
    _namespace(),
    # A sessionless run deleted by retention (§9.10.2): its ID is never reused,
    # so a delayed retry of its start answers RUN_PURGED instead of re-creating it.
    Column("run_id", Text, primary_key=True),
    Column("purged_at", BigInteger, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    _namespace(),
    Column("run_id", Text, primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("parent_run_id", Text, nullable=False),
    Column("started_at_ms", BigInteger, nullable=False),
    Column("labels", Text, nullable=False),
    Column("start_outcome", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("cancellation_reason", Text, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # Lifecycle keys (§8): the event key of the first write of each slot.
    Column("start_key", Text, nullable=False),
    Column("parent_link_key", Text, nullable=False),
    Column("cancellation_key", Text, nullable=False),
    Column("suspension_key", Text, nullable=False),
    Column("terminal_key", Text, nullable=False),
    # The write-once checkpoint (§3.6).
    Column("checkpoint_id", Text, nullable=True),
    Column("checkpoint_data", LargeBinary, nullable=True),
    # The timestamp of the record that ended the run (completed, failed or
    # canceled), whole milliseconds; NULL while running or suspended, and for
    # runs a start stopped. Sessionless retention cuts on it (§9.10.2).
    Column("finished_at_ms", BigInteger, nullable=True),
    # The current generation (0011, docs/contract.md §10.6, D1), all NULL for a
    # run a seed-era start created: the 32-byte digest its first engine start
    # bound, the first current continuation admitted for it (§10.2), and the
    # seed end it started from.
    Column("request_digest", LargeBinary, nullable=True),
    Column("successor_run_id", Text, nullable=True),
    Column("seed_end_id", Text, nullable=True),
    # A failed run's failure (0013): the JSON object {message, kind, code,
    # retryable} of its ending record's `failure`, stored when it ends, so
    # listings show it without reading records. NULL for every other run.
    Column("failure", Text, nullable=True),
    # ListRunsBySession (ordered, Q10) and PurgeSession's running-run check;
    # ListRuns by session, and sessionless runs (session_id '').
    Index(None, "namespace", "session_id", "started_at_ms", "run_id"),
    # ListRuns (§9.8.2): the order alone and after each equality filter.
    Index(None, "namespace", "started_at_ms", "run_id"),
    Index(None, "namespace", "agent_id", "started_at_ms", "run_id"),
    Index(None, "namespace", "status", "started_at_ms", "run_id"),
    Index(None, "namespace", "session_id", "status", "started_at_ms", "run_id"),
    Index(None, "namespace", "agent_id", "status", "started_at_ms", "run_id"),
    # Sessionless retention: finished roots oldest first, and a run's one-shot children.
    Index(
        None,
        "namespace",
        "finished_at_ms",
        "run_id",
        sqlite_where=text("session_id = '' AND parent_run_id = ''"),
        postgresql_where=text("session_id = '' AND parent_run_id = ''"),
    ),
    Index(
        None,
        "namespace",
        "parent_run_id",
        sqlite_where=text("session_id = '' AND parent_run_id <> ''"),
        postgresql_where=text("session_id = '' AND parent_run_id <> ''"),
    ),
    # ListRuns' parent_run_id (0014): a run's children in start order. Partial:
    # roots, most runs, are not in it.
    Index(
        None,
        "namespace",
        "parent_run_id",
        "started_at_ms",
        "run_id",
        sqlite_where=text(CHILDREN_ONLY),
        postgresql_where=text(CHILDREN_ONLY),
    ),
)

records = Table(
    "records",
    metadata,
    _namespace(),
    Column("run_id", Text, primary_key=True),
    Column("record_id", BigInteger, primary_key=True),
    Column("event_key", Text, nullable=False),
    Column("agent_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("turn_id", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    # len(payload), so pages can be cut by bytes without reading payloads.
    Column("payload_size", Integer, nullable=False),
    Column("timestamp_ms", BigInteger, nullable=False),
    # Position in session order (D3); NULL for sessionless runs. Taken as the
    # session's largest position plus one under the session's lock, in the
    # record's own transaction: positions become visible in order, so readers
    # never skip a record that commits later.
    Column("session_position", BigInteger, nullable=True),
    # Exact retries and event conflicts look records up by key (§6.1).
    Index(None, "namespace", "run_id", "event_key", unique=True),
    # ListSessionRunRecords pages by position; PurgeSession deletes by session.
    Index(
        None,
        "namespace",
        "session_id",
        "session_position",
        unique=True,
        sqlite_where=text("session_position IS NOT NULL"),
        postgresql_where=text("session_position IS NOT NULL"),
    ),
)

# --- Seeds and preparations (docs/contract.md §9.7; current generation only) ---

seed_operations = Table(
    "seed_operations",
    metadata,
    _namespace(),
    # The one original operation of a destination run ID (§9.7.1 step 3). Every
    # seed mutation of the run locks this row first, so two replicas' uploads,
    # publications and settlements of one run take turns.
    Column("run_id", Text, primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("command_id", Text, nullable=False),
    # The attempt whose publication was accepted for the run; NULL before.
    Column("published_attempt_id", Text, nullable=True),
    # Server clock: when the operation was first recorded.
    Column("created_at", BigInteger, nullable=False),
    # PurgeSession deletes a session's seeds.
    Index(None, "namespace", "session_id"),
)

seed_attempts = Table(
    "seed_attempts",
    metadata,
    _namespace(),
    Column("run_id", Text, primary_key=True),
    Column("attempt_id", Text, primary_key=True),
    # The declaration (§9.7.1); kind '' for an attempt a settlement created
    # before its first BeginRunSeed (it is abandoned and never declared).
    Column("kind", String(16), nullable=False),
    Column("source_run_id", Text, nullable=False),
    Column("source_end_id", Text, nullable=False),
    Column("exclude_reasoning", Integer, nullable=False),
    # JSON array of [prompt_id, version, session_id, {labels}], in order.
    Column("rendered_prompts", Text, nullable=False),
    # The resolved source's end record ID; NULL for a literal seed.
    Column("source_end", Text, nullable=True),
    # open, published or abandoned.
    Column("state", String(16), nullable=False),
    # The attempt's last record, its last history record (both 0 before the
    # first), and the bytes of its compiled-start parts.
    Column("end_id", BigInteger, nullable=False),
    Column("seed_end_id", BigInteger, nullable=False),
    Column("prepared_bytes", BigInteger, nullable=False),
    # Whether the declared source was appended; whether the last record is an
    # unfinished literal part.
    Column("has_source", Integer, nullable=False),
    Column("literal_open", Integer, nullable=False),
    # Server clock: when the attempt was begun (or settled unseen); expiry
    # deletes open and abandoned attempts older than --seed-attempt-ttl.
    Column("created_at", BigInteger, nullable=False),
    Index(None, "namespace", "state", "created_at"),
)

seed_records = Table(
    "seed_records",
    metadata,
    _namespace(),
    Column("run_id", Text, primary_key=True),
    Column("attempt_id", Text, primary_key=True),
    # "1", "2", ... per attempt, dense; the previous ID is always one less.
    Column("record_id", BigInteger, primary_key=True),
    Column("record_key", Text, nullable=False),
    # SHA-256 of record_key: three 1 KiB IDs would overflow a PostgreSQL index
    # entry, two and a digest stay far below it.
    Column("key_digest", LargeBinary, nullable=False),
    # messages, literal_part, prefix or prepared; data holds its bytes (a
    # prefix as its JSON object); final only for a literal part.
    Column("body", String(16), nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("final", Integer, nullable=False),
    # The record's size in a seed page's JSON, so pages are cut without
    # re-encoding (docs/limits.md).
    Column("json_size", BigInteger, nullable=False),
    Index(None, "namespace", "run_id", "attempt_id", "key_digest", unique=True),
)

synchronous_runs = Table(
    "synchronous_runs",
    metadata,
    _namespace(),
    # A run StartSynchronousRun created (§9.2.5): its start kind is permanent,
    # so an engine start of the same ID is RUN_CONFLICT, and so is a
    # synchronous start of an engine-created run (no row here).
    Column("run_id", Text, primary_key=True),
    # The published seed's history end the run attached (part of its identity).
    Column("seed_end_id", Text, nullable=False),
)

# --- Namespaces (docs/namespaces.md) ---

namespaces = Table(
    "namespaces",
    metadata,
    Column("name", Text, primary_key=True),
    Column("state", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("description", Text, nullable=False, server_default=text("''")),
    Column("retain_ended_sessions_s", Double, nullable=True),
    Column("retain_sessionless_runs_s", Double, nullable=True),
    Column("quota_writes_per_s", Double, nullable=True),
    Column("quota_reads_per_s", Double, nullable=True),
    Column("quota_watch_streams", Integer, nullable=True),
    Column("quota_stored_bytes", BigInteger, nullable=True),
)

namespace_tombstones = Table(
    "namespace_tombstones",
    metadata,
    # A deleted namespace's name: never re-created while its data may remain.
    Column("name", Text, primary_key=True),
    Column("deleted_at", BigInteger, nullable=False),
)

# --- Quotas (docs/namespaces.md#quotas): no row of these is written by a call ---

quota_replicas = Table(
    "quota_replicas",
    metadata,
    # One row per serving replica, upserted by that replica alone every 2 s
    # while some namespace has a rate or watch_streams quota: how many replicas
    # share a rate, and each one's open Watch streams per namespace.
    Column("replica_id", Text, primary_key=True),
    # Grows by one per heartbeat: others judge a replica alive by seeing it
    # change on their own clock, never by comparing clocks of two machines.
    Column("beats", BigInteger, nullable=False),
    Column("seen_at", BigInteger, nullable=False),
    # JSON object: namespace -> Watch streams open on the replica.
    Column("streams", Text, nullable=False),
)

namespace_usage = Table(
    "namespace_usage",
    metadata,
    # The stored bytes of a namespace with a stored_bytes quota, recounted by
    # one replica at a time every --quota-recount-seconds.
    Column("name", Text, primary_key=True),
    Column("stored_bytes", BigInteger, nullable=False),
    Column("measured_at", BigInteger, nullable=False),
)

# --- Product memory (§12, D5): their own tables, no link to the runtime store ---

memory_runs = Table(
    "memory_runs",
    metadata,
    _namespace(),
    Column("agent_id", Text, primary_key=True),
    Column("run_id", Text, primary_key=True),
    # Events stored: the next event's position. Locked by appenders.
    Column("event_count", BigInteger, nullable=False),
)

memory_events = Table(
    "memory_events",
    metadata,
    _namespace(),
    Column("agent_id", Text, primary_key=True),
    Column("run_id", Text, primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("type", Text, nullable=False),
    Column("timestamp_s", BigInteger, nullable=False),
    Column("timestamp_ns", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("labels", Text, nullable=False),
)

memory_appends = Table(
    "memory_appends",
    metadata,
    _namespace(),
    Column("agent_id", Text, primary_key=True),
    Column("run_id", Text, primary_key=True),
    # SHA-256 of the idempotency key: three 1 KiB keys would overflow a
    # PostgreSQL index entry, two and a digest stay far below it.
    Column("key_digest", LargeBinary, primary_key=True),
    Column("idempotency_key", Text, nullable=False),
    Column("digest", LargeBinary, nullable=False),
    Column("first_position", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
)

context_keys = Table(
    "context_keys",
    metadata,
    _namespace(),
    Column("context_key", Text, primary_key=True),
    # The current snapshot version (0: none yet); locked by savers.
    Column("version", BigInteger, nullable=False),
    Column("saved_at", BigInteger, nullable=True),
    Column("transcript_count", BigInteger, nullable=False),
    # The last SaveContext or AppendTranscript of the key (server clock):
    # --retain-contexts deletes keys not written for that long.
    Column("written_at", BigInteger, nullable=False),
    Index(None, "namespace", "written_at", "context_key"),
)

context_versions = Table(
    "context_versions",
    metadata,
    _namespace(),
    Column("context_key", Text, primary_key=True),
    Column("version", BigInteger, primary_key=True),
    # A serialised runstore.v1.ContextSnapshot, byte for byte.
    Column("snapshot", LargeBinary, nullable=False),
    Column("saved_at", BigInteger, nullable=False),
)

context_transcript = Table(
    "context_transcript",
    metadata,
    _namespace(),
    Column("context_key", Text, primary_key=True),
    Column("position", BigInteger, primary_key=True),
    # A serialised runstore.v1.ContextMessage, byte for byte.
    Column("message", LargeBinary, nullable=False),
)

context_appends = Table(
    "context_appends",
    metadata,
    _namespace(),
    Column("context_key", Text, primary_key=True),
    Column("idempotency_key", Text, primary_key=True),
    Column("digest", LargeBinary, nullable=False),
    Column("first_position", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
)

# --- The schema's compatibility marker (docs/upgrades.md), written by migrations ---

schema_compat = Table(
    "runstore_schema_compat",
    metadata,
    # One row: id is always 1. Its other columns are read by every release
    # from 0.2.0 on, so they are never renamed or removed.
    Column("id", Integer, primary_key=True, autoincrement=False),
    # The revision the last migration run left the database at.
    Column("revision", Text, nullable=False),
    # The oldest compatibility level that can serve that revision.
    Column("min_compat_level", Integer, nullable=False),
    # The runstore-server version that migrated it (for messages).
    Column("migrated_by", Text, nullable=False),
    CheckConstraint("id = 1", name="one_row"),
)
