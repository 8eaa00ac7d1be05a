"""Product memory: the per-run memory store and the versioned context store.

Revision ID: 0002_product_memory
Revises: 0001_runtime_store
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_product_memory"
down_revision = "0001_runtime_store"
branch_labels = None
depends_on = None
min_compat_level = 1


def upgrade() -> None:
    op.create_table(
        "memory_runs",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("event_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", "run_id", name="pk_memory_runs"),
    )
    op.create_table(
        "memory_events",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", "run_id", "position", name="pk_memory_events"),
    )
    op.create_table(
        "memory_appends",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", "run_id", "idempotency_key", name="pk_memory_appends"),
    )
    op.create_table(
        "context_keys",
        sa.Column("context_key", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("saved_at", sa.BigInteger(), nullable=True),
        sa.Column("transcript_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("context_key", name="pk_context_keys"),
    )
    op.create_table(
        "context_versions",
        sa.Column("context_key", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("snapshot", sa.LargeBinary(), nullable=False),
        sa.Column("saved_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("context_key", "version", name="pk_context_versions"),
    )
    op.create_table(
        "context_transcript",
        sa.Column("context_key", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("context_key", "position", name="pk_context_transcript"),
    )
    op.create_table(
        "context_appends",
        sa.Column("context_key", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("context_key", "idempotency_key", name="pk_context_appends"),
    )


def downgrade() -> None:
    for table in (
        "context_appends",
        "context_transcript",
        "context_versions",
        "context_keys",
        "memory_appends",
        "memory_events",
        "memory_runs",
    ):
        op.drop_table(table)
