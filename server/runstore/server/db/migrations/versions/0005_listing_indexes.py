"""Indexes for ListSessions and ListRuns (§9.8): one per filter and order.

Each listing reads an index whose leading columns are its equality filters and
whose next columns are its order, so a page costs the same at any table size.

Revision ID: 0005_listing_indexes
Revises: 0003_derived_record_ids
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0005_listing_indexes"
down_revision = "0003_derived_record_ids"
branch_labels = None
depends_on = None
min_compat_level = 1

_INDEXES = {
    "sessions": (
        ("created_at", "session_id"),
        ("status", "created_at", "session_id"),
    ),
    "runs": (
        ("started_at", "run_id"),
        ("agent_id", "started_at", "run_id"),
        ("status", "started_at", "run_id"),
        ("session_id", "status", "started_at", "run_id"),
        ("agent_id", "status", "started_at", "run_id"),
    ),
}


def _name(table: str, columns: tuple[str, ...]) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def upgrade() -> None:
    for table, indexes in _INDEXES.items():
        for columns in indexes:
            op.create_index(_name(table, columns), table, list(columns))


def downgrade() -> None:
    for table, indexes in _INDEXES.items():
        for columns in reversed(indexes):
            op.drop_index(_name(table, columns), table_name=table)
