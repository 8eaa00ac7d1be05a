"""Seeds and preparations (docs/contract.md §9.7): new tables only.

* ``seed_operations``: the original operation of a destination run ID and the
  attempt whose publication was accepted; every seed mutation locks its row.
* ``seed_attempts``: each upload's declaration, state and positions.
* ``seed_records``: each attempt's records.
* ``synchronous_runs``: the runs StartSynchronousRun created, with the seed
  end each attached.

Every row carries its namespace, as every other table's does. A server of an
earlier release never reads these tables, so it can still serve the schema.

Revision ID: 0012_run_seeds
Revises: 0011_current_starts
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_run_seeds"
down_revision = "0011_current_starts"
branch_labels = None
depends_on = None
min_compat_level = 1


def _namespace() -> sa.Column[str]:
    return sa.Column("namespace", sa.Text(), nullable=False, server_default=sa.text("'default'"))


def upgrade() -> None:
    op.create_table(
        "seed_operations",
        _namespace(),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("command_id", sa.Text(), nullable=False),
        sa.Column("published_attempt_id", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "run_id", name="pk_seed_operations"),
    )
    op.create_index(
        "ix_seed_operations_namespace_session_id",
        "seed_operations",
        ["namespace", "session_id"],
    )
    op.create_table(
        "seed_attempts",
        _namespace(),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("source_run_id", sa.Text(), nullable=False),
        sa.Column("source_end_id", sa.Text(), nullable=False),
        sa.Column("exclude_reasoning", sa.Integer(), nullable=False),
        sa.Column("rendered_prompts", sa.Text(), nullable=False),
        sa.Column("source_end", sa.Text(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("end_id", sa.BigInteger(), nullable=False),
        sa.Column("seed_end_id", sa.BigInteger(), nullable=False),
        sa.Column("prepared_bytes", sa.BigInteger(), nullable=False),
        sa.Column("has_source", sa.Integer(), nullable=False),
        sa.Column("literal_open", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "run_id", "attempt_id", name="pk_seed_attempts"),
    )
    op.create_index(
        "ix_seed_attempts_namespace_state_created_at",
        "seed_attempts",
        ["namespace", "state", "created_at"],
    )
    op.create_table(
        "seed_records",
        _namespace(),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("record_id", sa.BigInteger(), nullable=False),
        sa.Column("record_key", sa.Text(), nullable=False),
        sa.Column("key_digest", sa.LargeBinary(), nullable=False),
        sa.Column("body", sa.String(16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("final", sa.Integer(), nullable=False),
        sa.Column("json_size", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "namespace", "run_id", "attempt_id", "record_id", name="pk_seed_records"
        ),
    )
    op.create_index(
        "ix_seed_records_namespace_run_id_attempt_id_key_digest",
        "seed_records",
        ["namespace", "run_id", "attempt_id", "key_digest"],
        unique=True,
    )
    op.create_table(
        "synchronous_runs",
        _namespace(),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seed_end_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "run_id", name="pk_synchronous_runs"),
    )


def downgrade() -> None:
    op.drop_table("synchronous_runs")
    op.drop_table("seed_records")
    op.drop_table("seed_attempts")
    op.drop_table("seed_operations")
