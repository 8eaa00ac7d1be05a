"""The connections a replica opens outside its pool (LISTEN, NOTIFY, locks,
probes): reconnects that back off, so a database restart seen by many
replicas is not met by a storm of them (docs/failover.md, "Reconnects and the
connection budget"), and a close that never leaves one open."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import asyncpg

from runstore.contract.errors import UnavailableError
from runstore.server.backoff import Backoff

log = logging.getLogger(__name__)


class RefusedWhileDown(UnavailableError):
    """A call's UNAVAILABLE while the database refuses connections: the
    state's one line said why (``ConnectPacing``), so the call logs nothing
    more (``cause_logged``, read by ``error_status``)."""

    cause_logged: ClassVar[bool] = True


class ConnectPacing:
    """Paces new connections to a database that refuses them, so a restart
    seen by many replicas is not met by a storm of reconnects.

    While connections open, nothing waits. After a failed attempt the next
    one may start only after a pause that doubles with each failure (from
    ``first_pause`` to ``longest_pause``), half of it random so replicas
    drift apart, and only one attempt at a time: a connect waits for the
    pause (when it ends within the connect's ``timeout``, else it fails at
    once) or for the attempt under way, and fails if that attempt failed,
    without touching the database (its caller answers UNAVAILABLE). A
    success ends the pacing. So one replica makes at most one attempt per
    pause while the database is down, and reaches it again at most
    ``longest_pause`` after it is back.

    It also says when the database starts and stops refusing, one log line
    each (``what`` names it); the failures in between are that state's, and
    the callers that meet them log nothing more (``refusing``)."""

    def __init__(
        self, first_pause: float = 0.05, longest_pause: float = 2.0, *, what: str = "the database"
    ) -> None:
        self.first_pause = first_pause
        self.longest_pause = longest_pause
        self._backoff = Backoff(first_pause, max(first_pause, longest_pause))
        self.what = what
        self._failures = 0
        self._refusing_since = 0.0
        self._next_attempt = 0.0
        self._attempt: asyncio.Future[bool] | None = None
        """The outcome of the paced attempt under way, if one is."""

    @property
    def refusing(self) -> bool:
        """Whether the last attempt failed (its line was logged)."""
        return self._failures > 0

    async def connect(self, *args: Any, **kwargs: Any) -> Any:
        """``asyncpg.connect``, paced (also the pool's ``connect`` hook)."""
        loop = asyncio.get_running_loop()
        while self._failures:
            if self._attempt is not None:
                if not await asyncio.shield(self._attempt):
                    raise ConnectionRefusedError("the database refused the paced attempt")
                break
            wait = self._next_attempt - loop.time()
            if wait > 0:
                timeout = kwargs.get("timeout")
                if timeout is not None and wait > timeout:
                    raise ConnectionRefusedError("the database refused the last connection")
                await asyncio.sleep(wait)
                continue  # another caller may have begun the attempt meanwhile
            return await self._attempt_paced(loop, args, kwargs)
        return await self._connect(args, kwargs)

    async def _attempt_paced(
        self, loop: asyncio.AbstractEventLoop, args: Any, kwargs: dict[str, Any]
    ) -> Any:
        attempt = self._attempt = loop.create_future()
        succeeded = False
        try:
            conn = await self._connect(args, kwargs)
            succeeded = True
            return conn
        finally:
            self._attempt = None
            attempt.set_result(succeeded)

    async def _connect(self, args: Any, kwargs: dict[str, Any]) -> Any:
        try:
            conn = await asyncpg.connect(*args, **kwargs)
        except Exception as exc:  # not a cancelled caller: that says nothing of the database
            self._failed(exc)
            raise
        if self._failures:
            log.info(
                "%s accepts connections again (%d attempts refused over %.1fs)",
                self.what,
                self._failures,
                asyncio.get_running_loop().time() - self._refusing_since,
            )
        self._failures = 0
        return conn

    def _failed(self, exc: Exception) -> None:
        if not self._failures:
            self._refusing_since = asyncio.get_running_loop().time()
            log.warning(
                "%s refuses connections (%s: %s): calls answer UNAVAILABLE; trying again at "
                "most every %gs",
                self.what,
                type(exc).__name__,
                exc,
                self.longest_pause,
            )
        self._failures += 1
        pause = self._backoff.pause(self._failures)
        self._next_attempt = asyncio.get_running_loop().time() + pause


class PoolFloorWarnings(logging.Filter):
    """asyncpg's pool logs "Failed to restore the pool connection floor" with
    a traceback each time it cannot reopen its ``min_size`` connections. While
    ``pacing`` reports the database refusing, that is the state its line
    already gave: dropped. Otherwise it is kept as one line, the cause
    appended instead of the traceback."""

    def __init__(self, pacing: ConnectPacing) -> None:
        super().__init__()
        self._pacing = pacing

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Failed to restore the pool connection floor"):
            return True
        if self._pacing.refusing:
            return False
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
            record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


async def close_connection(conn: Any, within: float) -> None:
    """Closes ``conn`` politely within ``within`` seconds, or terminates it.

    A close that fails, times out or is cancelled (a task stopped while its
    connection says goodbye) terminates the connection at once: left half
    closed, its socket would stay open until the garbage collector found it.
    A cancellation still propagates; any other failure is the close's own
    and is not raised."""
    try:
        await asyncio.wait_for(conn.close(), within)
    except BaseException as exc:
        conn.terminate()
        if not isinstance(exc, Exception):
            raise
