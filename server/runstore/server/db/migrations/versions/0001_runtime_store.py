"""Runtime store: sessions, tombstones, runs and records.

Revision ID: 0001_runtime_store
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_runtime_store"
down_revision = None
branch_labels = None
depends_on = None
min_compat_level = 1


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("record_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_sessions"),
    )
    op.create_table(
        "session_tombstones",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("purged_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_session_tombstones"),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("parent_run_id", sa.Text(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("start_outcome", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cancellation_reason", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("start_key", sa.Text(), nullable=False),
        sa.Column("parent_link_key", sa.Text(), nullable=False),
        sa.Column("cancellation_key", sa.Text(), nullable=False),
        sa.Column("suspension_key", sa.Text(), nullable=False),
        sa.Column("terminal_key", sa.Text(), nullable=False),
        sa.Column("checkpoint_id", sa.Text(), nullable=True),
        sa.Column("checkpoint_data", sa.LargeBinary(), nullable=True),
        sa.Column("record_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_index(
        "ix_runs_session_id_started_at_run_id", "runs", ["session_id", "started_at", "run_id"]
    )
    op.create_table(
        "records",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("record_id", sa.BigInteger(), nullable=False),
        sa.Column("event_key", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("turn_id", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("payload_size", sa.Integer(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("session_position", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "record_id", name="pk_records"),
    )
    op.create_index("ix_records_run_id_event_key", "records", ["run_id", "event_key"], unique=True)
    op.create_index(
        "ix_records_session_id_session_position",
        "records",
        ["session_id", "session_position"],
        unique=True,
        sqlite_where=sa.text("session_position IS NOT NULL"),
        postgresql_where=sa.text("session_position IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("records")
    op.drop_table("runs")
    op.drop_table("session_tombstones")
    op.drop_table("sessions")
