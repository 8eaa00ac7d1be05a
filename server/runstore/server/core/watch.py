"""Watch: a session's or a run's records as they commit (docs/contract.md §9.9).

One loop for both RPCs: read the next page after the cursor, wait until it is
durable, hand it over, and only when the caller has taken it read again; when
nothing is left, wait for a wake-up, the poll interval or the heartbeat. The
cursor alone says where a stream is, so a wake-up is only ever a hint: a lost
one delays a record by at most the poll interval, and a record is never sent
twice or skipped (positions are dense and taken under the session's or run's
lock, so they commit in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

from runstore.contract.errors import OverloadedError, RunNotFoundError, UnavailableError
from runstore.contract.model import RunStatus
from runstore.server import call_scope
from runstore.server.config import DEFAULTS
from runstore.server.core import paging
from runstore.server.core.model import RunRecord
from runstore.server.core.ports import Wakeups, run_key, session_key
from runstore.server.core.store import RuntimeStore

Read = Callable[[int], Awaitable[tuple[paging.Cut, bool]]]
"""Reads the page after a position; True when nothing can follow it."""


@dataclass(frozen=True, slots=True)
class WatchSettings:
    heartbeat_seconds: float = DEFAULTS.watch_heartbeat_seconds
    """An idle stream sends an empty batch this often."""
    poll_seconds: float = DEFAULTS.watch_poll_seconds
    """A stream re-reads its cursor at least this often, woken or not."""
    max_watchers: int = DEFAULTS.max_watchers
    """Streams open at once in this server."""


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """One message of a stream: at most a page, or none (a heartbeat)."""

    events: list[RunRecord]
    next_cursor: str


class NoWakeups:
    """Wake-ups for a database that has none: watchers rely on polling."""

    @contextlib.contextmanager
    def subscribe(self, key: str) -> Iterator[asyncio.Event]:
        yield asyncio.Event()

    def wake_all(self) -> None:
        pass

    async def durable(self) -> None:
        pass


class RecordWatch:
    """Both Watch RPCs over a ``RuntimeStore``, limited to ``max_watchers``
    streams at once, and ended with UNAVAILABLE by ``close`` (SIGTERM)."""

    def __init__(
        self,
        store: RuntimeStore,
        wakeups: Wakeups,
        settings: WatchSettings = WatchSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._wakeups = wakeups
        self.settings = settings
        self._clock = clock
        self.open_streams = 0
        self._closing = False

    def close(self) -> None:
        """Ends every stream with UNAVAILABLE, so clients resume elsewhere."""
        self._closing = True
        self._wakeups.wake_all()

    async def session(self, session_id: str, cursor: str) -> AsyncIterator[WatchBatch]:
        """WatchSessionRunRecords: every record after ``cursor`` in session order."""
        after = paging.parse_cursor(cursor)

        async def read(position: int) -> tuple[paging.Cut, bool]:
            return await self._store.session_records_after(session_id, position), False

        async for batch in self._stream(
            session_key(call_scope.namespace(), session_id), after, read
        ):
            yield batch

    def refusal(self) -> OverloadedError | None:
        """The refusal of one more stream at the watcher limit
        (``--max-watchers``), or None: the one rule every live stream, a gRPC
        Watch's or a console page's, is admitted by."""
        if self.open_streams < self.settings.max_watchers:
            return None
        return OverloadedError(
            f"runstore is serving its maximum of {self.settings.max_watchers} watch "
            "streams; retry after a backoff or on another replica",
            details={"limit": "max_watchers", "max_watchers": str(self.settings.max_watchers)},
        )

    async def run(self, run_id: str, cursor: str) -> AsyncIterator[WatchBatch]:
        """WatchRunRecords: the run's records after ``cursor``, until its
        terminal or suspension record (at once when the cursor is past it).
        The run's status is read in the same snapshot as its records, so an
        ended status means its last record is in the page or before it."""
        after = paging.parse_cursor(cursor)
        session_id = ""

        async def read(position: int) -> tuple[paging.Cut, bool]:
            nonlocal session_id
            try:
                run, cut = await self._store.run_records_after(run_id, position)
            except RunNotFoundError:
                if session_id:  # the run was there: a purge took it
                    await self._store.load_session_status(session_id)
                raise
            session_id = run.session_id
            ended = run.status.is_terminal or run.status is RunStatus.SUSPENDED
            return cut, ended and not cut.more

        async for batch in self._stream(run_key(call_scope.namespace(), run_id), after, read):
            yield batch

    async def _stream(
        self,
        key: str,
        after: int,
        read: Read,
    ) -> AsyncIterator[WatchBatch]:
        refusal = self.refusal()
        if refusal is not None:
            raise refusal
        self.open_streams += 1
        try:
            with self._wakeups.subscribe(key) as woken:
                last_sent = self._clock()
                while True:
                    if self._closing:
                        raise UnavailableError("runstore is shutting down; resume elsewhere")
                    woken.clear()  # before the read: a commit after it sets it again
                    cut, finished = await read(after)
                    if cut.events:
                        await self._wakeups.durable()
                        after = cut.last_position
                        yield WatchBatch(cut.events, str(after))
                        last_sent = self._clock()
                    if finished:
                        return
                    if cut.more:
                        continue
                    heartbeat_at = last_sent + self.settings.heartbeat_seconds
                    timeout = min(self.settings.poll_seconds, heartbeat_at - self._clock())
                    if timeout > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(woken.wait(), timeout)
                    if not woken.is_set() and self._clock() >= heartbeat_at:
                        yield WatchBatch([], str(after) if after else "")
                        last_sent = self._clock()
        finally:
            self.open_streams -= 1
