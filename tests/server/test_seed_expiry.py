"""Seed attempts begun and never published, and abandoned preparations,
expire after ``--seed-attempt-ttl`` (docs/configuration.md), counted by
``runstore_seed_attempts_expired_total``; published seeds stay."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from runstore.server.app import create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.core.store import RuntimeStore
from runstore.server.metrics import Metrics
from runstore.server.seed_expiry import SeedExpiry
from runstore.v1 import seeds_pb2 as sd
from tests import backends
from tests.seeds import Upload, another_attempt, declaration
from tests.support import Store, fails_with, serving

MINUTE_NS = 60 * 1_000_000_000


@pytest.fixture(params=backends.BACKENDS)
async def fresh_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A database of its own, so that a pass sees only this test's attempts."""
    directory = tmp_path_factory.mktemp("expiry")
    async with backends.database(request.param, directory, "expiry") as url:
        yield url


async def test_unpublished_and_abandoned_attempts_expire_and_are_counted(
    fresh_url: str,
) -> None:
    async with serving(fresh_url) as store:
        open_attempt = Upload(store.runtime, declaration())
        await open_attempt.begin()
        await open_attempt.history()
        published = await another_attempt(open_attempt).published()
        abandoned = Upload(store.runtime, declaration())
        await store.runtime.SettleRunPreparation(abandoned.settle())
        lone = Upload(store.runtime, declaration())
        await lone.begin()

        async with open_database(ServerConfig(database_url=fresh_url)) as db:
            offset = 0

            def clock() -> int:
                return time.time_ns() + offset

            expiry = SeedExpiry(
                RuntimeStore(db.calls), ttl=60, clock=clock, metrics=Metrics("test")
            )
            assert await expiry.run_pass() == 0  # not a minute old yet
            offset = 2 * MINUTE_NS
            assert await expiry.run_pass() == 3
            assert expiry.metrics.seed_attempts_expired._value.get() == 3
            assert await expiry.run_pass() == 0

        await _published_is_kept(store, published)
        await fails_with(open_attempt.history(), grpc.StatusCode.NOT_FOUND, "SEED_NOT_FOUND")
        # An expired abandonment is forgotten: the attempt may be begun now.
        await abandoned.begin()
        # An operation left without attempts is gone: another may take the run.
        await Upload(store.runtime, declaration(run_id=lone.run_id)).begin()


async def _published_is_kept(store: Store, published: Upload) -> None:
    request = sd.LoadRunSeedRequest(run_id=published.run_id, end_id="1")
    seed = (await store.runtime.LoadRunSeed(request)).seed
    assert seed.declaration.attempt_id == published.decl.attempt_id


class _CountingExpiry:
    def __init__(self) -> None:
        self.passes = 0

    async def run_pass(self) -> int:
        self.passes += 1
        return 0


async def test_the_server_runs_an_expiry_pass_after_each_retention_pass(
    tmp_path: Path,
) -> None:
    """Even with every --retain-* off (retention itself does nothing then)."""
    config = ServerConfig(
        database_url=f"sqlite:///{tmp_path / 'runstore.db'}", seed_attempt_ttl="2h"
    )
    async with open_database(config) as db:
        task = create_stores(config, db).retention
        assert task is not None and task.expiry is not None
        assert task.expiry.ttl == 7200
        counting = _CountingExpiry()
        task.expiry = counting  # type: ignore[assignment]
        waits: list[float] = []

        async def wait(seconds: float) -> None:
            waits.append(seconds)
            if len(waits) == 2:
                task.stopping.set()

        task._wait = wait
        task.start()
        assert task._task is not None
        await asyncio.wait_for(task._task, 30)  # the loop ends at the second wait
        assert counting.passes == 2
