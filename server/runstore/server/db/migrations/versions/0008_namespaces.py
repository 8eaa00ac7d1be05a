"""Namespaces: the namespace is the first column of every key (docs/namespaces.md).

Every table of sessions, runs, records, tombstones, product memory and
contexts gains ``namespace TEXT NOT NULL DEFAULT 'default'``: existing rows
move into the namespace ``default``. It becomes the first column of each
primary key and of every index, so the same IDs in two namespaces are two
objects and a listing reads one namespace's part of its index in order.
Creates ``namespaces`` (with the row of ``default``, which always exists) and
``namespace_tombstones``.

The downgrade refuses while any namespace but ``default`` holds data: its
rows would collide with those of ``default``.

Revision ID: 0008_namespaces
Revises: 0007_retention
Create Date: 2026-12-02
"""

from __future__ import annotations

import time
from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

revision = "0008_namespaces"
down_revision = "0007_retention"
branch_labels = None
depends_on = None
min_compat_level = 1

_DEFAULT = "default"


class _Index(NamedTuple):
    table: str
    columns: tuple[str, ...]
    unique: bool = False
    where: str | None = None
    namespaced_name: str | None = None
    """An explicit name where the conventional one passes PostgreSQL's 63 characters."""

    def name(self, *, namespaced: bool) -> str:
        if namespaced and self.namespaced_name:
            return self.namespaced_name
        columns = ("namespace", *self.columns) if namespaced else self.columns
        return f"ix_{self.table}_{'_'.join(columns)}"

    def create(self, *, namespaced: bool) -> None:
        columns = ["namespace", *self.columns] if namespaced else list(self.columns)
        where = None if self.where is None else sa.text(self.where)
        op.create_index(
            self.name(namespaced=namespaced),
            self.table,
            columns,
            unique=self.unique,
            sqlite_where=where,
            postgresql_where=where,
        )

    def drop(self, *, namespaced: bool) -> None:
        op.drop_index(self.name(namespaced=namespaced), table_name=self.table)


_PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("session_id",),
    "session_tombstones": ("session_id",),
    "run_tombstones": ("run_id",),
    "runs": ("run_id",),
    "records": ("run_id", "record_id"),
    "memory_runs": ("agent_id", "run_id"),
    "memory_events": ("agent_id", "run_id", "position"),
    "memory_appends": ("agent_id", "run_id", "key_digest"),
    "context_keys": ("context_key",),
    "context_versions": ("context_key", "version"),
    "context_transcript": ("context_key", "position"),
    "context_appends": ("context_key", "idempotency_key"),
}
"""Each namespaced table's primary key before this revision."""

_INDEXES = (
    _Index("sessions", ("created_at_s", "created_at_ns", "session_id")),
    _Index(
        "sessions",
        ("status", "created_at_s", "created_at_ns", "session_id"),
        namespaced_name="ix_sessions_namespace_status_created_at_session_id",
    ),
    _Index("runs", ("session_id", "started_at_ms", "run_id")),
    _Index("runs", ("started_at_ms", "run_id")),
    _Index("runs", ("agent_id", "started_at_ms", "run_id")),
    _Index("runs", ("status", "started_at_ms", "run_id")),
    _Index("runs", ("session_id", "status", "started_at_ms", "run_id")),
    _Index("runs", ("agent_id", "status", "started_at_ms", "run_id")),
    _Index("runs", ("finished_at_ms", "run_id"), where="session_id = '' AND parent_run_id = ''"),
    _Index("runs", ("parent_run_id",), where="session_id = '' AND parent_run_id <> ''"),
    _Index("records", ("run_id", "event_key"), unique=True),
    _Index(
        "records",
        ("session_id", "session_position"),
        unique=True,
        where="session_position IS NOT NULL",
    ),
    _Index("context_keys", ("written_at", "context_key")),
)


def _rekey(table: str, key: tuple[str, ...]) -> None:
    with op.batch_alter_table(table) as batch:
        batch.add_column(
            sa.Column(
                "namespace", sa.Text(), nullable=False, server_default=sa.text(f"'{_DEFAULT}'")
            )
        )
        batch.drop_constraint(f"pk_{table}", type_="primary")
        batch.create_primary_key(f"pk_{table}", ["namespace", *key])


def _unkey(table: str, key: tuple[str, ...]) -> None:
    with op.batch_alter_table(table) as batch:
        batch.drop_constraint(f"pk_{table}", type_="primary")
        batch.create_primary_key(f"pk_{table}", list(key))
        batch.drop_column("namespace")


def upgrade() -> None:
    for index in _INDEXES:
        index.drop(namespaced=False)
    for table, key in _PRIMARY_KEYS.items():
        _rekey(table, key)
    for index in _INDEXES:
        index.create(namespaced=True)
    namespaces = op.create_table(
        "namespaces",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("retain_ended_sessions_s", sa.Double(), nullable=True),
        sa.Column("retain_sessionless_runs_s", sa.Double(), nullable=True),
        sa.Column("quota_writes_per_s", sa.Double(), nullable=True),
        sa.Column("quota_reads_per_s", sa.Double(), nullable=True),
        sa.Column("quota_watch_streams", sa.Integer(), nullable=True),
        sa.Column("quota_stored_bytes", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_namespaces"),
    )
    now = time.time_ns()
    op.bulk_insert(
        namespaces, [{"name": _DEFAULT, "state": "active", "created_at": now, "updated_at": now}]
    )
    op.create_table(
        "namespace_tombstones",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("deleted_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_namespace_tombstones"),
    )


def downgrade() -> None:
    bind = op.get_bind()
    for table in _PRIMARY_KEYS:
        others = bind.execute(
            sa.text(f"SELECT 1 FROM {table} WHERE namespace <> :default LIMIT 1"),
            {"default": _DEFAULT},
        ).first()
        if others is not None:
            raise RuntimeError(
                f"{table} holds rows of a namespace other than {_DEFAULT!r}: "
                "delete those namespaces before downgrading"
            )
    op.drop_table("namespace_tombstones")
    op.drop_table("namespaces")
    for index in _INDEXES:
        index.drop(namespaced=True)
    for table, key in _PRIMARY_KEYS.items():
        _unkey(table, key)
    for index in _INDEXES:
        index.create(namespaced=False)
