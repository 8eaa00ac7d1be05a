"""Seed attempts begun and never published, and abandoned preparations,
expire after ``--seed-attempt-ttl`` (docs/configuration.md), counted by
``runstore_seed_attempts_expired_total``; published seeds stay."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from runstore.server.app import open_database
from runstore.server.config import ServerConfig
from runstore.server.core.store import RuntimeStore
from runstore.server.metrics import Metrics
from runstore.server.seed_expiry import SeedExpiry
from runstore.v1 import seeds_pb2 as sd
from tests import postgres
from tests.seeds import Upload, another_attempt, declaration
from tests.support import Store, fails_with, serving

MINUTE_NS = 60 * 1_000_000_000


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def fresh_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A database of its own, so that a pass sees only this test's attempts."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('expiry') / 'runstore.db'}"
        return
    async with postgres.fresh_database("runstore_expiry") as url:
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

            expiry = SeedExpiry(RuntimeStore(db), ttl=60, clock=clock)
            expiry.metrics = Metrics("test")
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
