"""Quotas: the replicas' heartbeats and the namespaces' measured stored bytes.

* ``quota_replicas``: one row per serving replica (its own, upserted every
  2 s while a namespace has a rate or watch_streams quota): the replicas alive
  share a rate quota, and each publishes its open Watch streams per namespace.
* ``namespace_usage``: the stored bytes of each namespace with a stored_bytes
  quota, recounted by one replica at a time (docs/namespaces.md#quotas).

Neither is written on the path of a call, so no namespace's appends wait on
one counter row.

Revision ID: 0009_quotas
Revises: 0008_namespaces
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_quotas"
down_revision = "0008_namespaces"
branch_labels = None
depends_on = None
min_compat_level = 1


def upgrade() -> None:
    op.create_table(
        "quota_replicas",
        sa.Column("replica_id", sa.Text(), nullable=False),
        sa.Column("beats", sa.BigInteger(), nullable=False),
        sa.Column("seen_at", sa.BigInteger(), nullable=False),
        sa.Column("streams", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id", name="pk_quota_replicas"),
    )
    op.create_table(
        "namespace_usage",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
        sa.Column("measured_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_namespace_usage"),
    )


def downgrade() -> None:
    op.drop_table("namespace_usage")
    op.drop_table("quota_replicas")
