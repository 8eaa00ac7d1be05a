"""What each lifecycle call's common case costs the database (issue 36): SQL
statements, transactions and round trips of one call through a served server,
counted at the driver (``tests.statement_counts``), per backend.

``BOUNDS`` is the ceiling each common case must stay under: a fast path
(``core.fast_paths``) that stops answering, or a full-rules transaction that
grows, fails here. docs/benchmarks.md has the table these numbers come from.
Run ``python -m pytest tests/server/test_lifecycle_costs.py -s -k table`` to
print the table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from runstore.v1 import runtime_store_pb2 as rs
from tests import current_starts
from tests.backends import BACKENDS, POSTGRES, SQLITE, Served, database, served
from tests.seeds import synchronous_request
from tests.statement_counts import QUIET_SERVER, Cost, Tally, counting
from tests.support import Store, run_start

Call = Callable[[Store], Awaitable[Callable[[], Any]]]
"""Prepares a common case and returns the one call to count."""


async def _root(store: Store) -> Callable[[], Any]:
    session_id = await store.session()
    run = run_start(session_id=session_id)
    return lambda: store.runtime.StartRootRun(run.root_request())


async def _child(store: Store) -> Callable[[], Any]:
    parent = await store.root()
    child = run_start(
        session_id=parent.start.session_id, parent_run_id=parent.id, agent_id="child-agent"
    )
    return lambda: store.runtime.StartChildRun(child.child_request(parent.start.agent_id))


async def _one_shot(store: Store) -> Callable[[], Any]:
    run = run_start()
    return lambda: store.runtime.StartOneShotRun(run.one_shot_request())


async def _one_shot_child(store: Store) -> Callable[[], Any]:
    parent = await store.one_shot()
    child = run_start(parent_run_id=parent.id, agent_id="child-agent")
    return lambda: store.runtime.StartOneShotChildRun(
        child.one_shot_child_request(parent.start.agent_id)
    )


async def _synchronous(store: Store) -> Callable[[], Any]:
    request = await synchronous_request(store.runtime)
    return lambda: store.runtime.StartSynchronousRun(request)


async def _suspension(store: Store) -> Callable[[], Any]:
    run = await store.root()
    return lambda: store.runtime.RecordRunSuspension(run.suspension_request())


async def _sessionless_suspension(store: Store) -> Callable[[], Any]:
    run = await store.one_shot()
    return lambda: store.runtime.RecordRunSuspension(run.suspension_request())


async def _cancellation(store: Store) -> Callable[[], Any]:
    run = await store.root()
    return lambda: store.runtime.RecordRunCancellation(run.cancellation_request())


async def _sessionless_cancellation(store: Store) -> Callable[[], Any]:
    run = await store.one_shot()
    return lambda: store.runtime.RecordRunCancellation(run.cancellation_request())


async def _terminal(store: Store) -> Callable[[], Any]:
    run = await store.root()
    return lambda: store.runtime.RecordRunTerminal(run.terminal_request())


async def _resume(store: Store) -> Callable[[], Any]:
    """A continuation of a suspended run (§10.2): StartRootRun with a predecessor."""
    before = await store.root()
    await store.runtime.RecordRunSuspension(before.suspension_request())
    after = run_start(session_id=before.start.session_id, predecessor_run_id=before.id)
    return lambda: store.runtime.StartRootRun(after.root_request())


async def _current_root(store: Store) -> Callable[[], Any]:
    """A current-generation start (§10.6, D1): a request digest and a published seed."""
    session_id = await store.session()
    run = await current_starts.seeded(store.runtime, run_start(session_id=session_id))
    request = current_starts.root(run, current_starts.digest(run.start.run_id))
    return lambda: store.runtime.StartRootRun(request)


CALLS: dict[str, Call] = {
    "StartRootRun": _root,
    "StartRootRun, current": _current_root,
    "StartChildRun": _child,
    "StartOneShotRun": _one_shot,
    "StartOneShotChildRun": _one_shot_child,
    "StartSynchronousRun": _synchronous,
    "RecordRunSuspension": _suspension,
    "RecordRunSuspension, sessionless": _sessionless_suspension,
    "RecordRunCancellation": _cancellation,
    "RecordRunCancellation, sessionless": _sessionless_cancellation,
    "RecordRunTerminal": _terminal,
    "StartRootRun, continuation": _resume,
}

BOUNDS: dict[str, dict[str, tuple[int, int]]] = {
    # (statements, round trips) at most; BEGIN and COMMIT are round trips.
    SQLITE: {
        "StartRootRun": (2, 4),
        "StartRootRun, current": (7, 9),
        "StartChildRun": (3, 5),
        "StartOneShotRun": (2, 4),
        "StartOneShotChildRun": (3, 5),
        "StartSynchronousRun": (7, 9),
        "RecordRunSuspension": (2, 4),
        "RecordRunSuspension, sessionless": (2, 4),
        "RecordRunCancellation": (2, 4),
        "RecordRunCancellation, sessionless": (2, 4),
        "RecordRunTerminal": (2, 4),
        "StartRootRun, continuation": (6, 8),
    },
    POSTGRES: {
        "StartRootRun": (1, 1),
        "StartRootRun, current": (8, 10),
        "StartChildRun": (1, 1),
        "StartOneShotRun": (1, 1),
        "StartOneShotChildRun": (1, 1),
        "StartSynchronousRun": (8, 10),
        "RecordRunSuspension": (1, 1),
        "RecordRunSuspension, sessionless": (1, 1),
        "RecordRunCancellation": (1, 1),
        "RecordRunCancellation, sessionless": (1, 1),
        "RecordRunTerminal": (1, 1),
        "StartRootRun, continuation": (7, 9),
    },
}


@pytest.fixture(scope="module", params=BACKENDS)
async def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, Served, Tally]]:
    backend: str = request.param
    with pytest.MonkeyPatch.context() as patch, counting(backend, patch) as tally:
        directory = tmp_path_factory.mktemp("costs")
        async with database(backend, directory, "costs") as url, served(url, **QUIET_SERVER) as it:
            yield backend, it, tally


async def _cost(server: tuple[str, Served, Tally], name: str) -> Cost:
    """What one call of ``name``'s common case sent."""
    _, it, tally = server
    costs = []
    for _ in range(3):  # the least of three: a stray background statement is not the call's
        call = await CALLS[name](it.store)
        _, cost = await tally.during(call())
        costs.append(cost)
    return min(costs, key=lambda cost: cost.round_trips)


@pytest.mark.parametrize("name", CALLS)
async def test_a_common_case_stays_within_its_statements(
    server: tuple[str, Served, Tally], name: str
) -> None:
    cost = await _cost(server, name)
    statements, round_trips = BOUNDS[server[0]][name]
    assert cost.statements <= statements and cost.round_trips <= round_trips, (
        f"{name}: {cost}\n" + "\n".join(cost.sql)
    )


async def test_table(server: tuple[str, Served, Tally]) -> None:
    """Prints the table (with ``-s``): each call's statements, transactions, round trips."""
    lines = [f"{server[0]}:"]
    for name in CALLS:
        cost = await _cost(server, name)
        lines.append(f"| {name} | {cost.statements} | {cost.transactions} | {cost.round_trips} |")
    print("\n".join(lines))


def test_every_lifecycle_call_is_measured() -> None:
    names = {name.split(",")[0] for name in CALLS}
    lifecycle = {
        method
        for method in rs.DESCRIPTOR.services_by_name["RuntimeStore"].methods_by_name
        if method.startswith(("Start", "Record"))
    }
    assert lifecycle <= names, lifecycle - names
