"""Fixtures: one real runstore server per backend, reached through a real channel.

The contract suite takes the ``store`` fixture and runs unchanged on every
backend. Tests share a server per backend and isolate themselves with unique
session and run IDs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from runstore.server.app import build_server, create_store, open_database
from runstore.server.config import ServerConfig
from tests.support import Store

POSTGRES_URL = os.environ.get("RUNSTORE_TEST_POSTGRES_URL", "")

BACKENDS = [pytest.param("sqlite", id="sqlite")]


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'runstore.db'}"


@pytest.fixture(scope="session", params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Store]:
    url = sqlite_url(tmp_path_factory.mktemp(request.param))
    config = ServerConfig(listen="127.0.0.1:0", database_url=url, migrate=True)
    async with open_database(config) as db:
        running = await build_server(config, create_store(config, db))
        target = f"127.0.0.1:{running.port}"
        async with grpc.aio.insecure_channel(target) as channel:
            yield Store(channel, target=target)
        await running.server.stop(None)
