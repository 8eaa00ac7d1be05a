"""The tests' one home for a database of each backend and an in-process server
over it: the parameters a module fixture takes (``BACKENDS``), an empty
database's URL (``database``), a migrated and started ``Database``
(``opened``), and a server built as ``runstore serve`` builds it (``served``).

A fixture written ``@pytest.fixture(scope="module", params=BACKENDS)`` is
counted per backend in the run's closing tally (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from runstore.server.core.ports import Database
from runstore.server.db import migrate as schema
from tests import postgres
from tests.support import Store

SQLITE = "sqlite"
POSTGRES = "postgres"

BACKENDS = [
    pytest.param(SQLITE, id=SQLITE),
    pytest.param(POSTGRES, id=POSTGRES, marks=pytest.mark.postgres),
]
"""The parameters of a per-backend fixture: PostgreSQL's marked ``postgres``."""


@asynccontextmanager
async def database(backend: str, directory: Path, name: str = "runstore") -> AsyncIterator[str]:
    """An empty database's URL: a new SQLite file in ``directory``, or a fresh
    database on the run's PostgreSQL server (dropped afterwards)."""
    if backend == SQLITE:
        yield f"sqlite:///{directory / f'{name}.db'}"
        return
    assert backend == POSTGRES, backend
    async with postgres.fresh_database(f"runstore_{name.replace('-', '_')}") as url:
        yield url


@dataclass
class Opened:
    db: Database
    url: str

    @property
    def postgres_url(self) -> str:
        """The PostgreSQL URL (to watch its locks from outside), "" on SQLite."""
        return self.url if self.url.startswith("postgresql") else ""


@asynccontextmanager
async def opened(
    backend: str,
    directory: Path,
    name: str = "runstore",
    *,
    pool_max: int = 2,
    before_start: Callable[[Any], None] | None = None,
) -> AsyncIterator[Opened]:
    """A migrated database of ``backend``, its ``Database`` started (its
    backend's default options; a PostgreSQL pool of 1 to ``pool_max``);
    ``before_start`` adjusts it before it starts."""
    from runstore.server.db.postgres import PostgresDatabase, PostgresOptions
    from runstore.server.db.sqlite import SqliteDatabase, SqliteOptions

    async with database(backend, directory, name) as url:
        await schema.upgrade(url)
        db: SqliteDatabase | PostgresDatabase
        if backend == SQLITE:
            db = SqliteDatabase(directory / f"{name}.db", SqliteOptions())
        else:
            db = PostgresDatabase(url, PostgresOptions(pool_min=1, pool_max=pool_max))
        if before_start is not None:
            before_start(db)
        await db.start()
        try:
            yield Opened(db, url)
        finally:
            await db.close()


@dataclass
class Served:
    """An in-process server: its address, a channel's stubs, the stores it serves."""

    target: str
    store: Store
    stores: Any
    """The ``runstore.server.app.Stores`` it serves."""
    db: Database
    database_url: str


@asynccontextmanager
async def served(
    database_url: str,
    *,
    stores: Callable[[Any, Any], Any] | None = None,
    telemetry: Any = None,
    migrate: bool = True,
    **settings: Any,
) -> AsyncIterator[Served]:
    """A server built as ``runstore serve`` builds it, in this process, on an
    ephemeral port over ``database_url`` (migrated first unless ``migrate`` is
    false, as ``runstore serve --migrate`` does): ``settings`` are further
    ``ServerConfig`` fields; ``stores(stores, opened)`` (``opened``: its
    ``db.opening.OpenDatabase``) replaces some of its store
    cores (a fake clock, a small purge batch) before it is built. Stops it, its
    namespace purges and its quota keeper afterwards."""
    from runstore.server.app import build_server, create_stores, open_database
    from runstore.server.config import ServerConfig

    config = ServerConfig(
        listen="127.0.0.1:0", database_url=database_url, migrate=migrate, **settings
    )
    async with AsyncExitStack() as stack:
        # Measured and counted as ``telemetry`` asks, as ``runstore serve`` does.
        opened = await stack.enter_async_context(open_database(config, telemetry))
        built = create_stores(config, opened)
        if stores is not None:
            built = stores(built, opened)
        running = await build_server(config, built, telemetry=telemetry)
        stack.push_async_callback(running.server.stop, None)
        if built.quotas is not None:
            stack.push_async_callback(built.quotas.stop)
        if built.namespaces is not None:
            stack.push_async_callback(built.namespaces.close)
        target = f"127.0.0.1:{running.port}"
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        yield Served(target, Store(channel, target=target), built, opened.calls, database_url)
