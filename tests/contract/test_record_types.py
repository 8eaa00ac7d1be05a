"""ListRunRecords' ``types`` (docs/contract.md §9.6.3): only records of those
types, every one once in run order when a reader follows ``next_cursor``, with
a bounded stretch of the run examined per call."""

from __future__ import annotations

import grpc
import pytest

from runstore.server.core import paging
from runstore.v1 import runtime_store_pb2 as rs
from tests.support import Store, fails_with, unique

INVALID = grpc.StatusCode.INVALID_ARGUMENT
SCAN = 5
"""paging.TYPED_SCAN in these tests: a run of 40 records takes many stretches."""


@pytest.fixture
def short_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paging, "TYPED_SCAN", SCAN)


async def typed_run(store: Store) -> tuple[str, list[tuple[int, str]]]:
    """A run of 40 records: its start, then types cycling a, b, a, c, with one
    ``rare`` at record 33; returns (record ID, type) of each."""
    run = await store.root()
    cycle = ["a", "b", "a", "c"]
    kinds = [cycle[i % 4] if i != 31 else "rare" for i in range(39)]
    batch = rs.AppendRunRecordsRequest(
        records=[run.record(f"k{i}", type=kind) for i, kind in enumerate(kinds)]
    )
    await store.runtime.AppendRunRecords(batch)
    every = await store.runtime.ListRunRecords(rs.ListRunRecordsRequest(run_id=run.id, limit=100))
    return run.id, [(int(r.id), r.type) for r in every.events]


async def walk(store: Store, run_id: str, types: list[str], limit: int) -> tuple[list[int], int]:
    """Every record ID the filtered pages return, and how many calls it took."""
    found: list[int] = []
    cursor = ""
    calls = 0
    while True:
        calls += 1
        assert calls <= 100, "the cursor stopped advancing"
        request = rs.ListRunRecordsRequest(run_id=run_id, cursor=cursor, limit=limit, types=types)
        page = await store.runtime.ListRunRecords(request)
        assert len(page.events) <= limit
        assert all(event.type in types for event in page.events)
        found.extend(int(event.id) for event in page.events)
        if not page.next_cursor:
            return found, calls
        assert int(page.next_cursor) > int(cursor or 0)
        cursor = page.next_cursor


@pytest.mark.usefixtures("short_scan")
async def test_a_type_filter_returns_every_record_of_its_types_once(store: Store) -> None:
    run_id, records = await typed_run(store)
    for types in (["b"], ["a", "c"], ["rare"], ["run_started", "rare"], ["none-such"]):
        for limit in (1, 3, 100):
            found, calls = await walk(store, run_id, types, limit)
            assert found == [i for i, kind in records if kind in types], (types, limit)
            # Bounded work: one call per stretch of SCAN records at most, plus
            # the pages the limit cuts.
            assert calls <= -(-len(records) // SCAN) + len(found) // limit + 1


@pytest.mark.usefixtures("short_scan")
async def test_a_stretch_without_a_match_is_an_empty_page_that_moves_on(store: Store) -> None:
    run_id, records = await typed_run(store)
    request = rs.ListRunRecordsRequest(run_id=run_id, limit=10, types=["rare"])
    page = await store.runtime.ListRunRecords(request)
    assert list(page.events) == [] and page.next_cursor == str(SCAN)
    last = rs.ListRunRecordsRequest(run_id=run_id, cursor="35", limit=10, types=["rare"])
    assert (await store.runtime.ListRunRecords(last)).next_cursor == ""  # the run's end
    at_rare = rs.ListRunRecordsRequest(run_id=run_id, cursor="30", limit=10, types=["rare"])
    page = await store.runtime.ListRunRecords(at_rare)
    assert [int(e.id) for e in page.events] == [i for i, kind in records if kind == "rare"]
    assert page.next_cursor == str(30 + SCAN)  # the stretch ends before the run does


async def test_bad_type_filters_name_their_field(store: Store) -> None:
    run = await store.root()
    cases = [
        ([f"t{i}" for i in range(paging.TYPE_SLOTS + 1)], "INVALID_ARGUMENT_READ"),
        (["a", ""], "INVALID_ARGUMENT_READ"),
        (["a\x00"], "CONTRACT_VALIDATION"),
    ]
    for types, reason in cases:
        request = rs.ListRunRecordsRequest(run_id=run.id, limit=10, types=types)
        info = await fails_with(store.runtime.ListRunRecords(request), INVALID, reason)
        assert info.metadata["field"] == "types", types
    most = [f"t{i}" for i in range(paging.TYPE_SLOTS - 1)] + ["run_started"]
    request = rs.ListRunRecordsRequest(run_id=run.id, limit=10, types=most)
    assert [e.type for e in (await store.runtime.ListRunRecords(request)).events] == ["run_started"]
    ghost = rs.ListRunRecordsRequest(run_id=unique("ghost"), limit=10, types=["a"])
    await fails_with(
        store.runtime.ListRunRecords(ghost), grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND"
    )
