"""Record IDs and session positions come from the records index, not counters.

The next ID of a run (and position of a session) is read as the largest one
plus one inside the insert, so the runs and sessions rows are no longer
rewritten by every append.

Revision ID: 0003_derived_record_ids
Revises: 0002_product_memory
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_derived_record_ids"
down_revision = "0002_product_memory"
branch_labels = None
depends_on = None
min_compat_level = 1


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("record_count")
    with op.batch_alter_table("sessions") as sessions:
        sessions.drop_column("record_count")


def downgrade() -> None:
    with op.batch_alter_table("sessions") as sessions:
        sessions.add_column(
            sa.Column("record_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
    with op.batch_alter_table("runs") as runs:
        runs.add_column(
            sa.Column("record_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
