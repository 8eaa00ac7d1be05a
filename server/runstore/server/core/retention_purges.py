"""Retention (docs/contract.md §9.10): purging, in bounded calls, the ended
sessions and the finished sessionless runs older than a cut-off.

Each session (each run family) goes in a transaction of its own that re-checks
it under its locks, so concurrent purgers never purge one twice or touch what
still runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from runstore.contract.model import RunStatus, SessionStatus
from runstore.server.core import validation
from runstore.server.core.model import NamespaceRetention, Nanos, RunFinish, Session
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.section import Section

T = TypeVar("T")

_FINISHED: Final = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED})
"""The statuses sessionless retention deletes (suspended runs can be continued)."""

PURGE_PARALLEL: Final = 8
"""Retention transactions (one session, one run family each) in flight at once
per call: SQLite commits them in one group commit, PostgreSQL on several pool
connections. Different sessions (families) share no row, so they never wait
for each other."""

_ROOTS_EXAMINED_PER_PURGE: Final = 4
"""A retention call examines at most this many candidate roots per root it may
purge, so skipped families cost a bounded amount of work per call."""


class RetentionPurges(Section):
    """The purges a retention pass runs."""

    async def namespace_retention(self) -> list[NamespaceRetention]:
        """Every active namespace with its retention overrides."""

        async def read(tx: Transaction) -> list[NamespaceRetention]:
            return await tx.namespace_retention()

        return await self._db.read(read)

    async def purge_ended_sessions(
        self, ended_before: Nanos | None, limit: int
    ) -> tuple[list[str], bool]:
        """Retention: purges up to ``limit`` ended, quiescent sessions ended before
        ``ended_before``, oldest first; returns those this call purged and whether
        more matched.

        Candidates are read first, then each is purged in its own transaction
        exactly as ``purge_session`` does, re-checked under the session's lock:
        a session that gained a running run, or that another replica purged
        meanwhile, is skipped, so concurrent purgers report each session once
        and touch nothing else.
        """
        batch = validation.check_purge_batch(ended_before, "ended_before", limit)
        assert ended_before is not None

        async def candidates(tx: Transaction) -> list[str]:
            return await tx.purgeable_sessions(ended_before, batch + 1)

        found = await self._db.read(candidates)

        def purge_one(session_id: str) -> Callable[[Transaction], Coroutine[Any, Any, bool]]:
            async def tx_fn(tx: Transaction) -> bool:
                session = await tx.session(session_id, for_update=True)
                if not isinstance(session, Session) or session.status is not SessionStatus.ENDED:
                    return False  # purged by another caller meanwhile (or reopened: never)
                if session.ended_at is None or session.ended_at >= ended_before:
                    return False
                if await tx.session_has_running_runs(session_id):
                    return False
                await tx.purge_session(session_id, self._clock())
                return True

            return tx_fn

        done = await _in_parallel([purge_one(session_id) for session_id in found[:batch]], self._db)
        purged = [session_id for session_id, ok in zip(found[:batch], done, strict=True) if ok]
        return purged, len(found) > batch

    async def purge_sessionless_runs(
        self, finished_before: Nanos | None, limit: int
    ) -> tuple[list[str], bool]:
        """Retention: deletes up to ``limit`` finished sessionless root runs
        finished before ``finished_before``, oldest first, each with its
        one-shot children (at any depth) and every record, and leaves a run
        tombstone for each (§9.10.2). Returns the IDs this call deleted (a root
        before its children) and whether more roots may match.

        Each root's family goes in one transaction, re-checked under the locks
        of the root, then of its children: a family with a run still running
        (or suspended), or one that finished at or after the cut-off, is
        skipped whole, never partly deleted; a root another caller deleted
        first is skipped and not reported. Skipped roots are stepped over
        (keyset), so they never stop the roots after them.
        """
        batch = validation.check_purge_batch(finished_before, "finished_before", limit)
        assert finished_before is not None
        budget = batch * _ROOTS_EXAMINED_PER_PURGE
        families: list[list[str]] = []
        after: tuple[Nanos, str] | None = None

        def purged() -> list[str]:
            return [run_id for family in families for run_id in family]

        while len(families) < batch and budget > 0:
            wanted = min(batch - len(families), budget)

            async def candidates(
                tx: Transaction, after: tuple[Nanos, str] | None = after, wanted: int = wanted
            ) -> list[tuple[str, Nanos]]:
                return await tx.purgeable_sessionless_runs(finished_before, after, wanted + 1)

            found = await self._db.read(candidates)
            page = found[:wanted]
            budget -= len(page)
            if page:
                after = (page[-1][1], page[-1][0])
            deleted = await _in_parallel(
                [self._purge_family(run_id, finished_before) for run_id, _ in page], self._db
            )
            families.extend(family for family in deleted if family)
            if len(found) <= wanted:
                return purged(), False
        return purged(), True

    def _purge_family(
        self, root_id: str, finished_before: Nanos
    ) -> Callable[[Transaction], Coroutine[Any, Any, list[str]]]:
        def qualifies(run: RunFinish | None) -> bool:
            return (
                run is not None
                and not run.session_id
                and run.status in _FINISHED
                and run.finished_at is not None
                and run.finished_at < finished_before
            )

        async def tx_fn(tx: Transaction) -> list[str]:
            root = await tx.lock_run_ending(root_id)
            if root is None or root.parent_run_id or not qualifies(root):
                return []  # deleted by another caller meanwhile, or never a candidate
            family, frontier = [root_id], [root_id]
            while frontier:
                children = await tx.lock_child_run_endings(frontier.pop())
                if not all(qualifies(child) for child in children):
                    return []
                family.extend(child.run_id for child in children)
                frontier.extend(child.run_id for child in children)
            purged_at = self._clock()
            for run_id in family:
                await tx.purge_sessionless_run(run_id, purged_at)
            return family

        return tx_fn


async def _in_parallel(
    transactions: list[Callable[[Transaction], Coroutine[Any, Any, T]]], db: Database
) -> list[T]:
    """Each function in a write transaction of its own, ``PURGE_PARALLEL`` at a
    time; results in the order given. On a failure every other transaction
    still ends (committed or not) before the first error is raised, so none
    outlives the call."""
    gate = asyncio.Semaphore(PURGE_PARALLEL)

    async def one(fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        async with gate:
            return await db.write(fn)

    results = await asyncio.gather(*(one(fn) for fn in transactions), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [result for result in results if not isinstance(result, BaseException)]
