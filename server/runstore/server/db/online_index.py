"""An index built on a table in use, for migrations (docs/upgrades.md#an-index-on-a-table-in-use).

A plain ``CREATE INDEX`` on PostgreSQL holds a lock that stops every write to the
table for the whole build, which would stop the replicas still serving during a
rolling upgrade. ``CREATE INDEX CONCURRENTLY`` lets writes go on, but cannot run
in a transaction, and when it is interrupted (a timeout, a cancel, a lost
connection) it leaves an invalid index of that name behind, which a re-run drops
before it builds again. SQLite has one writer at a time anyway: there it is a
plain ``CREATE INDEX``.

Alembic's autocommit block commits the revisions before it, so a revision that
calls this does nothing else: a re-run starts that revision over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from alembic import op
from sqlalchemy import text

LOCK_TIMEOUT_MS: Final = 60_000
"""How long the build waits for each lock: far longer than any runstore
transaction (bounded by --pg-statement-timeout), short enough that a session
left idle in a transaction on the table stops the migration with an error
instead of holding it forever. Writes go on while it waits."""

STATEMENT_TIMEOUT_MS: Final = 0
"""No bound on the build itself: it reads the whole table, however large, and
writes are not held up meanwhile (a role's own statement_timeout is overridden)."""

_VALIDITY: Final = text(
    "SELECT i.indisvalid FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
    "WHERE c.relname = :name AND c.relnamespace = current_schema()::regnamespace"
)


def create_index_online(
    name: str,
    table: str,
    columns: Sequence[str],
    *,
    unique: bool = False,
    where: str | None = None,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
) -> None:
    """Creates index ``name`` on ``table`` (partial when ``where`` is given);
    on PostgreSQL concurrently, after dropping an invalid leftover of the same
    name. A valid one is kept as it is."""
    context = op.get_context()
    partial: dict[str, Any] = (
        {} if where is None else {"sqlite_where": text(where), "postgresql_where": text(where)}
    )
    if context.dialect.name != "postgresql":
        op.create_index(name, table, list(columns), unique=unique, **partial)
        return
    quoted = context.dialect.identifier_preparer.quote(name)
    with context.autocommit_block():
        # Session settings, not SET LOCAL: there is no transaction. On a failure the
        # run ends and its connection is closed, so nothing after inherits them.
        op.execute(text(f"SET lock_timeout = {int(lock_timeout_ms)}"))
        op.execute(text(f"SET statement_timeout = {int(statement_timeout_ms)}"))
        valid = op.get_bind().execute(_VALIDITY, {"name": name}).scalar()
        if valid is False:
            op.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {quoted}"))
        if valid is not True:
            op.create_index(
                name,
                table,
                list(columns),
                unique=unique,
                postgresql_concurrently=True,
                **partial,
            )
        op.execute(text("RESET lock_timeout"))
        op.execute(text("RESET statement_timeout"))
