"""Retention: run tombstones, finish times of runs, last writes of context keys.

* ``run_tombstones``: sessionless runs deleted by retention keep their ID here,
  so a delayed retry of their start answers RUN_PURGED (docs/contract.md
  §9.10.2) instead of re-creating them.
* ``runs.finished_at_ms``: the timestamp of the record that ended a run
  (completed, failed, canceled), backfilled from each ended run's terminal
  record; sessionless retention cuts on it.
* ``context_keys.written_at``: the last SaveContext or AppendTranscript of a
  key; ``--retain-contexts`` cuts on it. Backfilled with the key's last save,
  or, for a key that only ever had transcript appends (no time is known), the
  time of this migration: such keys are kept a full retention period from now.

Revision ID: 0007_retention
Revises: 0006_exact_times
Create Date: 2026-12-01
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0007_retention"
down_revision = "0006_exact_times"
branch_labels = None
depends_on = None
min_compat_level = 1

_SESSIONLESS_ROOTS = "session_id = '' AND parent_run_id = ''"
_SESSIONLESS_CHILDREN = "session_id = '' AND parent_run_id <> ''"


def upgrade() -> None:
    op.create_table(
        "run_tombstones",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("purged_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_tombstones"),
    )

    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("finished_at_ms", sa.BigInteger(), nullable=True))
    op.execute(
        "UPDATE runs SET finished_at_ms = (SELECT records.timestamp_ms FROM records "
        "WHERE records.run_id = runs.run_id AND records.event_key = runs.terminal_key) "
        "WHERE status IN ('completed', 'failed', 'canceled') AND terminal_key <> ''"
    )
    op.create_index(
        "ix_runs_finished_at_ms_run_id",
        "runs",
        ["finished_at_ms", "run_id"],
        sqlite_where=sa.text(_SESSIONLESS_ROOTS),
        postgresql_where=sa.text(_SESSIONLESS_ROOTS),
    )
    op.create_index(
        "ix_runs_parent_run_id",
        "runs",
        ["parent_run_id"],
        sqlite_where=sa.text(_SESSIONLESS_CHILDREN),
        postgresql_where=sa.text(_SESSIONLESS_CHILDREN),
    )

    with op.batch_alter_table("context_keys") as batch:
        batch.add_column(sa.Column("written_at", sa.BigInteger(), nullable=True))
    op.get_bind().execute(
        sa.text("UPDATE context_keys SET written_at = COALESCE(saved_at, :now)"),
        {"now": time.time_ns()},
    )
    with op.batch_alter_table("context_keys") as batch:
        batch.alter_column("written_at", existing_type=sa.BigInteger(), nullable=False)
    op.create_index(
        "ix_context_keys_written_at_context_key", "context_keys", ["written_at", "context_key"]
    )


def downgrade() -> None:
    op.drop_index("ix_context_keys_written_at_context_key", table_name="context_keys")
    with op.batch_alter_table("context_keys") as batch:
        batch.drop_column("written_at")
    op.drop_index("ix_runs_parent_run_id", table_name="runs")
    op.drop_index("ix_runs_finished_at_ms_run_id", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("finished_at_ms")
    op.drop_table("run_tombstones")
