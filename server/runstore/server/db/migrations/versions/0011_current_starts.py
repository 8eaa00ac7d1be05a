"""Current-generation starts: three nullable columns of ``runs``.

* ``request_digest``: the 32 bytes the first engine start of the current
  generation bound to the run (docs/contract.md §10.6);
* ``successor_run_id``: the first current continuation admitted for a
  suspended run (§10.2);
* ``seed_end_id``: the published seed end a run started from.

All three stay NULL for runs a seed-era start created, which is what tells
the generations apart (D1). Nothing is backfilled, and a server of the
previous revision keeps working against this schema: it never reads the new
columns and its inserts leave them NULL.

Revision ID: 0011_current_starts
Revises: 0010_schema_compat
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_current_starts"
down_revision = "0010_schema_compat"
branch_labels = None
depends_on = None

min_compat_level = 1
"""Additive only: servers of the revision before this one may serve it."""


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("request_digest", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("successor_run_id", sa.Text(), nullable=True))
        batch.add_column(sa.Column("seed_end_id", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("seed_end_id")
        batch.drop_column("successor_run_id")
        batch.drop_column("request_digest")
