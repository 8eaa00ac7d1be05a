"""Wake-ups for watchers (``core.ports.Wakeups``): in process, and across
replicas through PostgreSQL ``LISTEN/NOTIFY``.

A wake-up only says "look again": watchers re-read from their own cursor, so
a lost notification delays a record by at most the poll interval and a
spurious one costs one read. Writers never wait for a wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from runstore.server.backoff import Backoff
from runstore.server.db.connect_pacing import close_connection
from runstore.server.open_per_key import OpenPerKey

log = logging.getLogger(__name__)

CHANNEL: Final = "runstore_records"
"""The PostgreSQL notification channel every replica listens on."""

LISTENERS_CHANNEL: Final = "runstore_listeners"
"""Where a replica says it has begun to LISTEN, so the others notify at once
instead of after their next look at who listens."""

LISTENER_APPLICATION: Final = "runstore-watch"
"""``application_name`` of a replica's LISTEN connection: how the others count listeners."""

NOTIFIER_APPLICATION: Final = "runstore-notify"
"""``application_name`` of a replica's NOTIFY connection (not the calls' pool)."""

_LISTENERS_QUERY: Final = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND application_name = $1 AND pid <> $2"
)

_PAYLOAD_BYTES: Final = 7000
"""Keys per NOTIFY are cut below PostgreSQL's 8000-byte payload limit."""


class LocalWakeups:
    """Events of this process's watchers by key, plus SQLite's durability mark.

    ``wake`` and ``durable`` run on the loop the hub was made on; other threads
    use ``wake_threadsafe`` and ``synced_threadsafe``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._events: OpenPerKey[asyncio.Event] = OpenPerKey()
        self._lock = threading.Lock()
        self._begun = 0
        """Commit batches the SQLite writer has started (set before they are visible)."""
        self._synced = 0
        """Commit batches known durable."""
        self._sync_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.tracks_durability = False
        """True when commits become durable later than visible (SQLite FULL)."""

    @contextlib.contextmanager
    def subscribe(self, key: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._events.add(key, event)
        try:
            yield event
        finally:
            self._events.discard(key, event)

    def wake(self, keys: Iterable[str]) -> None:
        for key in keys:
            for event in self._events.live(key):
                event.set()

    def wake_all(self) -> None:
        for event in self._events.every():
            event.set()

    def wake_threadsafe(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            self._loop.call_soon_threadsafe(self.wake, keys)

    def watching(self, key: str) -> bool:
        return key in self._events

    # --- Durability (SQLite FULL) ---------------------------------------------

    def begin_commit(self) -> int:
        """The writer thread numbers a batch before its commit becomes visible."""
        with self._lock:
            self._begun += 1
            return self._begun

    def synced_threadsafe(self, through: int, keys: Iterable[str]) -> None:
        """The syncer made every batch up to ``through`` durable."""
        keys = list(keys)
        self._loop.call_soon_threadsafe(self._synced_through, through, keys)

    def _synced_through(self, through: int, keys: list[str]) -> None:
        self._synced = max(self._synced, through)
        waiting = []
        for target, future in self._sync_waiters:
            if target <= self._synced:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((target, future))
        self._sync_waiters = waiting
        self.wake(keys)

    async def durable(self) -> None:
        if not self.tracks_durability:
            return
        with self._lock:
            target = self._begun
        if target <= self._synced:
            return
        future: asyncio.Future[None] = self._loop.create_future()
        self._sync_waiters.append((target, future))
        await future


class PostgresWakeups:
    """``LocalWakeups`` for this replica plus one LISTEN connection that fans
    other replicas' notifications out to it, and a sender that NOTIFYs after
    commits for the other replicas, at little cost to the database:

    * coalesced: keys pile up while one notification is on its way, and one
      leaves at most every ``notify_interval`` seconds (a few milliseconds:
      the added cross-replica latency);
    * only while another replica listens: the sender looks at who listens
      (``pg_stat_activity``) at most every ``listeners_seconds`` while there
      is something to send, and a replica that begins to listen says so on
      ``LISTENERS_CHANNEL``, so the others start notifying at once;
    * on a connection of its own (``notify_connect``), never one of the
      calls' pool, in one transaction per notification.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        notify_connect: Callable[[], Any],
        *,
        reconnect_seconds: float = 1.0,
        notify_interval: float = 0.005,
        listeners_seconds: float = 1.0,
        timeout: float = 10.0,
    ) -> None:
        self.local = LocalWakeups()
        self._connect = connect
        self._notify_connect = notify_connect
        self._reconnect_seconds = reconnect_seconds
        self._backoff = Backoff(0.05, max(0.05, reconnect_seconds))
        """Pauses between LISTEN reconnects, half random, doubling to ``reconnect_seconds``."""
        self._notify_interval = notify_interval
        self._listeners_seconds = listeners_seconds
        self._timeout = timeout
        self._origin = uuid.uuid4().hex
        """Names this replica in its notifications, so it skips its own."""
        self._pending: set[str] = set()
        self._has_pending = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._listener_pid = 0
        """The backend of this replica's LISTEN connection (not counted as another's)."""
        self._notifier: Any = None
        self._others_listen = False
        self._listeners_checked = -math.inf
        self.notifications = 0
        """Notifications sent (tests read it)."""
        self.listening = asyncio.Event()
        """Set while the LISTEN connection is up (tests wait for it)."""

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._send_forever())]

    def _listen_once_watched(self) -> None:
        """The LISTEN connection opens with this replica's first watcher (a
        replica nobody watches holds no extra connection) and then stays."""
        if self._listener is None:
            self._listener = asyncio.ensure_future(self._listen_forever())
            self._tasks.append(self._listener)

    async def close(self) -> None:
        """Cancels the sender and the listener until they end: on Python 3.11
        ``asyncio.wait_for`` can swallow a cancellation that arrives as its
        inner call completes, and the task would then wait for work forever."""
        pending = {task for task in self._tasks if not task.done()}
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.1)
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
        self._tasks = []
        self._listener = None
        await self._drop_notifier()

    # Wakeups port: this replica's watchers.
    def subscribe(self, key: str) -> contextlib.AbstractContextManager[asyncio.Event]:
        self._listen_once_watched()
        return self.local.subscribe(key)

    def wake_all(self) -> None:
        self.local.wake_all()

    async def durable(self) -> None:
        """A PostgreSQL commit is durable when it is visible."""

    def committed(self, keys: Iterable[str]) -> None:
        """After a commit: wake this replica's watchers now, the others soon."""
        keys = set(keys)
        if not keys:
            return
        self.local.wake(keys)
        self._pending |= keys
        self._has_pending.set()

    async def _send_forever(self) -> None:
        loop = asyncio.get_running_loop()
        last_sent = -math.inf
        while True:
            await self._has_pending.wait()
            wait = last_sent + self._notify_interval - loop.time()
            if wait > 0:  # only right after a notification: an idle replica sends at once
                await asyncio.sleep(wait)
            self._has_pending.clear()
            keys, self._pending = self._pending, set()
            try:
                if not await self._anyone_listening():
                    continue  # nobody to wake; a replica that starts listening re-reads
                for payload in _payloads(self._origin, keys):
                    await self._notify(payload)
                    self.notifications += 1
            except Exception as exc:  # the poll interval covers a lost wake-up
                log.warning("NOTIFY failed (watchers fall back to polling): %s", exc)
                await self._drop_notifier()
            last_sent = loop.time()

    async def _notifier_connection(self) -> Any:
        if self._notifier is None or self._notifier.is_closed():
            conn = await asyncio.wait_for(self._notify_connect(), self._timeout)
            try:
                await asyncio.wait_for(
                    conn.add_listener(LISTENERS_CHANNEL, self._listener_announced), self._timeout
                )
            except BaseException:
                conn.terminate()
                raise
            self._notifier = conn
        return self._notifier

    async def _drop_notifier(self) -> None:
        conn, self._notifier = self._notifier, None
        if conn is not None:
            await close_connection(conn, 1)

    async def _anyone_listening(self) -> bool:
        """Whether another replica LISTENs: looked up at most every
        ``listeners_seconds``, and true at once when one says it has begun."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._listeners_checked >= self._listeners_seconds:
            conn = await self._notifier_connection()
            count = await asyncio.wait_for(
                conn.fetchval(_LISTENERS_QUERY, LISTENER_APPLICATION, self._listener_pid),
                self._timeout,
            )
            self._others_listen = bool(count)
            self._listeners_checked = loop.time()
        return self._others_listen

    def _listener_announced(self, _conn: Any, _pid: int, _channel: str, origin: str) -> None:
        if origin != self._origin:
            self._others_listen = True
            self._listeners_checked = asyncio.get_running_loop().time()

    async def _notify(self, payload: str) -> None:
        """One NOTIFY, in a transaction of its own on the notifier connection:
        after the commit, never inside a write transaction (that would
        serialise every writer), bounded so a frozen server cannot hold it."""
        conn = await self._notifier_connection()
        await asyncio.wait_for(
            conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload), self._timeout
        )

    async def _listen_forever(self) -> None:
        """Keeps one LISTEN connection, reconnecting (to whichever host is the
        primary then) after a jittered, growing pause. Notifications sent
        while it was down are lost, so every watcher looks again once it
        listens: a stream continues from its cursor without waiting for
        its next poll."""
        failures = 0
        while True:
            try:
                conn = await self._connect()
            except Exception as exc:
                log.warning("cannot LISTEN for watch wake-ups (polling meanwhile): %s", exc)
                failures += 1
                await asyncio.sleep(self._pause(failures))
                continue
            lost = asyncio.Event()
            try:
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._received)
                self._listener_pid = conn.get_server_pid()
                # The others notify once they know: say so, then re-read once
                # they surely do, for records committed before they knew.
                await conn.execute("SELECT pg_notify($1, $2)", LISTENERS_CHANNEL, self._origin)
                self.listening.set()
                failures = 0
                asyncio.get_running_loop().call_later(
                    max(0.05, 4 * self._notify_interval), self.local.wake_all
                )
                await lost.wait()
                log.warning("the LISTEN connection closed; reconnecting")
            except Exception as exc:
                log.warning("LISTEN connection failed (polling meanwhile): %s", exc)
            finally:
                self.listening.clear()
                await close_connection(conn, 1)
            failures += 1
            await asyncio.sleep(self._pause(failures))

    def _pause(self, failures: int) -> float:
        """Replicas that lost the database together do not reconnect together."""
        return self._backoff.pause(failures)

    def _received(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            origin, keys = json.loads(payload)
        except (ValueError, TypeError):
            return
        if origin != self._origin:  # our own watchers were woken at commit
            self.local.wake(keys)


def _payloads(origin: str, keys: set[str]) -> Iterator[str]:
    """JSON ``[origin, [keys...]]`` payloads, each under PostgreSQL's limit."""
    batch: list[str] = []
    size = 0
    for key in sorted(keys):
        length = len(json.dumps(key).encode())
        if length > _PAYLOAD_BYTES:
            continue  # an absurdly long ID: its watchers rely on polling
        if batch and size + length > _PAYLOAD_BYTES:
            yield json.dumps([origin, batch])
            batch, size = [], 0
        batch.append(key)
        size += length + 1
    if batch:
        yield json.dumps([origin, batch])
