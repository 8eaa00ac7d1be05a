"""A failed run's failure on the run: one nullable column of ``runs``.

``failure`` holds the JSON object ``{message, kind, code, retryable}`` of the
``failure`` in the run's ending ``run_completed`` record (docs/contract.md
§5.3), so that listings and RunMeta show why a run failed without reading its
records. The server writes it when a run fails; this migration backfills it for
every run that failed before, from its terminal record (the record whose event
key is the run's ``terminal_key``), in batches of ``BATCH`` runs.

Additive: servers of the previous revision may serve this schema. They never
write the column, so a run one of them fails during a rolling upgrade has no
stored failure (docs/upgrades.md); its record still carries it.

Revision ID: 0013_run_failures
Revises: 0012_run_seeds
Create Date: 2026-12-05
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013_run_failures"
down_revision = "0012_run_seeds"
branch_labels = None
depends_on = None

min_compat_level = 1
"""Additive only: servers of the revision before this one may serve it."""

BATCH = 1000
"""Failed runs backfilled per statement pair."""

_SELECT = sa.text(
    "SELECT runs.namespace, runs.run_id, records.payload FROM runs "
    "JOIN records ON records.namespace = runs.namespace AND records.run_id = runs.run_id "
    "AND records.event_key = runs.terminal_key "
    "WHERE runs.status = 'failed' AND runs.failure IS NULL "
    "AND (runs.namespace > :namespace OR (runs.namespace = :namespace AND runs.run_id > :run_id)) "
    "ORDER BY runs.namespace, runs.run_id LIMIT :limit"
)
_UPDATE = sa.text(
    "UPDATE runs SET failure = :failure WHERE namespace = :namespace AND run_id = :run_id"
)


def failure_text(payload: Any) -> str | None:
    """The stored form of a ``run_completed`` payload's failure; None when the
    payload carries none (it then stays NULL)."""
    try:
        failure = json.loads(bytes(payload)).get("failure")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    if not isinstance(failure, dict):
        return None

    def text(name: str) -> str:
        value = failure.get(name, "")
        return value if isinstance(value, str) else ""

    return json.dumps(
        {
            "message": text("message"),
            "kind": text("kind"),
            "code": text("code"),
            "retryable": failure.get("retryable") is True,
        },
        ensure_ascii=False,
    )


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("failure", sa.Text(), nullable=True))
    connection = op.get_bind()
    position = ("", "")
    while True:
        rows = connection.execute(
            _SELECT, {"namespace": position[0], "run_id": position[1], "limit": BATCH}
        ).all()
        updates = [
            {"namespace": row[0], "run_id": row[1], "failure": text}
            for row in rows
            if (text := failure_text(row[2])) is not None
        ]
        if updates:
            connection.execute(_UPDATE, updates)
        if len(rows) < BATCH:
            return
        position = (rows[-1][0], rows[-1][1])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("failure")
