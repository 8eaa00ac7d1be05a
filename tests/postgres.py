"""Throwaway PostgreSQL databases for tests (RUNSTORE_TEST_POSTGRES_URL).

Every test session gets freshly created databases and drops them afterwards,
so runs never see each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from runstore.server.db.postgres import asyncpg_dsn

POSTGRES_URL = os.environ.get("RUNSTORE_TEST_POSTGRES_URL", "")
REQUIRED = os.environ.get("RUNSTORE_REQUIRE_POSTGRES", "") not in ("", "0")
SKIP_REASON = "RUNSTORE_TEST_POSTGRES_URL is not set: PostgreSQL tests skipped"


def require_postgres() -> str:
    """The server URL, or skip (fail where CI made PostgreSQL mandatory)."""
    if not POSTGRES_URL:
        if REQUIRED:
            pytest.fail("RUNSTORE_REQUIRE_POSTGRES is set but RUNSTORE_TEST_POSTGRES_URL is not")
        pytest.skip(SKIP_REASON)
    return POSTGRES_URL


@asynccontextmanager
async def fresh_database(prefix: str = "runstore_test") -> AsyncIterator[str]:
    """Creates an empty database next to RUNSTORE_TEST_POSTGRES_URL's; yields its URL."""
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
