"""What the console's screens read, through the store core the gRPC servicers call.

Record lists open at their tail: the store tells the newest record's position
(``run_tail``, ``session_tail``: one index lookup), the store pages forwards
from a cursor (the number of records already read), and record IDs (and
session positions) are dense, so the page just before position ``before`` is
the forward page that starts ``page`` records earlier. No request reads more
than one page of records, however long the history is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runstore.contract.errors import NotFoundError
from runstore.contract.model import RunStatus
from runstore.server.console.render import json_object
from runstore.server.core.model import Page, RunRecord, RunState
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


def run_tree(runs: list[RunState]) -> list[RunNode]:
    """The session's runs as a forest: roots first in start order, each with its
    children (in start order); a child whose parent is not listed is a root."""
    nodes = {run.run_id: RunNode(run, []) for run in runs}
    roots: list[RunNode] = []
    for run in runs:
        parent = nodes.get(run.parent_run_id) if run.parent_run_id else None
        (parent.children if parent is not None else roots).append(nodes[run.run_id])
    return roots


def run_kind(run: RunState) -> str:
    """root, child, one-shot or one-shot child (sessionless runs are one-shot, §9.2.3)."""
    if not run.session_id:
        return "one-shot child" if run.parent_run_id else "one-shot"
    return "child" if run.parent_run_id else "root"


SUCCESSOR_CANDIDATES = 20
"""Later runs of the session whose start a suspended run's page reads to find
its successors (one record each)."""


async def successors(store: RuntimeStore, run: RunState, session_runs: list[RunState]) -> list[str]:
    """Runs that continue ``run`` (their ``run_started`` names it as
    predecessor, §10.2): only a suspended run has them, and only runs of its
    session, agent and parent started no earlier can be one."""
    if run.status is not RunStatus.SUSPENDED:
        return []
    candidates = [
        other
        for other in session_runs
        if other.run_id != run.run_id
        and other.agent_id == run.agent_id
        and other.parent_run_id == run.parent_run_id
        and other.started_at >= run.started_at
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
