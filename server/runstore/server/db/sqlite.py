"""The embedded backend: SQLite in WAL mode, one writer thread, reader threads.

SQLite allows one writer at a time, so runstore gives it exactly one: a
dedicated thread that owns the write connection and runs each write
transaction start to finish (``BEGIN IMMEDIATE`` ... ``COMMIT``). Readers use
their own connections and threads; WAL gives each read transaction a snapshot.

A transaction function is an ``async`` function of the store core. On SQLite
every database call returns at once, so the function never suspends; the
worker thread drives it to completion without an event loop, in one hop from
the server's loop and back. The writer commits before any caller is answered.
A group's transaction is ``sqlite_groups``'; the WAL sync ``sqlite_wal_sync``'.
Each job carries the scope (``call_scope``) of the call that submitted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy.dialects import sqlite as sqlite_dialect

from runstore.contract.errors import (
    UnavailableError,
)
from runstore.server import call_scope
from runstore.server.call_scope import ALL_NAMESPACES, Scope
from runstore.server.config import DEFAULTS, SQLITE_SYNCHRONOUS_LEVELS
from runstore.server.core.model import GuardedChange, RecordDraft, RunEnding, RunState
from runstore.server.core.ports import Transaction
from runstore.server.db import bound
from runstore.server.db.sqlite_groups import (
    GroupedAppend,
    SqliteTransaction,
    run_group,
)
from runstore.server.db.sqlite_wal_sync import Resolved, Synced, WalSyncer, resolve_all
from runstore.server.db.statements import Statements
from runstore.server.db.transaction import SqlTransaction
from runstore.server.db.wakeups import LocalWakeups
from runstore.server.metrics import DbFigures

log = logging.getLogger(__name__)

T = TypeVar("T")

SYNCHRONOUS_LEVELS: Final = SQLITE_SYNCHRONOUS_LEVELS


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """How the embedded database trades durability for speed."""

    synchronous: str = DEFAULTS.sqlite_synchronous
    """The durability asked for, named after SQLite's ``PRAGMA synchronous``.
    FULL (and EXTRA): no caller is answered before its commit is synced, so an
    acknowledged write survives power loss; runstore gets there with NORMAL on
    the connections plus its own WAL sync (``WalSyncer``), not with SQLite's
    FULL. NORMAL syncs only at checkpoints: a power loss may drop the commits
    acknowledged since the last one, never corrupt the file. OFF never syncs.
    ``tests/server/test_power_loss.py`` cuts the power under FULL and NORMAL."""
    readers: int = DEFAULTS.sqlite_readers
    """Reader threads, each with its own connection."""
    busy_timeout_ms: int = 5000
    """How long a connection waits for a lock held by another process."""
    write_group_limit: int = 64
    """Most write transactions committed together (group commit)."""
    read_group_limit: int = 16
    """Most reads served by one read transaction."""
    operation_timeout: float = DEFAULTS.db_operation_timeout
    """Seconds one call's database work may take in all (``db.bound``)."""


_Job = tuple[
    Callable[[Transaction], Coroutine[Any, Any, Any]],
    asyncio.Future[Any],
    asyncio.AbstractEventLoop,
    Scope,
]
"""A transaction function, its caller's future and loop, and the scope
of the call that submitted it (read on the event loop, docs/namespaces.md)."""


def _expire(future: asyncio.Future[Any], timeout: float) -> None:
    if not future.done():
        log.warning("sqlite did not answer within %.1f s", timeout)
        future.set_exception(bound.timed_out(timeout))


class _Worker(threading.Thread):
    """Owns one connection and runs queued transaction functions in groups.

    Whatever is queued when the worker wakes runs in one database transaction
    (``run_group``), and one commit (one fsync under ``synchronous=FULL``) makes
    the whole group durable before any caller is answered (group commit).
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        jobs: queue.SimpleQueue[_Job | None],
        begin: str,
        statements: Statements,
        *,
        group_limit: int,
        syncer: WalSyncer | None = None,
        wakeups: LocalWakeups | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._syncer = syncer
        self._wakeups = wakeups
        self._connect = connect
        self._jobs = jobs
        self._begin = begin
        self._statements = statements
        self._group_limit = group_limit
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self.figures: DbFigures | None = None
        """Set on the writer: group sizes are recorded there."""

    def run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self.startup_error = exc
            self.ready.set()
            return
        self.ready.set()
        tx = SqliteTransaction(conn, self._statements)
        try:
            while True:
                group, stop = self._next_group()
                if group:
                    self._run_group(conn, tx, group)
                if stop:
                    return
        finally:
            conn.close()

    def _next_group(self) -> tuple[list[_Job], bool]:
        """The next job (waiting for it), plus whatever else is already queued."""
        first = self._jobs.get()
        if first is None:
            return [], True
        group = [first] if not first[1].done() else []
        return group, self._drain(group)

    def _drain(self, group: list[_Job]) -> bool:
        """Adds queued jobs to ``group``; a job whose caller went away (it
        cancelled, or its bound passed) is dropped unrun."""
        while len(group) < self._group_limit:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return False
            if job is None:
                return True
            if not job[1].done():
                group.append(job)
        return False

    def _run_group(
        self, conn: sqlite3.Connection, tx: SqliteTransaction, group: list[_Job]
    ) -> None:
        number = self._wakeups.begin_commit() if self._wakeups is not None else 0
        if self.figures is not None:
            self.figures.sqlite_batch(len(group))
        outcomes = run_group(
            conn, tx, [fn for fn, _, _, _ in group], [ns for _, _, _, ns in group], self._begin
        )
        keys, tx.touched = tx.touched, set()
        loops: dict[asyncio.AbstractEventLoop, Resolved] = {}
        for (_, future, loop, _), (result, error) in zip(group, outcomes, strict=True):
            loops.setdefault(loop, []).append((future, result, error))
        if self._syncer is not None:
            self._syncer.submit(Synced(loops, number, keys, self._wakeups))
            return
        if self._wakeups is not None:
            self._wakeups.wake_threadsafe(keys)
        for loop, resolved in loops.items():
            loop.call_soon_threadsafe(resolve_all, resolved)


class SqliteDatabase:
    """``Database`` over one SQLite file."""

    figures: DbFigures | None = None
    """Where commit group sizes and WAL syncs are recorded; None when metrics are off."""

    def __init__(self, path: Path, options: SqliteOptions = SqliteOptions()) -> None:
        if options.synchronous.upper() not in SYNCHRONOUS_LEVELS:
            raise ValueError(
                f"sqlite synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, "
                f"not {options.synchronous!r}"
            )
        self.path = path
        self.options = options
        self._statements = Statements.compile(sqlite_dialect.dialect(paramstyle="named"))
        self._writes: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._workers: list[_Worker] = []
        self._syncer: WalSyncer | None = None
        self._wakeups: LocalWakeups | None = None
        self._retaining = False

    @contextlib.asynccontextmanager
    async def retention_lock(self) -> AsyncIterator[bool]:
        """Whether a retention pass may run now: one at a time in this process
        (one server serves a SQLite file; its single writer orders the rest)."""
        if self._retaining:
            yield False
            return
        self._retaining = True
        try:
            yield True
        finally:
            self._retaining = False

    @property
    def wakeups(self) -> LocalWakeups:
        """Watchers' wake-ups: after the WAL sync under FULL, else after the commit."""
        if self._wakeups is None:
            raise UnavailableError("database is not open")
        return self._wakeups

    @property
    def _syncs_itself(self) -> bool:
        """FULL durability by our own WAL sync (``WalSyncer``) instead of SQLite's."""
        return self.options.synchronous.upper() in ("FULL", "EXTRA")

    def _connect(self, *, read_only: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL and EXTRA are NOT passed to SQLite: the connection runs NORMAL (no
        # sync inside COMMIT) and WalSyncer fdatasyncs the WAL before any caller
        # of the committed batch is answered, which is FULL's promise without
        # stalling the writer on each sync. NORMAL and OFF go to SQLite as they are.
        synchronous = "NORMAL" if self._syncs_itself else self.options.synchronous.upper()
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        if read_only:
            conn.execute("PRAGMA query_only = ON")
        return conn

    async def start(self) -> None:
        """Opens the connections (the schema must already be at head)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # WAL is a property of the file: switch it once, before several
        # connections race to do it.
        await asyncio.to_thread(lambda: self._connect(read_only=False).close())
        self._wakeups = LocalWakeups()
        self._wakeups.tracks_durability = self._syncs_itself
        if self._syncs_itself:
            self._syncer = WalSyncer(Path(f"{self.path}-wal"))
            self._syncer.figures = self.figures
            self._syncer.start()
        self._workers.append(
            _Worker(
                "runstore-sqlite-writer",
                lambda: self._connect(read_only=False),
                self._writes,
                "BEGIN IMMEDIATE",
                self._statements,
                group_limit=self.options.write_group_limit,
                syncer=self._syncer,
                wakeups=self._wakeups,
            )
        )
        for index in range(max(1, self.options.readers)):
            self._workers.append(
                _Worker(
                    f"runstore-sqlite-reader-{index}",
                    lambda: self._connect(read_only=True),
                    self._reads,
                    "BEGIN",
                    self._statements,
                    group_limit=self.options.read_group_limit,
                )
            )
        self._workers[0].figures = self.figures
        for worker in self._workers:
            worker.start()
        for worker in self._workers:
            await asyncio.to_thread(worker.ready.wait)
            if worker.startup_error is not None:
                await self.close()
                raise worker.startup_error

    async def close(self) -> None:
        """Stops the workers after the transactions already queued."""
        self._writes.put(None)
        for _ in range(len(self._workers) - 1):
            self._reads.put(None)
        for worker in self._workers:
            await asyncio.to_thread(worker.join)
        self._workers.clear()
        if self._syncer is not None:
            await asyncio.to_thread(self._syncer.stop)
            self._syncer = None

    async def write(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        return await self._submit(self._writes, fn)

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        """A write like any other: the writer thread serialises it, and group
        commit already spares it a transaction of its own; with the other
        appends of its commit group it is one statement."""
        result: int | None = await self._submit(self._writes, GroupedAppend((record,), single=True))
        return result

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        """Two statements in the writer's commit group, like any write."""

        async def fn(tx: Transaction) -> int | None:
            assert isinstance(tx, SqlTransaction)
            return await tx.start_if_new(run, started)

        return await self._submit(self._writes, fn)

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        """Three statements in the writer's commit group, like any write."""

        async def fn(tx: Transaction) -> tuple[int, int] | None:
            assert isinstance(tx, SqlTransaction)
            return await tx.start_child_if_new(run, link, started)

        return await self._submit(self._writes, fn)

    async def end_if_running(self, ending: RunEnding) -> int | None:
        """Two statements in the writer's commit group, like any write."""

        async def fn(tx: Transaction) -> int | None:
            assert isinstance(tx, SqlTransaction)
            return await tx.end_if_running(ending)

        return await self._submit(self._writes, fn)

    async def change_if_running(self, change: GuardedChange) -> int | None:
        """Two statements in the writer's commit group, like any write."""

        async def fn(tx: Transaction) -> int | None:
            assert isinstance(tx, SqlTransaction)
            return await tx.change_if_running(change)

        return await self._submit(self._writes, fn)

    async def append_records_if_writable(self, batch: Sequence[RecordDraft]) -> list[int] | None:
        """A write like ``append_if_writable``."""
        result: list[int] | None = await self._submit(
            self._writes, GroupedAppend(batch, single=False)
        )
        return result

    async def read(self, fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        return await self._submit(self._reads, fn)

    async def _submit(
        self,
        jobs: queue.SimpleQueue[_Job | None],
        fn: Callable[[Transaction], Coroutine[Any, Any, T]],
    ) -> T:
        if not self._workers:
            raise UnavailableError("database is not open")
        timeout = self.options.operation_timeout
        until = bound.deadline(timeout)
        bound.remaining(until, timeout)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        jobs.put((fn, future, loop, call_scope.scope()))
        # The bound passing or the call being cancelled settles the future:
        # the worker drops the job if it has not started it; a running SQLite
        # transaction cannot be interrupted and finishes (or not) unobserved.
        timer = loop.call_at(until, _expire, future, timeout)
        try:
            return await future
        finally:
            timer.cancel()

    @property
    def is_open(self) -> bool:
        return bool(self._workers)

    async def ping(self, within: float) -> None:
        """Raises unless the writer runs a trivial transaction within
        ``within`` seconds.

        Only the writer: it is what a hung disk or another process's lock
        stops, and its group commits keep its queue short. The readers' queue
        may legitimately hold many large pages (a burst of reads, or clients
        that do not read), and a probe waiting behind them would report a
        busy, working server as down."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within

        async def probe(tx: Transaction) -> None:
            await tx.namespace_tombstoned("")

        if not self._workers:
            raise UnavailableError("database is not open")
        future: asyncio.Future[None] = loop.create_future()
        self._writes.put((probe, future, loop, ALL_NAMESPACES))
        await asyncio.wait_for(future, max(0.0, until - loop.time()))
