"""Alembic environment for runstore (invoked through ``runstore.server.db.migrate``).

The caller passes an open SQLAlchemy connection in ``config.attributes``, so the
same code migrates SQLite (aiosqlite) and PostgreSQL (asyncpg) and can hold a
lock around the whole upgrade. After each revision the compatibility marker is
replaced in that revision's transaction (``runstore.server.db.compat``).
"""

from __future__ import annotations

from alembic import context

from runstore.server.db.migrate import VERSION_TABLE, on_version_apply
from runstore.server.db.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    # Told after each revision is applied: the marker first, then the caller
    # (``runstore migrate`` prints it).
    on_version_apply=on_version_apply(
        context.script, connection, context.config.attributes.get("on_version_apply", ())
    ),
)
with context.begin_transaction():
    context.run_migrations()
