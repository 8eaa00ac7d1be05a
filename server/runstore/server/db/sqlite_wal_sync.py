"""The SQLite backend's WAL sync (``SqliteOptions.synchronous`` FULL): a thread
that makes committed groups durable with one ``fdatasync`` for every group
committed meanwhile, then answers their callers on their loops."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runstore.contract.errors import UnavailableError
from runstore.server.db.wakeups import LocalWakeups
from runstore.server.metrics import DbFigures

log = logging.getLogger("runstore.server.db.sqlite")  # the backend's log, as before the split


Resolved = list[tuple[asyncio.Future[Any], Any, BaseException | None]]


def resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller went away; the transaction still committed or not
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def resolve_all(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        resolve(future, result, error)


@dataclass(frozen=True, slots=True)
class Synced:
    """One committed group waiting for its WAL sync: its callers, its number
    (``LocalWakeups.begin_commit``) and the wake-up keys it wrote."""

    resolved: dict[asyncio.AbstractEventLoop, Resolved]
    commit_number: int
    keys: set[str]
    wakeups: LocalWakeups | None


class WalSyncer(threading.Thread):
    """Makes committed groups durable with one ``fdatasync`` of the WAL for
    every group committed meanwhile, then answers their callers.

    The writer commits with ``synchronous=NORMAL`` (no fsync inside SQLite) and
    goes on with the next group while this thread syncs the previous ones, so
    the fsync no longer stalls the writer. A caller is answered only after a
    sync that began after its commit: its write survives power loss, exactly
    as with ``synchronous=FULL``. (Another caller may read it a moment before
    it is durable.)
    """

    def __init__(self, wal_path: Path) -> None:
        super().__init__(name="runstore-sqlite-wal-sync", daemon=True)
        self._wal_path = wal_path
        self.figures: DbFigures | None = None
        self._pending: queue.SimpleQueue[Synced | None] = queue.SimpleQueue()

    def submit(self, synced: Synced) -> None:
        self._pending.put(synced)

    def stop(self) -> None:
        self._pending.put(None)
        self.join()

    def run(self) -> None:
        fd = -1
        try:
            while True:
                first = self._pending.get()
                if first is None:
                    return
                groups, stop = [first], False
                while True:
                    try:
                        item = self._pending.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stop = True
                        break
                    groups.append(item)
                error: BaseException | None = None
                try:
                    if fd < 0:
                        fd = os.open(self._wal_path, os.O_RDWR)
                    started = time.perf_counter()
                    os.fdatasync(fd)
                    if self.figures is not None:
                        self.figures.sqlite_sync(time.perf_counter() - started)
                except OSError as exc:
                    log.error("syncing the SQLite WAL failed: %s", exc)
                    error = UnavailableError(f"database sync failed: {exc}")
                if error is None and groups[0].wakeups is not None:
                    # Watchers may send these groups' records only now.
                    groups[0].wakeups.synced_threadsafe(
                        max(group.commit_number for group in groups),
                        set().union(*(group.keys for group in groups)),
                    )
                for group in groups:
                    for loop, outcomes in group.resolved.items():
                        if error is not None:
                            outcomes = [(future, None, error) for future, _, _ in outcomes]
                        loop.call_soon_threadsafe(resolve_all, outcomes)
                if stop:
                    return
        finally:
            if fd >= 0:
                os.close(fd)
