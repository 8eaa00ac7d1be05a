"""The schema's compatibility marker: which releases may serve this database.

``runstore_schema_compat`` holds one row, replaced by every migration run in
the transaction of each revision it applies: the revision, the oldest
compatibility level that can serve it (each revision's ``min_compat_level``)
and the runstore version that migrated it. A server that does not know the
database's revision serves it when its own level is high enough
(docs/upgrades.md).

Revision ID: 0010_schema_compat
Revises: 0009_quotas
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_schema_compat"
down_revision = "0009_quotas"
branch_labels = None
depends_on = None
min_compat_level = 1


def upgrade() -> None:
    op.create_table(
        "runstore_schema_compat",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("revision", sa.Text(), nullable=False),
        sa.Column("min_compat_level", sa.Integer(), nullable=False),
        sa.Column("migrated_by", sa.Text(), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_runstore_schema_compat_one_row"),
        sa.PrimaryKeyConstraint("id", name="pk_runstore_schema_compat"),
    )


def downgrade() -> None:
    op.drop_table("runstore_schema_compat")
