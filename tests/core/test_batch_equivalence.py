"""AppendRunRecords is AppendRunRecord for each record in order, all or nothing
(docs/contract.md §9.3.1), as a property over both backends.

Each example builds one run/session state twice in fresh IDs (the states of
``test_fast_path_equivalence``: missing, stopped and suspended runs, ended and
purged sessions, owner mismatches, a key already used by the same or another
record), draws a batch over a few keys, payloads and types (so batches repeat
keys, identically or not), then sends it as one batch to one copy and record
by record to the other. Either every single append succeeded and the batch
answers the same results and leaves the same stored state, or the batch fails
with the first single append's error and its copy is left as it was built.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstore.contract.errors import RunstoreError
from runstore.contract.model import SessionStatus
from runstore.server import call_scope
from runstore.server.core.batch_rules import one_owner_distinct_keys as batch_shape
from runstore.server.core.model import RecordDraft
from runstore.server.core.ports import Database
from runstore.server.core.store import RuntimeStore
from tests.backends import BACKENDS, opened
from tests.core.test_fast_path_equivalence import CASES, KEY, State, build, stored

T = TypeVar("T")


class Loop:
    """A database on an event loop of its own thread, for sync Hypothesis tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``coroutine``'s result, run as a call in the caller's namespace (if any)."""
        try:
            scope = call_scope.scope()
        except call_scope.NamespaceUnset:  # the fixture's setup: no database work yet
            future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
            return future.result(timeout=60)

        async def in_scope() -> T:
            with call_scope.acting_in(scope):
                return await coroutine

        future = asyncio.run_coroutine_threadsafe(in_scope(), self.loop)
        return future.result(timeout=60)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Loop, Database]]:
    loop = Loop()
    database = opened(request.param, tmp_path_factory.mktemp("batch"), "batch")
    try:
        it = loop.call(database.__aenter__())
        yield loop, it.db
        loop.call(database.__aexit__(None, None, None))
    finally:
        loop.stop()


class BatchFastPath:
    """The database with the batch fast path switched off, or on and watched."""

    def __init__(self, inner: Database, *, on: bool) -> None:
        self._inner = inner
        self._on = on
        self.stored: list[list[int]] = []

    async def write(self, fn: Any) -> Any:
        return await self._inner.write(fn)

    async def read(self, fn: Any) -> Any:
        return await self._inner.read(fn)

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        return await self._inner.append_if_writable(record)

    async def append_records_if_writable(self, batch: Any) -> list[int] | None:
        if not self._on:
            return None
        ids = await self._inner.append_records_if_writable(batch)
        if ids is not None:
            self.stored.append(ids)
        return ids


_RECORD = st.tuples(
    st.sampled_from([KEY, "a", "b"]),
    st.sampled_from([b'{"n":1}', b'{"n":2}']),
    st.sampled_from(["note", "thinking"]),
)


async def one_by_one(store: RuntimeStore, records: list[RecordDraft]) -> tuple[Any, ...]:
    results = []
    for record in records:
        try:
            result = await store.append_run_record(record)
        except RunstoreError as error:
            return ("rejected", error.reason)
        results.append((result.id, result.inserted, result.session_status))
    return ("stored", results)


async def as_batch(store: RuntimeStore, records: list[RecordDraft]) -> tuple[Any, ...]:
    try:
        results = await store.append_run_records(records)
    except RunstoreError as error:
        return ("rejected", error.reason)
    return ("stored", [(r.id, r.inserted, r.session_status) for r in results])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(state=st.sampled_from(list(CASES.values())), drawn=st.lists(_RECORD, min_size=1, max_size=6))
def test_a_batch_is_its_records_appended_one_by_one_or_nothing(
    served: tuple[Loop, Database], state: State, drawn: list[tuple[str, bytes, str]]
) -> None:
    loop, db = served
    fast, full = BatchFastPath(db, on=True), BatchFastPath(db, on=False)
    fast_copy, full_copy, single_copy = (loop.call(build(db, state)) for _ in range(3))

    def records(run_id: str, template: RecordDraft) -> list[RecordDraft]:
        return [
            replace(template, run_id=run_id, event_key=key, payload=payload, type=type_)
            for key, payload, type_ in drawn
        ]

    built_state = loop.call(stored(db, fast_copy))
    batch = records(fast_copy.run_id, fast_copy.record)
    with_fast_path = loop.call(as_batch(RuntimeStore(fast), batch))
    full_rules = loop.call(
        as_batch(RuntimeStore(full), records(full_copy.run_id, full_copy.record))
    )
    singly = loop.call(
        one_by_one(RuntimeStore(db), records(single_copy.run_id, single_copy.record))
    )
    assert with_fast_path == full_rules == singly
    if singly[0] == "stored":
        assert (
            loop.call(stored(db, fast_copy))
            == loop.call(stored(db, full_copy))
            == loop.call(stored(db, single_copy))
        )
    else:
        assert loop.call(stored(db, fast_copy)) == built_state, "a failed batch wrote nothing"
        assert loop.call(stored(db, full_copy)) == built_state, "a failed batch wrote nothing"
    # The fast path takes exactly the batches of the common case: one-shape
    # batches whose every record is new, for a running run in an active session.
    common = (
        singly[0] == "stored"
        and all(
            inserted and status in (SessionStatus.ACTIVE, None) for _, inserted, status in singly[1]
        )
        and batch_shape(batch)
    )
    assert bool(fast.stored) == common, (fast.stored, singly)
