"""Group commit across calls on PostgreSQL (docs/scaling.md, "Group commit").

AppendRunRecord's and AppendRunRecords' common case (``Database.append_if_writable``,
``append_records_if_writable``) is one atomic statement. On PostgreSQL every
such statement is also a commit, and a commit costs the primary far more than
inserting a 1 KiB row. So a replica sends the common cases that arrive while
its groups are in flight together, as a next group: one statement
(``GROUP_APPEND``) and so one commit for all of them.

* No timer: while a lane is free (``AppendGroups.lanes``), a caller's append
  leaves at once, alone in its own simpler statement as before; the callers
  that arrive while every lane is busy wait for one to finish and then go
  together, up to ``max_records`` records.
* What arrives together commits together: the calls one AppendRunRecordCalls
  message carries (``call_arrivals``) wait for one another, for as long as
  each event-loop turn brings one more of them, and go in one group.
* Each request of a group is decided alone, in SQL, by the same preconditions
  as its own statement (``fast_paths.APPEND``: run running, same owner, every
  key free, session active), and written with its run's next IDs and its
  session's next positions in the group's order, or not at all. A request the
  group does not write answers None, as its own statement would, and its
  caller runs the full rules (exact retries, conflicts, a stopped run, an
  ended session) in a transaction of its own, exactly as before.
* Every caller is answered only after the group's statement has committed.
  A failure the database answered cleanly (a lost race, a value it rejects)
  writes nothing of the group, and every request of it is answered None, so
  each runs again on its own (the full rules); so one caller's bad record
  never fails another's. A connection the server ended, or one dead before
  the statement was sent, also answers None (the full rules then answer as
  an exact retry would). Any other failure with the outcome unknown (a cut
  connection, a statement timeout, the call's bound) answers every caller
  of the group UNAVAILABLE, as it would answer one.

Correctness is the statement's: the group locks its sessions, then its runs,
in key order, like every writer (``fast_path_sql``), and numbers within its
snapshot; a concurrent writer of one of its runs (another replica) makes it
fail with a unique violation, and each request then runs on its own. No lock
of this process decides anything; it only chooses what travels together.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from runstore.contract.errors import UnavailableError
from runstore.contract.model import RunStatus, SessionStatus
from runstore.server import call_arrivals
from runstore.server.core.fast_paths import APPEND, Precondition
from runstore.server.core.model import RecordDraft
from runstore.server.db import row_codecs
from runstore.server.db.transaction import SqlTransaction

_IDLE_TURNS: Final = 1
"""Event-loop turns after the one a message's call arrived in without any
other of its calls arriving or ending, before its group leaves without them."""

Outcome = list[int] | None | BaseException
"""What a group answers one request: its IDs, None (not written: the caller
runs the full rules), or the error to raise to the caller."""

_COLUMNS: Final = (
    ("request", "int4"),
    ("namespace", "text"),
    ("run_id", "text"),
    ("agent_id", "text"),
    ("session_id", "text"),
    ("event_key", "text"),
    ("turn_id", "text"),
    ("type", "text"),
    ("payload", "bytea"),
    ("payload_size", "int4"),
    ("timestamp_ms", "int8"),
)
"""The group's input, one column per field, one row per record. Each row
carries its own namespace (``RecordDraft.namespace``): one group may hold
calls of several namespaces, and every match below is within one."""


_PROBE_EACH: Final = " OFFSET 0"
"""Keeps PostgreSQL from turning the key check's NOT EXISTS into one hashed
scan of every record (a sub-query with an OFFSET is never converted): planned
while the statistics still say ``records`` is nearly empty (a fresh database),
that plan is cached and then reads the whole table for every group as it grows
(measured: 0.9 ms → 16 ms a group at 25,000 records). Each key is probed in
the unique index instead, whatever the statistics say."""


def _request_condition(precondition: Precondition, probe_each: str = "") -> str:
    """One precondition of ``fast_paths.APPEND`` on a record ``i`` of the
    input and its run's locked row ``w`` (NULL when the run is not running or
    its session is not active: those two are the lock queries' own filters);
    ``probe_each`` ends the key check's sub-query (``_PROBE_EACH``)."""
    match precondition:
        case Precondition.RUN_RUNNING:
            return "w.run_id IS NOT NULL"
        case Precondition.SAME_OWNER:
            return "w.agent_id = i.agent_id AND w.session_id = i.session_id"
        case Precondition.KEY_FREE:
            return (
                "NOT EXISTS (SELECT 1 FROM records AS prior WHERE prior.namespace = i.namespace"
                f" AND prior.run_id = i.run_id AND prior.event_key = i.event_key{probe_each})"
            )
        case Precondition.SESSION_ACTIVE:
            return "(i.session_id = '' OR w.session_active)"
        case _:
            raise ValueError(f"not a condition on an appended record: {precondition}")


def _group_append(preconditions: Sequence[Precondition], source: str, row_locks: bool) -> str:
    """The group's one statement: inserts the records of every request for
    which each of ``preconditions`` holds for every one of its records,
    numbered per run and per session in the input's order after the largest
    stored ID and position, and returns each inserted record's run, key and ID.

    ``source`` selects the input (``_COLUMNS`` and an ``ordinal``); with
    ``row_locks`` (PostgreSQL) the statement locks the group's active
    sessions, then its running runs, each in key order, like every writer.
    SQLite's single writer needs no locks."""
    probe_each = _PROBE_EACH if row_locks else ""  # SQLite has no OFFSET without LIMIT
    checks = " AND ".join(_request_condition(p, probe_each) for p in preconditions)
    for_update = "ORDER BY {} FOR UPDATE" if row_locks else ""
    return f"""
WITH input AS ({source}),
active_sessions AS (
    SELECT s.namespace, s.session_id FROM sessions AS s
    WHERE (s.namespace, s.session_id) IN
          (SELECT namespace, session_id FROM input WHERE session_id <> '')
      AND s.status = '{SessionStatus.ACTIVE.value}'
    {for_update.format("s.namespace, s.session_id")}
),
writable_runs AS (
    SELECT r.namespace, r.run_id, r.agent_id, r.session_id,
           (r.namespace, r.session_id) IN (SELECT namespace, session_id FROM active_sessions)
               AS session_active
    FROM runs AS r
    WHERE (r.namespace, r.run_id) IN (SELECT namespace, run_id FROM input)
      AND r.status = '{RunStatus.RUNNING.value}'
      AND (r.session_id = ''
           OR (r.namespace, r.session_id) IN (SELECT namespace, session_id FROM active_sessions))
    {for_update.format("r.namespace, r.run_id")}
),
accepted AS (
    SELECT i.request FROM input AS i
    LEFT JOIN writable_runs AS w ON w.namespace = i.namespace AND w.run_id = i.run_id
    GROUP BY i.request
    HAVING min(CASE WHEN {checks} THEN 1 ELSE 0 END) = 1
),
numbered AS (
    SELECT i.*,
           row_number() OVER (PARTITION BY i.namespace, i.run_id ORDER BY i.ordinal) AS run_rank,
           row_number() OVER (PARTITION BY i.namespace, i.session_id ORDER BY i.ordinal)
               AS session_rank
    FROM input AS i
    WHERE i.request IN (SELECT request FROM accepted)
)
INSERT INTO records (namespace, run_id, record_id, event_key, agent_id, session_id, turn_id,
                     type, payload, payload_size, timestamp_ms, session_position)
SELECT n.namespace, n.run_id,
       (SELECT COALESCE(max(last.record_id), 0) FROM records AS last
        WHERE last.namespace = n.namespace AND last.run_id = n.run_id) + n.run_rank,
       n.event_key, n.agent_id, n.session_id, n.turn_id, n.type,
       n.payload, n.payload_size, n.timestamp_ms,
       CASE WHEN n.session_id = '' THEN NULL ELSE
           (SELECT COALESCE(max(last.session_position), 0) FROM records AS last
            WHERE last.namespace = n.namespace AND last.session_id = n.session_id
              AND last.session_position IS NOT NULL)
           + n.session_rank
       END
FROM numbered AS n
ORDER BY n.ordinal
RETURNING namespace, run_id, event_key, record_id
"""


_NAMES: Final = ", ".join(name for name, _ in _COLUMNS)

GROUP_APPEND: Final = _group_append(
    APPEND,
    "SELECT * FROM unnest({}) WITH ORDINALITY AS i({}, ordinal)".format(
        ", ".join(f"${n}::{kind}[]" for n, (_, kind) in enumerate(_COLUMNS, start=1)), _NAMES
    ),
    row_locks=True,
)
"""PostgreSQL's group statement: one array argument per column
(``group_arguments``), whatever the group's size, so one prepared statement."""


@functools.lru_cache(maxsize=64)
def sqlite_group_append(records: int) -> str:
    """SQLite's group statement for ``records`` records: a VALUES list of
    ``_COLUMNS`` and the ordinal, bound in order (``sqlite_group_arguments``)."""
    row = "(" + ", ".join("?" for _ in range(len(_COLUMNS) + 1)) + ")"
    named = [f"column{n} AS {name}" for n, (name, _) in enumerate(_COLUMNS, start=1)]
    named.append(f"column{len(_COLUMNS) + 1} AS ordinal")
    source = f"SELECT {', '.join(named)} FROM (VALUES {', '.join([row] * records)})"
    return _group_append(APPEND, source, row_locks=False)


def sqlite_group_arguments(batches: Sequence[Sequence[RecordDraft]]) -> list[Any]:
    """``sqlite_group_append``'s arguments: each record's columns and its ordinal."""
    flat: list[Any] = []
    for ordinal, row in enumerate(zip(*group_arguments(batches), strict=True), start=1):
        flat.extend(row)
        flat.append(ordinal)
    return flat


def group_arguments(batches: Sequence[Sequence[RecordDraft]]) -> list[list[Any]]:
    """``GROUP_APPEND``'s arguments: one array per column of ``_COLUMNS``,
    the records of every request in order."""
    columns: list[list[Any]] = [[] for _ in _COLUMNS]
    for request, batch in enumerate(batches):
        for record in batch:
            row = row_codecs.record_params(record)
            row["request"] = request
            row["namespace"] = record.namespace
            for column, (name, _) in zip(columns, _COLUMNS, strict=True):
                column.append(row[name])
    return columns


def group_results(
    tx: SqlTransaction, batches: Sequence[Sequence[RecordDraft]], rows: Sequence[Any]
) -> list[list[int] | None]:
    """Each request's IDs in its records' order, or None when the group did
    not write it (a request is written whole or not at all); counted on
    ``tx``, whose commit wakes the watchers of what it wrote."""
    ids = {(str(row[0]), str(row[1]), str(row[2])): int(row[3]) for row in rows}
    results: list[list[int] | None] = []
    for batch in batches:
        first = batch[0]
        if (first.namespace, first.run_id, first.event_key) not in ids:
            results.append(None)
            continue
        results.append([ids[(r.namespace, r.run_id, r.event_key)] for r in batch])
        tx.count_appended(batch[0], len(batch))
    return results


@dataclass(slots=True)
class _Request:
    batch: Sequence[RecordDraft]
    future: asyncio.Future[list[int] | None]
    affinity: str
    size: int
    """Payload bytes, for the group's bound."""


def _affinity(batch: Sequence[RecordDraft]) -> str:
    """What a request's statement locks first: its session, or its run when
    sessionless, in its namespace. Two groups of one replica never share one
    (``AppendGroups``)."""
    first = batch[0]
    if first.session_id:
        return f"s:{first.namespace}:{first.session_id}"
    return f"r:{first.namespace}:{first.run_id}"


class AppendGroups:
    """Collects the common-case appends of one replica into groups, at most
    ``lanes`` groups in flight at a time, and answers each caller with its
    own outcome.

    A request whose session (or sessionless run) is in a group in flight
    waits for that group, rather than going in another group that would wait
    for its locks and then collide with it (``_affinity``); that only avoids
    wasted work, correctness is the statement's.

    ``write_group`` sends one group (one statement, one commit) and returns
    an outcome per request, in order; it is the backend's (``postgres``).
    """

    def __init__(
        self,
        write_group: Callable[[list[Sequence[RecordDraft]]], Awaitable[list[Outcome]]],
        *,
        lanes: int = 2,
        max_records: int = 256,
        max_bytes: int = 8 << 20,
    ) -> None:
        self._write_group = write_group
        self.lanes = max(1, lanes)
        """Most groups in flight at once (each on its own connection)."""
        self.max_records = max_records
        """Most records in one group (a larger request goes alone)."""
        self.max_bytes = max_bytes
        """Most payload bytes in one group (a larger request goes alone)."""
        self._waiting: collections.deque[_Request] = collections.deque()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._busy: set[str] = set()
        """The affinities of the groups in flight."""
        self._holding: set[call_arrivals.Together] = set()
        """The messages whose calls are still arriving (``_hold``)."""
        self.groups_sent = 0
        """Groups sent so far (tests read it)."""

    @property
    def waiting(self) -> int:
        """Callers waiting for a group to go in (tests read it)."""
        return sum(not request.future.done() for request in self._waiting)

    async def append(self, batch: Sequence[RecordDraft]) -> list[int] | None:
        """``batch``'s IDs once the group it went in has committed, or None
        when the group did not write it (the caller runs the full rules)."""
        future: asyncio.Future[list[int] | None] = asyncio.get_running_loop().create_future()
        size = sum(len(record.payload) for record in batch)
        self._waiting.append(_Request(batch, future, _affinity(batch), size))
        arriving = call_arrivals.CURRENT.get()
        if arriving is not None and arriving.arrive():
            self._hold(arriving.together)
        else:
            self._start_groups()
        return await future

    def _hold(self, together: call_arrivals.Together) -> None:
        """Starts the next groups once the rest of ``together`` has arrived,
        or once an event-loop turn passed without one of them arriving or
        ending (no call waits on a neighbour that waits on something else)."""
        if together in self._holding:
            return
        self._holding.add(together)
        loop = asyncio.get_running_loop()

        def check(seen: int, idle: int) -> None:
            if together.on_the_way > 0:
                if together.progress != seen:
                    loop.call_soon(check, together.progress, 0)
                    return
                if idle < _IDLE_TURNS:  # a task resumed this turn runs after this check
                    loop.call_soon(check, seen, idle + 1)
                    return
            self._holding.discard(together)
            self._start_groups()

        loop.call_soon(check, together.progress, 0)

    async def close(self) -> None:
        """Stops sending: the callers of the groups in flight and those still
        waiting are answered UNAVAILABLE (a group's outcome is unknown)."""
        in_flight = list(self._in_flight)
        for task in in_flight:
            task.cancel()
        for task in in_flight:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self._waiting:
            _settle(self._waiting.popleft(), UnavailableError("database is not open"))

    def _start_groups(self) -> None:
        """Sends the next groups while a lane is free and a request can go."""
        while len(self._in_flight) < self.lanes:
            group = self._next_group()
            if not group:
                return
            affinities = {request.affinity for request in group}
            self._busy |= affinities
            task = asyncio.ensure_future(self._send(group))
            self._in_flight.add(task)
            task.add_done_callback(functools.partial(self._finished, affinities))

    def _finished(self, affinities: set[str], task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._busy -= affinities
        if not task.cancelled():
            self._start_groups()

    def _next_group(self) -> list[_Request]:
        """The waiting requests that go together next, in arrival order: at
        most ``max_records`` records and ``max_bytes`` bytes (but at least one
        request); none whose session or run is in a group in flight, and no
        two with a record of the same run under the same key (the later one
        waits for the next group, whose statement sees the earlier one's
        record). Callers already gone are dropped."""
        group: list[_Request] = []
        keys: set[tuple[str, str, str]] = set()
        records = size = 0
        later: list[_Request] = []
        while self._waiting:
            request = self._waiting.popleft()
            if request.future.done():
                continue
            if group and (
                records + len(request.batch) > self.max_records
                or size + request.size > self.max_bytes
            ):
                self._waiting.appendleft(request)
                break
            own = {(r.namespace, r.run_id, r.event_key) for r in request.batch}
            if request.affinity in self._busy or own & keys:
                later.append(request)
                continue
            group.append(request)
            keys |= own
            records += len(request.batch)
            size += request.size
        self._waiting.extendleft(reversed(later))
        return group

    async def _send(self, group: list[_Request]) -> None:
        self.groups_sent += 1
        try:
            outcomes = await self._write_group([request.batch for request in group])
        except asyncio.CancelledError:  # closed mid-group: the outcome is unknown
            for request in group:
                _settle(request, UnavailableError("database closed during the write; retry"))
            raise
        except Exception as exc:  # the backend's translated error, for every caller
            outcomes = [exc] * len(group)
        for request, outcome in zip(group, outcomes, strict=True):
            _settle(request, outcome)


def _settle(request: _Request, outcome: Outcome) -> None:
    """Answers one caller, unless it went away (the group committed or not without it)."""
    if request.future.done():
        return
    if isinstance(outcome, BaseException):
        request.future.set_exception(outcome)
    else:
        request.future.set_result(outcome)
