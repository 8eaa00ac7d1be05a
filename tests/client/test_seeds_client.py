"""Seeds and preparations through the Python client (§9.7): typed values both
ways, the error classes of the new reasons, and the blocking facade."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from runstore.client import (
    LiteralPart,
    PreparationAbandonedError,
    PreparationOperation,
    RemoteStore,
    RenderedPrompt,
    RunStart,
    RunStatus,
    SeedAppend,
    SeedConflictError,
    SeedDeclaration,
    SeedKind,
    SeedNotFoundError,
    SeedPublication,
    SeedRecord,
    SeedStore,
    SyncRemoteStore,
    records,
)
from runstore.client.retry import RetryPolicy
from tests.support import Store as StubStore
from tests.support import unique

FAST_RETRY = RetryPolicy(initial=0.001, maximum=0.002, deadline=10.0)


def _declaration() -> SeedDeclaration:
    return SeedDeclaration(
        agent_id="agent",
        run_id=unique("seeded"),
        session_id="",
        command_id=unique("command"),
        attempt_id=unique("attempt"),
        kind=SeedKind.LITERAL,
        rendered_prompts=(RenderedPrompt("system", "v2", "", {"tier": "gold"}),),
    )


def _operation(d: SeedDeclaration) -> PreparationOperation:
    return PreparationOperation(d.agent_id, d.run_id, d.session_id, d.command_id)


async def test_remote_store_implements_the_seed_protocol() -> None:
    for name in SeedStore.__dict__:
        if not name.startswith("_"):
            assert callable(getattr(RemoteStore, name)), name
            assert callable(getattr(SyncRemoteStore, name)), name


async def test_a_seed_round_trip_through_typed_values(store: StubStore) -> None:
    d = _declaration()
    async with RemoteStore(store.target, retry=FAST_RETRY) as remote:
        seed = await remote.begin_run_seed(d)
        assert (seed.declaration, seed.source, seed.end_id) == (d, None, "0")
        part = SeedRecord(key="a", previous_id="0", literal_part=LiteralPart(b"[", False))
        assert await remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, part)) == "1"
        tail = SeedRecord(key="b", previous_id="1", literal_part=LiteralPart(b"]", True))
        assert await remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, tail)) == "2"
        compiled = SeedRecord(key="c", previous_id="2", prepared=b"start")
        assert await remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, compiled)) == "3"
        assert await remote.find_run_preparation(_operation(d)) is None
        await remote.publish_run_seed(SeedPublication(d.run_id, d.attempt_id, "2", "3", 5))

        loaded = await remote.load_run_seed(d.run_id, "2")
        assert (loaded.declaration, loaded.end_id) == (d, "2")
        page = await remote.list_run_seed_records(d.run_id, "2", "", 10)
        assert page.records == (
            SeedRecord(key="a", previous_id="0", id="1", literal_part=LiteralPart(b"[", False)),
            SeedRecord(key="b", previous_id="1", id="2", literal_part=LiteralPart(b"]", True)),
        )
        assert page.next_cursor == ""
        prepared = await remote.list_run_preparation_records(d.run_id, "3", "", 10)
        assert [r.prepared for r in prepared.records] == [b"start"]
        found = await remote.find_run_preparation(_operation(d))
        assert found is not None
        assert (found.seed, found.end_id, found.prepared_bytes) == (loaded, "3", 5)
        assert await remote.settle_run_preparation(_operation(d), unique("late")) == found


async def test_the_new_reasons_come_back_as_their_classes(store: StubStore) -> None:
    d = _declaration()
    async with RemoteStore(store.target, retry=FAST_RETRY) as remote:
        with pytest.raises(SeedNotFoundError):
            await remote.load_run_seed(d.run_id, "1")
        assert await remote.settle_run_preparation(_operation(d), d.attempt_id) is None
        with pytest.raises(PreparationAbandonedError) as abandoned:
            await remote.begin_run_seed(d)
        assert abandoned.value.permanent
        other = SeedDeclaration(**{**d.__dict__, "command_id": "other"})
        with pytest.raises(SeedConflictError):
            await remote.begin_run_seed(other)


async def test_the_blocking_facade_uploads_and_reads(store: StubStore) -> None:
    d = _declaration()

    def worker() -> tuple[str, int]:
        with SyncRemoteStore(store.target) as remote:
            remote.begin_run_seed(d)
            record = SeedRecord(key="m", previous_id="0", messages=b"[]")
            remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, record))
            compiled = SeedRecord(key="p", previous_id="1", prepared=b"xy")
            remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, compiled))
            remote.publish_run_seed(SeedPublication(d.run_id, d.attempt_id, "1", "2", 2))
            seed = remote.load_run_seed(d.run_id, "1")
            pages = remote.list_run_seed_records(d.run_id, "1", "", 5)
            return seed.end_id, len(pages.records)

    assert await asyncio.to_thread(worker) == ("1", 1)


async def test_a_synchronous_start_through_the_client(store: StubStore) -> None:
    d = _declaration()
    async with RemoteStore(store.target, retry=FAST_RETRY) as remote:
        await remote.begin_run_seed(d)
        record = SeedRecord(key="m", previous_id="0", messages=b"[]")
        await remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, record))
        compiled = SeedRecord(key="p", previous_id="1", prepared=b"x")
        await remote.append_run_seed(SeedAppend(d.run_id, d.attempt_id, compiled))
        await remote.publish_run_seed(SeedPublication(d.run_id, d.attempt_id, "1", "2", 1))
        run = RunStart(run_id=d.run_id, agent_id="agent", started_at=records.now(), seed_end_id="1")
        command = records.one_shot_run_start(run)
        first = await remote.start_synchronous_run(command)
        assert (first.record.id, first.record.inserted) == ("1", True)
        assert first.run_status is RunStatus.RUNNING
        again = await remote.start_synchronous_run(command)
        assert (again.record.id, again.record.inserted) == ("1", False)
        with pytest.raises(SeedConflictError):
            await remote.start_synchronous_run(
                records.one_shot_run_start(replace(run, seed_end_id="2"))
            )
