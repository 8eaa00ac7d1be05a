"""What the console's screens read, through the store core the gRPC servicers call.

Record lists open at their tail: the store tells the newest record's position
(``run_tail``, ``session_tail``: one index lookup), the store pages forwards
from a cursor (the number of records already read), and record IDs (and
session positions) are dense, so the page just before position ``before`` is
the forward page that starts ``page`` records earlier. No request reads more
than one page of records, however long the history is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from runstore.contract.errors import NotFoundError
from runstore.contract.model import RunFilter, RunStatus
from runstore.contract.seeds import RunSeed, SeedRecord
from runstore.server.console.render import json_object
from runstore.server.core.model import Nanos, Page, RunRecord, RunState
from runstore.server.core.store import RuntimeStore

RECORDS_PER_PAGE = 50
"""Records one screen shows: a page a browser renders at once, whatever the history."""

Forward = Callable[[str, int], Awaitable[Page]]
"""Reads at most ``limit`` records after a cursor (the store's forward page)."""


@dataclass(frozen=True, slots=True)
class RecordSlice:
    """Records ``first`` to ``last`` (positions, both inclusive), newest first."""

    records: list[tuple[int, RunRecord]]
    """(position, record) pairs, newest first."""
    first: int
    last: int
    tail: int
    """The position of the newest record there is (0: none)."""

    @property
    def older(self) -> int:
        """The ``before`` of the next older page, 0 when this one reaches the start."""
        return self.first if self.first > 1 else 0

    @property
    def newer(self) -> int:
        """The ``before`` of the next newer page, 0 when this page is the tail."""
        return 0 if self.last >= self.tail else min(self.last + RECORDS_PER_PAGE, self.tail) + 1

    @property
    def at_tail(self) -> bool:
        return self.last >= self.tail


def _cursor(after: int) -> str:
    return str(after) if after > 0 else ""


async def _slice(read: Forward, tail: int, before: int) -> RecordSlice:
    """The page of records just before position ``before`` (0: the tail)."""
    end = tail if before <= 0 or before > tail + 1 else before - 1
    start = max(0, end - RECORDS_PER_PAGE)
    if end <= start:
        return RecordSlice([], 0, 0, tail)
    page = await read(_cursor(start), end - start)
    # A page cut by the payload budget returns fewer records: they still start at start + 1.
    numbered = [(start + offset + 1, record) for offset, record in enumerate(page.events)]
    last = numbered[-1][0] if numbered else start
    return RecordSlice(numbered[::-1], start + 1, last, tail)


async def run_records(store: RuntimeStore, run_id: str, before: int) -> RecordSlice:
    """A run's records just before record ID ``before`` (0: its tail), newest first."""

    async def read(cursor: str, limit: int) -> Page:
        return await store.list_run_records(run_id, cursor, limit)

    return await _slice(read, await store.run_tail(run_id), before)


TYPED_READS: Final = 5
"""Type-filtered reads one screen makes at most, each examining at most
``paging.TYPED_SCAN`` records: a screen of a rare type in a long run stops
there and links on, rather than reading the whole run."""


@dataclass(frozen=True, slots=True)
class TypedSlice:
    """Records of one type after position ``after``, oldest first."""

    records: list[tuple[int, RunRecord]]
    after: int
    through: int
    """The last position examined."""
    next_after: int
    """Where the next screen starts; 0 when this one reached the run's end."""
    tail: int


async def typed_records(
    store: RuntimeStore, run_id: str, record_type: str, after: int
) -> TypedSlice:
    """Up to ``RECORDS_PER_PAGE`` records of ``record_type`` after position
    ``after``, from ListRunRecords' type filter (the whole run, not one page)."""
    tail = await store.run_tail(run_id)
    found: list[tuple[int, RunRecord]] = []
    cursor = after
    for _ in range(TYPED_READS):
        page = await store.list_run_records(
            run_id, _cursor(cursor), RECORDS_PER_PAGE - len(found), [record_type]
        )
        found.extend((record.id, record) for record in page.events)
        if not page.next_cursor:
            return TypedSlice(found, after, tail, 0, tail)
        cursor = int(page.next_cursor)
        if len(found) >= RECORDS_PER_PAGE:
            break
    return TypedSlice(found, after, cursor, cursor, tail)


async def session_records(store: RuntimeStore, session_id: str, before: int) -> RecordSlice:
    """A session's records (every run, commit order) just before position ``before``."""

    async def read(cursor: str, limit: int) -> Page:
        return await store.list_session_run_records(session_id, cursor, limit)

    return await _slice(read, await store.session_tail(session_id), before)


@dataclass(frozen=True, slots=True)
class RunNode:
    """A run of a session's tree with its children."""

    run: RunState
    children: list[RunNode]
    failed_below: bool = False
    """A run under it (on the page) failed: the tree flags it up to its root."""


def run_tree(runs: Sequence[RunState]) -> list[RunNode]:
    """A page of the session's runs as a forest: roots first in start order,
    each with its children (in start order); a child whose parent is not on
    the page is a root. A node whose descendants include a failed run is
    marked ``failed_below``."""
    children: dict[str, list[RunState]] = {}
    listed = {run.run_id for run in runs}
    roots: list[RunState] = []
    for run in runs:
        if run.parent_run_id and run.parent_run_id in listed:
            children.setdefault(run.parent_run_id, []).append(run)
        else:
            roots.append(run)

    def node(run: RunState, seen: frozenset[str]) -> RunNode:
        below = [
            node(child, seen | {child.run_id})
            for child in children.get(run.run_id, [])
            if child.run_id not in seen
        ]
        failed = any(c.failed_below or c.run.status is RunStatus.FAILED for c in below)
        return RunNode(run, below, failed)

    return [node(run, frozenset({run.run_id})) for run in roots]


def run_kind(run: RunState) -> str:
    """root, child, one-shot or one-shot child (sessionless runs are one-shot, §9.2.3)."""
    if not run.session_id:
        return "one-shot child" if run.parent_run_id else "one-shot"
    return "child" if run.parent_run_id else "root"


CHILDREN_SHOWN: Final = 100
"""A run's children its page lists (its first, in start order; ListRuns by
``parent_run_id`` pages the rest): a run's page never reads every child."""

RELATED_RUNS: Final = 200
"""Runs started at or after a suspended run (of its session, or sessionless)
its page reads, one ListRuns page, to find seed-era successors, which only
their first record names."""


@dataclass(frozen=True, slots=True)
class Related:
    """A run's children (its first ``CHILDREN_SHOWN``) and its successors."""

    children: list[RunState]
    child_counts: dict[str, int]
    """Its children per status value (exact up to ListRuns' count cap)."""
    more_children: bool
    successors: list[str]
    successor_runs: list[RunState]
    """The successors whose runs were read (for the timeline)."""
    more_later: bool
    """More runs started later than the ``RELATED_RUNS`` read for seed-era
    successors: that list may be incomplete."""


async def related(store: RuntimeStore, run: RunState) -> Related:
    """The run's children, exactly (§9.8.2 ``parent_run_id``), and its
    successors (§10.2): the current generation names its successor on the run;
    a seed-era continuation starts no earlier, in the same session."""
    kids = await store.list_runs(
        RunFilter(parent_run_id=run.run_id), CHILDREN_SHOWN, "", count_statuses=True
    )
    found = [run.successor_run_id] if run.successor_run_id else []
    later: list[RunState] = []
    more_later = False
    if run.status is RunStatus.SUSPENDED:
        query: RunFilter[Nanos] = RunFilter(
            session_id=run.session_id,
            sessionless_only=not run.session_id,
            started_after=run.started_at,
        )
        page = await store.list_runs(query, RELATED_RUNS, "")
        later = [other for other in page.items if other.run_id != run.run_id]
        more_later = bool(page.next_page_token)
        for other in await _seed_era_successors(store, run, later):
            if other not in found:
                found.append(other)
    by_id = {other.run_id: other for other in later}
    runs = []
    for successor in found:
        if successor not in by_id:
            try:
                by_id[successor] = await store.load_run(successor)
            except NotFoundError:
                continue
        runs.append(by_id[successor])
    return Related(
        list(kids.items),
        {count.status: count.count for count in kids.status_counts},
        bool(kids.next_page_token),
        found,
        runs,
        more_later,
    )


SUCCESSOR_CANDIDATES: Final = 20
"""Later runs whose start a suspended run's page reads to find its seed-era
successors (one record each)."""


async def _seed_era_successors(
    store: RuntimeStore, run: RunState, later: Sequence[RunState]
) -> list[str]:
    """Runs that continue ``run`` (their ``run_started`` names it as
    predecessor, §10.2): only a suspended run has them, and only runs of its
    session, agent and parent started no earlier can be one."""
    if run.status is not RunStatus.SUSPENDED:
        return []
    candidates = [
        other
        for other in later
        if other.agent_id == run.agent_id and other.parent_run_id == run.parent_run_id
    ][:SUCCESSOR_CANDIDATES]
    found = []
    for other in candidates:
        if await predecessor(store, other.run_id) == run.run_id:
            found.append(other.run_id)
    return found


async def predecessor(store: RuntimeStore, run_id: str) -> str:
    """The run ``run_id`` continues, from its ``run_started`` payload (§5.2), or ""."""
    try:
        page = await store.list_run_records(run_id, "", 1)
    except NotFoundError:
        return ""
    if not page.events:
        return ""
    value = json_object(page.events[0].payload).get("predecessor_run_id")
    return value if isinstance(value, str) else ""


SEED_RECORDS: Final = 20
"""Seed records a run's page shows (one ListRunSeedRecords page); the rest
stay a page away (``runstore export --seed``)."""


@dataclass(frozen=True, slots=True)
class SeedShown:
    """A run's seed (§9.7) as its page shows it."""

    seed: RunSeed | None
    """None when the store no longer holds it."""
    records: list[SeedRecord]
    more: bool


async def seed_of(store: RuntimeStore, run: RunState) -> SeedShown | None:
    """The published seed the run started from (its header and first
    ``SEED_RECORDS`` history records), None for a run without one."""
    if not run.seed_end_id:
        return None
    try:
        seed = await store.load_run_seed(run.run_id, run.seed_end_id)
        page = await store.list_run_seed_records(run.run_id, run.seed_end_id, "", SEED_RECORDS)
    except NotFoundError:
        return SeedShown(None, [], False)
    return SeedShown(seed, list(page.records), bool(page.next_cursor))
