"""A run's children in start order: a partial index of ``runs`` for ListRuns'
``parent_run_id`` (docs/contract.md §9.8.2).

Roots (most runs) are not in it, so it costs a run start nothing unless the run
has a parent. Built online (``db.online_index``): on PostgreSQL concurrently,
so the replicas still serving during a rolling upgrade go on writing runs while
it is built.

Additive: servers of the previous revision may serve this schema; they never
read the index and keep it current as they insert runs.

Revision ID: 0014_run_children
Revises: 0013_run_failures
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

from runstore.server.db.online_index import create_index_online

revision = "0014_run_children"
down_revision = "0013_run_failures"
branch_labels = None
depends_on = None

min_compat_level = 1
"""Additive only: servers of the revision before this one may serve it."""

NAME = "ix_runs_namespace_parent_run_id_started_at_ms_run_id"
CHILDREN_ONLY = "parent_run_id <> ''"
"""As ``schema.CHILDREN_ONLY`` (a migration keeps its own copy: it must not
change when the schema module does)."""


def upgrade() -> None:
    create_index_online(
        NAME,
        "runs",
        ("namespace", "parent_run_id", "started_at_ms", "run_id"),
        where=CHILDREN_ONLY,
    )


def downgrade() -> None:
    op.drop_index(NAME, table_name="runs")
