"""Times exact over years 1 to 9999; memory appends keyed by a digest of the key.

Times were BIGINT nanoseconds, which end at 2262-04-11. Session and memory
event times (full precision) become ``<name>_s`` + ``<name>_ns``;
record and start times, whole milliseconds by V1/V3, become ``<name>_ms``.
Existing rows are converted exactly; a record or start time that is not a
whole millisecond stops the migration rather than lose its nanoseconds.

``memory_appends`` is keyed by the SHA-256 of the idempotency key, so that
its primary key stays far below PostgreSQL's index entry limit when agent,
run and key are each 1 KiB.

The listing indexes of 0005 on these times are rebuilt on the new columns.

Revision ID: 0006_exact_times
Revises: 0005_listing_indexes
Create Date: 2026-12-01
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0006_exact_times"
down_revision = "0005_listing_indexes"
branch_labels = None
depends_on = None
min_compat_level = 1

_NANOS_PER_SECOND = 1_000_000_000
_NANOS_PER_MILLI = 1_000_000


def _floor_seconds(column: str) -> str:
    """SQL for floor(column / 1e9); both dialects truncate integer division."""
    return (
        f"CASE WHEN {column} < 0 AND {column} % {_NANOS_PER_SECOND} <> 0 "
        f"THEN {column} / {_NANOS_PER_SECOND} - 1 ELSE {column} / {_NANOS_PER_SECOND} END"
    )


def _split(table: str, column: str, *, nullable: bool) -> None:
    """``column`` (nanoseconds) -> ``column_s`` + ``column_ns``."""
    with op.batch_alter_table(table) as batch:
        batch.add_column(sa.Column(f"{column}_s", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column(f"{column}_ns", sa.Integer(), nullable=True))
    seconds = _floor_seconds(column)
    op.execute(
        f"UPDATE {table} SET {column}_s = {seconds}, "
        f"{column}_ns = {column} - ({seconds}) * {_NANOS_PER_SECOND}"
    )
    with op.batch_alter_table(table) as batch:
        if not nullable:
            batch.alter_column(f"{column}_s", existing_type=sa.BigInteger(), nullable=False)
            batch.alter_column(f"{column}_ns", existing_type=sa.Integer(), nullable=False)
        batch.drop_column(column)


def _join(table: str, column: str, *, nullable: bool) -> None:
    with op.batch_alter_table(table) as batch:
        batch.add_column(sa.Column(column, sa.BigInteger(), nullable=True))
    op.execute(f"UPDATE {table} SET {column} = {column}_s * {_NANOS_PER_SECOND} + {column}_ns")
    with op.batch_alter_table(table) as batch:
        if not nullable:
            batch.alter_column(column, existing_type=sa.BigInteger(), nullable=False)
        batch.drop_column(f"{column}_s")
        batch.drop_column(f"{column}_ns")


def _to_millis(table: str, column: str, new: str) -> None:
    bad = op.get_bind().execute(
        sa.text(f"SELECT count(*) FROM {table} WHERE {column} % {_NANOS_PER_MILLI} <> 0")
    )
    if bad.scalar_one():
        raise RuntimeError(f"{table}.{column} holds times that are not whole milliseconds")
    op.execute(f"UPDATE {table} SET {column} = {column} / {_NANOS_PER_MILLI}")
    with op.batch_alter_table(table) as batch:
        batch.alter_column(column, new_column_name=new, existing_type=sa.BigInteger())


def _from_millis(table: str, column: str, old: str) -> None:
    with op.batch_alter_table(table) as batch:
        batch.alter_column(column, new_column_name=old, existing_type=sa.BigInteger())
    op.execute(f"UPDATE {table} SET {old} = {old} * {_NANOS_PER_MILLI}")


def _digest_memory_append_keys() -> None:
    with op.batch_alter_table("memory_appends") as batch:
        batch.add_column(sa.Column("key_digest", sa.LargeBinary(), nullable=True))
    bind = op.get_bind()
    appends = sa.table(
        "memory_appends",
        sa.column("agent_id", sa.Text()),
        sa.column("run_id", sa.Text()),
        sa.column("idempotency_key", sa.Text()),
        sa.column("key_digest", sa.LargeBinary()),
    )
    rows = bind.execute(sa.select(appends.c.agent_id, appends.c.run_id, appends.c.idempotency_key))
    for agent_id, run_id, key in rows.all():
        bind.execute(
            appends.update()
            .where(
                appends.c.agent_id == agent_id,
                appends.c.run_id == run_id,
                appends.c.idempotency_key == key,
            )
            .values(key_digest=hashlib.sha256(key.encode("utf-8")).digest())
        )
    with op.batch_alter_table("memory_appends") as batch:
        batch.alter_column("key_digest", existing_type=sa.LargeBinary(), nullable=False)
        batch.drop_constraint("pk_memory_appends", type_="primary")
        batch.create_primary_key("pk_memory_appends", ["agent_id", "run_id", "key_digest"])


# Indexes on the times that change: (table, columns before, columns after).
_TIME_INDEXES = (
    ("sessions", ("created_at", "session_id"), ("created_at_s", "created_at_ns", "session_id")),
    (
        "sessions",
        ("status", "created_at", "session_id"),
        ("status", "created_at_s", "created_at_ns", "session_id"),
    ),
    *(
        ("runs", (*lead, "started_at", "run_id"), (*lead, "started_at_ms", "run_id"))
        for lead in (
            ("session_id",),
            (),
            ("agent_id",),
            ("status",),
            ("session_id", "status"),
            ("agent_id", "status"),
        )
    ),
)


def _index_name(table: str, columns: tuple[str, ...]) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def _drop_indexes(*, upgrading: bool) -> None:
    for table, before, after in _TIME_INDEXES:
        columns = before if upgrading else after
        op.drop_index(_index_name(table, columns), table_name=table)


def _create_indexes(*, upgrading: bool) -> None:
    for table, before, after in _TIME_INDEXES:
        columns = after if upgrading else before
        op.create_index(_index_name(table, columns), table, list(columns))


def upgrade() -> None:
    _drop_indexes(upgrading=True)
    _split("sessions", "created_at", nullable=False)
    _split("sessions", "ended_at", nullable=True)
    _split("memory_events", "timestamp", nullable=False)
    _to_millis("runs", "started_at", "started_at_ms")
    _to_millis("records", "timestamp", "timestamp_ms")
    _create_indexes(upgrading=True)
    _digest_memory_append_keys()


def downgrade() -> None:
    with op.batch_alter_table("memory_appends") as batch:
        batch.drop_constraint("pk_memory_appends", type_="primary")
        batch.create_primary_key("pk_memory_appends", ["agent_id", "run_id", "idempotency_key"])
        batch.drop_column("key_digest")
    _drop_indexes(upgrading=False)
    _from_millis("records", "timestamp_ms", "timestamp")
    _from_millis("runs", "started_at_ms", "started_at")
    _join("memory_events", "timestamp", nullable=False)
    _join("sessions", "ended_at", nullable=True)
    _join("sessions", "created_at", nullable=False)
    _create_indexes(upgrading=False)
