"""Current-generation starts raced across two ``runstore serve`` replicas on one
PostgreSQL (docs/contract.md §10.2, §10.6, §7): every race has exactly one
winner and every loser the documented error, from transactions alone."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from typing import Any

import grpc
import pytest

from runstore.contract import lifecycle
from runstore.server.db import migrate
from runstore.v1 import types_pb2 as pb
from tests import current_starts as cur
from tests import postgres
from tests.processes import server_process
from tests.support import Store, failure_of, outcome, run_start

pytestmark = pytest.mark.postgres

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
async def replicas() -> AsyncIterator[list[Store]]:
    async with postgres.fresh_database("runstore_current") as url, AsyncExitStack() as stack:
        await migrate.upgrade(url)
        stores = []
        for _ in range(2):
            server = await stack.enter_async_context(
                server_process("--database-url", url, "--pg-pool-max", "8")
            )
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
            stores.append(Store(channel, target=server.target))
        yield stores


async def test_successors_of_one_suspended_run_on_two_replicas_have_one_winner(
    replicas: list[Store],
) -> None:
    session = await replicas[0].session()
    pred = await cur.seeded(replicas[0].runtime, run_start(session_id=session))
    await replicas[0].runtime.StartRootRun(cur.root(pred, cur.digest(pred.id)))
    await replicas[1].runtime.RecordRunSuspension(pred.suspension_request())
    successors = [
        await cur.seeded(
            replicas[i % 2].runtime, run_start(session_id=session, predecessor_run_id=pred.id)
        )
        for i in range(16)
    ]
    results = await asyncio.gather(
        *(
            outcome(replicas[i % 2].runtime.StartRootRun(cur.root(s, cur.digest(s.id))))
            for i, s in enumerate(successors)
        )
    )
    assert collections.Counter(results) == {"ok": 1, "RUN_CONFLICT": 15}
    winner = successors[results.index("ok")]
    meta = await replicas[1].load(pred.id)
    assert (meta.status, meta.successor_run_id) == (pb.RUN_STATUS_SUSPENDED, winner.id)
    assert [await replicas[0].exists(s.id) for s in successors].count(True) == 1


async def test_replays_racing_the_runs_ending_never_write(replicas: list[Store]) -> None:
    """A new execution's replay sees the run running (RUN_CONFLICT: only exact
    retries) or closed (the original IDs); it never writes either way."""
    run = await cur.seeded(replicas[0].runtime, run_start())
    bound = cur.digest(run.id)
    await replicas[0].runtime.StartOneShotRun(cur.one_shot(run, bound))
    replay = cur.one_shot(cur.moved(run, HOUR_MS), bound)
    calls = [replicas[i % 2].runtime.StartOneShotRun(replay) for i in range(16)]
    ending = replicas[1].runtime.RecordRunTerminal(run.terminal_request())
    *answers, _ = await asyncio.gather(*(_answer(call) for call in calls), ending)
    assert set(answers) <= {("ok", "1", False, pb.RUN_STATUS_COMPLETED), ("RUN_CONFLICT",)}
    assert [r.type for r in await replicas[0].records(run.id)] == [
        lifecycle.RUN_STARTED,
        lifecycle.RUN_COMPLETED,
    ]
    after = await replicas[0].runtime.StartOneShotRun(replay)
    assert (after.record.id, after.record.inserted) == ("1", False)


async def _answer(call: Awaitable[Any]) -> tuple[object, ...]:
    """A replay's answer: the original record and status, or the error's reason."""
    try:
        response = await call
    except grpc.aio.AioRpcError as err:
        return (failure_of(err).reason,)
    return ("ok", response.record.id, response.record.inserted, response.run_status)


async def test_first_starts_at_two_times_bind_one(replicas: list[Store]) -> None:
    """Racing first starts of one run with one digest and two proposed times:
    one inserts, the starts at its time are its exact retries, the others
    RUN_CONFLICT (a running run takes only exact retries)."""
    run = await cur.seeded(replicas[0].runtime, run_start())
    bound = cur.digest(run.id)
    early, late = cur.one_shot(run, bound), cur.one_shot(cur.moved(run, HOUR_MS), bound)
    requests = [early if i % 2 else late for i in range(16)]
    results = await asyncio.gather(
        *(outcome(replicas[i % 2].runtime.StartOneShotRun(r)) for i, r in enumerate(requests))
    )
    stored = (await replicas[0].load(run.id)).started_at
    for request, result in zip(requests, results, strict=True):
        expected = "ok" if request.run.started_at == stored else "RUN_CONFLICT"
        assert result == expected, (request.run.started_at, stored, result)
    assert len(await replicas[1].records(run.id)) == 1
