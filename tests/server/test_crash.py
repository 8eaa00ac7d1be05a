"""Crashes under load: nothing acknowledged is ever lost.

Concurrent writers, each in a session of its own (CreateSession), start
runs, append records and cancel, suspend or end them through a real
``runstore serve`` process, which is killed with SIGKILL at a random moment
(after a random number of acknowledged writes) and restarted on the same
database; on PostgreSQL the database itself is also crashed (``pg_ctl stop -m
immediate`` on a private cluster) and restarted while the server keeps
running. A writer whose command was in flight retries exactly that command
until it succeeds. With ``coalesce`` the writers' appends share
AppendRunRecordCalls messages through the Python client's coalescer.

The calls sent: CreateSession; StartRootRun, StartOneShotRun, and, under the
writer's previous run while it is still running, StartChildRun (a session
parent) or StartOneShotChildRun (a sessionless one); AppendRunRecord (unary,
or coalesced into AppendRunRecordCalls); RecordRunCancellation (the run stays
running: it may be the next run's parent, or end later), RecordRunSuspension
and RecordRunTerminal. So each single-statement fast path (fast_paths.py) and
the full rules it falls back to run while the server or the database dies.

After every fault: every acknowledged record (a child start's link on its
parent and the child's ``run_started`` both) is stored byte for byte under its
acknowledged ID, every acknowledged ending is the run's status and every
acknowledged cancellation its reason, each run has the identity it was
started with, and no run is in a status without its proof record (a
cancellation reason without its intent, a child link without its child run).
At the end every acknowledged command is sent again and must answer its
original result (every ID, ``inserted`` false), and every call above has been
acknowledged at least once.

``RUNSTORE_CRASH_ROUNDS`` (faults per backend, default 2 of each kind) and
``RUNSTORE_CRASH_WRITERS`` (default 8) run longer campaigns; with ``-s`` the
test prints its figures.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import pytest
from grpc_status import rpc_status

from runstore.client.coalesce import AppendCoalescer, AppendCoalescing
from runstore.contract import lifecycle
from runstore.contract.errors import RunstoreError
from runstore.server.db import migrate
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests import pg_cluster
from tests.ledger import Acked, ResultIds
from tests.ledger import Ledger as Acknowledgements
from tests.processes import server_process
from tests.support import Run, Store, failure_of, now_ms, run_start, ts, unique

ROUNDS = int(os.environ.get("RUNSTORE_CRASH_ROUNDS", "2"))
WRITERS = int(os.environ.get("RUNSTORE_CRASH_WRITERS", "8"))
APPENDS = 4
"""The most records a writer appends to a run (0 to 4: starts and endings
make up a good share of the commands in flight when a fault strikes)."""
CALL_TIMEOUT = 15.0
CALLS = frozenset(
    {
        "CreateSession",
        "StartRootRun",
        "StartChildRun",
        "StartOneShotRun",
        "StartOneShotChildRun",
        "AppendRunRecord",
        "RecordRunCancellation",
        "RecordRunSuspension",
        "RecordRunTerminal",
    }
)
"""Every call the writers send: each campaign acknowledges every one."""
COVERAGE_STEPS = 100
"""How many more rounds of 10 acknowledgements a campaign waits, at most,
for a call it has not yet acknowledged."""
TRANSIENT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE})
"""What a writer may see while the server or the database is down."""


@dataclass
class Ledger(Acknowledgements):
    """Everything the store acknowledged, and what the faults cost."""

    endings: dict[str, int] = field(default_factory=dict)
    """Run ID → the status its acknowledged ending set."""
    cancellations: dict[str, str] = field(default_factory=dict)
    """Run ID → the reason its acknowledged RecordRunCancellation stored."""
    runs: dict[str, pb.RunStart] = field(default_factory=dict)
    """Run ID → its acknowledged start."""
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    """Acknowledged commands by call."""
    in_flight_retried: collections.Counter[str] = field(default_factory=collections.Counter)
    """Commands acknowledged after a failed attempt, by call."""


class Harness:
    """The server process of the moment and the calls that ride out its death."""

    def __init__(self, args: tuple[str, ...], ledger: Ledger, *, coalesce: bool = False) -> None:
        self.args = args
        self.ledger = ledger
        self.coalesce = coalesce
        """Appends go through the Python client's coalescer (AppendRunRecordCalls)."""
        self._coalescers: dict[int, AppendCoalescer] = {}
        self.store: Store | None = None
        self.up = asyncio.Event()
        self.stopping = False
        self._stack = AsyncExitStack()
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        server = await self._stack.enter_async_context(server_process(*self.args))
        channel = await self._stack.enter_async_context(grpc.aio.insecure_channel(server.target))
        self._process = server.process
        self.store = Store(channel, target=server.target)
        self.up.set()

    async def kill(self) -> None:
        """SIGKILL, whatever the server is doing, then a new server on the same
        database. The dead server's channel stays open until the new one
        serves, so calls in flight fail as they would for any client."""
        self.up.clear()
        assert self._process is not None
        self._process.kill()
        await self._process.wait()
        dead, self._stack = self._stack, AsyncExitStack()
        await self.start()
        await dead.aclose()

    async def close(self) -> None:
        await self._stack.aclose()

    async def append(self, store: Store, request: rs.AppendRunRecordRequest) -> Any:
        """One AppendRunRecord, alone or (``coalesce``) sharing messages with
        the other writers' appends to ``store``; a failed append raises the
        status it ended with, as a unary call would."""
        if not self.coalesce:
            return await store.runtime.AppendRunRecord(request)
        coalescer = self._coalescers.get(id(store))
        if coalescer is None:

            async def send(calls: rs.AppendRunRecordCallsRequest, seconds: float | None) -> Any:
                self.ledger.codes["(appends carried together)"] += len(calls.calls)
                return await store.runtime.AppendRunRecordCalls(calls, timeout=seconds)

            async def send_one(one: rs.AppendRunRecordRequest, seconds: float | None) -> Any:
                return await store.runtime.AppendRunRecord(one, timeout=seconds)

            coalescer = AppendCoalescer(AppendCoalescing(), send, send_one)
            self._coalescers[id(store)] = coalescer
        try:
            return await coalescer.append(request, CALL_TIMEOUT)
        except RunstoreError as error:
            assert isinstance(error.__cause__, grpc.aio.AioRpcError), error
            raise error.__cause__ from None

    async def call(
        self,
        send: Callable[[Store], Awaitable[Any]],
        result_id: Callable[[Any], ResultIds],
        inserted: Callable[[Any], bool],
        records: Sequence[pb.RunRecord] = (),
    ) -> Any:
        """Sends ``send`` until it is acknowledged; only transient codes may
        come back meanwhile. Records the acknowledgement: the command, to
        send again, and ``records``, the records it stored, each under its
        ID of ``result_id`` (the IDs in the same order)."""
        failed = False
        for _ in range(2000):
            await self.up.wait()
            store = self.store
            assert store is not None
            try:
                response = await asyncio.wait_for(send(store), CALL_TIMEOUT)
            except grpc.aio.UsageError:  # the channel of a killed server was closed
                failed = True
                continue
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the test is stopping this writer
                # Closing a killed server's channel cancels its calls locally.
                self.ledger.codes["CANCELLED (channel closed)"] += 1
                failed = True
                continue
            except grpc.aio.AioRpcError as err:
                self.ledger.codes[err.code().name] += 1
                assert err.code() in TRANSIENT_CODES, f"{err.code()}: {err.details()}"
                # from_call reads only what an AioRpcError has too (code,
                # details, trailing metadata); answered by runstore itself:
                if rpc_status.from_call(cast(grpc.Call, err)) is not None:
                    assert failure_of(err).reason == "TRANSIENT", err
                failed = True
                await asyncio.sleep(0.02)  # client back-off before the exact retry
                continue
            self.ledger.codes["OK"] += 1
            name = type(response).__name__.removesuffix("Response")
            self.ledger.calls[name] += 1
            if failed:
                self.ledger.in_flight_retried[name] += 1
            ids = result_id(response)
            if records:
                as_tuple = ids if isinstance(ids, tuple) else (ids,)
                assert len(as_tuple) == len(records), (name, as_tuple)
                for record, record_id in zip(records, as_tuple, strict=True):
                    self.ledger.acknowledge(record, record_id)
            self.ledger.commands.append(Acked(send, result_id, ids, inserted))
            await self.ledger.ack()
            return response
        raise AssertionError("a command never succeeded")


def _payload(rng: random.Random) -> bytes:
    return b'{"data":"' + rng.randbytes(rng.randint(8, 1500)).hex().encode() + b'"}'


async def _writer(harness: Harness, index: int) -> None:
    rng = random.Random(index)
    session = unique("crash-session")
    create = sa.CreateSessionRequest(session_id=session, created_at=ts(now_ms()))
    await harness.call(
        lambda s: s.admin.CreateSession(create), lambda r: r.session.id, lambda r: False
    )
    parent: Run | None = None
    """The writer's previous run while it is still running: a parent."""
    while not harness.stopping:
        run = await _start(harness, session, parent, rng)
        for number in range(rng.randint(0, APPENDS)):
            record = run.record(f"r{number}", payload=_payload(rng))
            request = rs.AppendRunRecordRequest(record=record)
            await harness.call(
                functools.partial(harness.append, request=request),
                lambda r: r.id,
                lambda r: r.inserted,
                (record,),
            )
        parent = run if await _end(harness, run, rng) else None


async def _start(harness: Harness, session: str, parent: Run | None, rng: random.Random) -> Run:
    """A new run: a child of ``parent`` (StartChildRun under a session
    parent, StartOneShotChildRun under a sessionless one) most of the time
    there is one, else a root run of the writer's session or a one-shot run."""
    ledger = harness.ledger
    if parent is not None and rng.random() < 0.8:
        # Another agent than the parent's: the link is the parent's
        # (PARENT_OWNER), the started record the child's.
        run = run_start(
            session_id=parent.start.session_id, parent_run_id=parent.id, agent_id="child-agent"
        )
        if parent.start.session_id:
            child = run.child_request(parent.start.agent_id, tool_call_id=f"call-{run.id}")

            def send(s: Store) -> Awaitable[Any]:
                return s.runtime.StartChildRun(child)
        else:
            child = run.one_shot_child_request(parent.start.agent_id)

            def send(s: Store) -> Awaitable[Any]:
                return s.runtime.StartOneShotChildRun(child)

        response = await harness.call(
            send,
            lambda r: (r.parent_record.id, r.started.id),
            lambda r: r.parent_record.inserted or r.started.inserted,
            (child.parent_linked, child.started),
        )
    elif rng.random() < 0.5:
        run = run_start(session_id=session)
        root = run.root_request()
        response = await harness.call(
            lambda s: s.runtime.StartRootRun(root),
            lambda r: r.started.id,
            lambda r: r.started.inserted,
            (root.started,),
        )
    else:
        run = run_start()
        one_shot = run.one_shot_request()
        response = await harness.call(
            lambda s: s.runtime.StartOneShotRun(one_shot),
            lambda r: r.record.id,
            lambda r: r.record.inserted,
            (one_shot.started,),
        )
    # Until the writer changes the run, every answer (an exact retry's too)
    # sees it running; a session start proceeds (no session ever ends here).
    assert response.run_status == pb.RUN_STATUS_RUNNING, response
    if run.start.session_id:
        assert response.outcome == pb.RUN_START_OUTCOME_PROCEED, response
    ledger.runs[run.id] = run.start
    return run


async def _end(harness: Harness, run: Run, rng: random.Random) -> bool:
    """Suspends, ends or cancels ``run``; True when it is still running (a
    cancellation sets the run's reason, not its status)."""
    ledger = harness.ledger
    choice = rng.random()
    if choice < 0.2:
        suspension = run.suspension_request(data=rng.randbytes(64).hex().encode())
        await harness.call(
            lambda s: s.runtime.RecordRunSuspension(suspension),
            lambda r: r.id,
            lambda r: r.inserted,
            (suspension.record,),
        )
        ledger.endings[run.id] = pb.RUN_STATUS_SUSPENDED
        return False
    if choice < 0.5:
        await _terminal(harness, run, rng.choice([pb.RUN_STATUS_COMPLETED, pb.RUN_STATUS_FAILED]))
        return False
    reason = rng.choice([lifecycle.REASON_USER_REQUESTED, "deadline_exceeded"])
    cancellation = run.cancellation_request(reason=reason)
    await harness.call(
        lambda s: s.runtime.RecordRunCancellation(cancellation),
        lambda r: r.id,
        lambda r: r.inserted,
        (cancellation.record,),
    )
    ledger.cancellations[run.id] = reason
    if rng.random() < 0.3:  # the run honours the request (or fails meanwhile)
        if rng.random() < 0.7:
            await _terminal(harness, run, pb.RUN_STATUS_CANCELED, reason=reason)
        else:
            await _terminal(harness, run, pb.RUN_STATUS_FAILED)
        return False
    return True


async def _terminal(harness: Harness, run: Run, status: int, **kwargs: Any) -> None:
    terminal = run.terminal_request(status, **kwargs)
    await harness.call(
        lambda s: s.runtime.RecordRunTerminal(terminal),
        lambda r: r.id,
        lambda r: r.inserted,
        (terminal.record,),
    )
    harness.ledger.endings[run.id] = status


T = TypeVar("T")

READ_RECOVERY_SECONDS = 60.0
"""How long a verifying read retries UNAVAILABLE: right after a database
crash the server's pool reconnects at its own pace (a loaded machine slows
the database's recovery too), as a worker's client would wait."""


async def _read(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, retried while it answers UNAVAILABLE, for a bounded time."""
    deadline = time.monotonic() + READ_RECOVERY_SECONDS
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as err:
            if err.code() not in TRANSIENT_CODES or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)  # a client's back-off, not a wait for a race


async def _all_records(store: Store, run_id: str) -> list[pb.RunRecord]:
    events: list[pb.RunRecord] = []
    cursor = ""
    while True:
        request = rs.ListRunRecordsRequest(run_id=run_id, cursor=cursor, limit=1000)
        page = await _read(functools.partial(store.runtime.ListRunRecords, request, timeout=10))
        events.extend(page.events)
        if not page.next_cursor:
            return events
        cursor = page.next_cursor


async def _verify(store: Store, ledger: Ledger, *, quiet: bool = False) -> int:
    """Every acknowledged result is stored; every status has its proof
    (``quiet``: no writer is running, every command sent was acknowledged).
    Returns how many acknowledged records were checked."""
    records = dict(ledger.records)
    endings = dict(ledger.endings)
    cancellations = dict(ledger.cancellations)
    starts = dict(ledger.runs)
    by_run: dict[str, list[tuple[str, str, bytes]]] = collections.defaultdict(list)
    for (run_id, key), (record_id, payload) in records.items():
        by_run[run_id].append((key, record_id, payload))
    children: dict[str, set[str]] = collections.defaultdict(set)
    for run_id, start in starts.items():
        if start.parent_run_id:
            children[start.parent_run_id].add(run_id)

    async def load(run_id: str) -> pb.RunMeta:
        request = rs.LoadRunRequest(run_id=run_id)
        return (await _read(lambda: store.runtime.LoadRun(request, timeout=10))).run

    async def check(run_id: str) -> None:
        # The status first, then the records: a proof committed with the status
        # is visible to the later read even while writers go on.
        meta = await load(run_id)
        stored = {r.event_key: r for r in await _all_records(store, run_id)}
        for key, record_id, payload in by_run[run_id]:
            assert key in stored, f"acknowledged record {run_id}/{key} is missing"
            assert (stored[key].id, stored[key].payload) == (record_id, payload), (run_id, key)
        types = collections.Counter(r.type for r in stored.values())
        assert types[lifecycle.RUN_STARTED] == 1
        start = starts.get(run_id)
        if start is not None:
            stored_start = (meta.agent_id, meta.session_id, meta.parent_run_id, meta.started_at)
            sent = (start.agent_id, start.session_id, start.parent_run_id, start.started_at)
            assert stored_start == sent, run_id
            assert dict(meta.labels) == dict(start.labels), run_id
        if run_id in endings:
            assert meta.status == endings[run_id]
        elif quiet and start is not None:  # every ending sent was acknowledged
            assert meta.status == pb.RUN_STATUS_RUNNING, (run_id, meta.status)
        if run_id in cancellations:
            assert meta.cancellation_reason == cancellations[run_id], run_id
        # A reason is stored with its intent record (no session ever ends
        # here, so no start stores one); quiet, every intent has its reason.
        if meta.cancellation_reason:
            assert types[lifecycle.CANCELLATION_INTENT] == 1, (run_id, types)
        elif quiet:
            assert not types[lifecycle.CANCELLATION_INTENT], (run_id, types)
        # A link is stored with its child run; quiet, every child start sent
        # was acknowledged.
        linked = [
            lifecycle.decode_child_run_linked(r.payload).child_run_id
            for r in stored.values()
            if r.type == lifecycle.CHILD_RUN_LINKED
        ]
        for child_id in linked:
            assert (await load(child_id)).parent_run_id == run_id, (run_id, child_id)
        assert children[run_id] <= set(linked), (run_id, children[run_id], linked)
        if quiet:
            assert sorted(linked) == sorted(children[run_id]), (run_id, linked)
        if meta.status == pb.RUN_STATUS_RUNNING:
            if quiet:  # no writer can end it between the two reads
                assert not types[lifecycle.RUN_COMPLETED] and not types[lifecycle.RUN_SUSPENDED]
        elif meta.status == pb.RUN_STATUS_SUSPENDED:
            assert types[lifecycle.RUN_SUSPENDED] == 1, (run_id, types)
            suspension = rs.LoadRunSuspensionRequest(run_id=run_id)
            await _read(lambda: store.runtime.LoadRunSuspension(suspension, timeout=10))
        else:
            assert types[lifecycle.RUN_COMPLETED] == 1, (run_id, meta.status, types)

    runs = sorted(by_run)
    for offset in range(0, len(runs), 32):
        await asyncio.gather(*(check(run_id) for run_id in runs[offset : offset + 32]))
    return len(records)


async def _replay_everything(store: Store, ledger: Ledger) -> int:
    """Every acknowledged command, sent again, answers its original result:
    every ID it answered, and nothing inserted."""
    commands = list(ledger.commands)

    async def replay(command: Acked) -> None:
        response = await command.send(store)
        assert command.result_id(response) == command.record_id, response
        assert command.inserted is not None and not command.inserted(response), response

    for offset in range(0, len(commands), 64):
        await asyncio.gather(*(replay(c) for c in commands[offset : offset + 64]))
    return len(commands)


@dataclass
class Figures:
    backend: str
    kills: int = 0
    database_crashes: int = 0
    checked: int = 0
    checks: int = 0
    replayed: int = 0
    seconds: float = 0.0
    codes: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    in_flight_retried: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return (
            f"\ncrash[{self.backend}]: {self.kills} server kills, "
            f"{self.database_crashes} database crashes, {self.checked} acknowledged records "
            f"({self.checks} record checks over all faults), {self.replayed} acknowledged "
            f"commands replayed {sorted(self.calls.items())}, "
            f"{sum(self.in_flight_retried.values())} in-flight commands retried to success "
            f"{sorted(self.in_flight_retried.items())}, "
            f"codes {sorted(self.codes.items())}, {self.seconds:.1f} s"
        )


async def _campaign(
    backend: str,
    args: tuple[str, ...],
    faults: list[str],
    crash_database: Callable[[], Awaitable[None]] | None = None,
    *,
    coalesce: bool = False,
) -> Figures:
    ledger = Ledger()
    harness = Harness(args, ledger, coalesce=coalesce)
    figures = Figures(backend)
    started = time.monotonic()
    rng = random.Random()
    await harness.start()
    writers: list[asyncio.Future[None]] = [
        asyncio.ensure_future(_writer(harness, index)) for index in range(WRITERS)
    ]
    try:
        for fault in faults:
            await ledger.reach(ledger.acked + rng.randint(20, 120), writers)
            if fault == "server":
                await harness.kill()
                figures.kills += 1
            else:
                assert crash_database is not None
                await crash_database()
                figures.database_crashes += 1
            assert harness.store is not None
            figures.checks += await _verify(harness.store, ledger)
        await ledger.reach(ledger.acked + 20, writers)
        for _ in range(COVERAGE_STEPS):  # rarely more than one round
            if CALLS.issubset(ledger.calls):
                break
            await ledger.reach(ledger.acked + 10, writers)
        harness.stopping = True
        await asyncio.gather(*writers)
        assert harness.store is not None
        figures.checked = await _verify(harness.store, ledger, quiet=True)
        figures.checks += figures.checked
        figures.replayed = await _replay_everything(harness.store, ledger)
    finally:
        harness.stopping = True
        for writer in writers:
            writer.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        await harness.close()
    figures.codes = dict(ledger.codes)
    figures.calls = dict(ledger.calls)
    figures.in_flight_retried = dict(ledger.in_flight_retried)
    figures.seconds = time.monotonic() - started
    print(figures)
    return figures


@pytest.mark.parametrize("coalesce", [False, True], ids=["unary", "coalesced"])
async def test_sqlite_full_survives_server_kills(tmp_path: Path, coalesce: bool) -> None:
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    await migrate.ensure_schema(url, migrate=True)
    figures = await _campaign(
        "sqlite FULL" + (" coalesced" if coalesce else ""),
        ("--database-url", url, "--sqlite-synchronous", "FULL"),
        ["server"] * ROUNDS,
        coalesce=coalesce,
    )
    assert figures.kills == ROUNDS
    assert CALLS.issubset(figures.calls), sorted(CALLS - figures.calls.keys())
    assert bool(figures.codes.get("(appends carried together)")) == coalesce


@pytest.fixture
async def private_url() -> AsyncIterator[tuple[pg_cluster.Cluster, str]]:
    async with pg_cluster.private_cluster() as cluster:
        url = await cluster.create_database("crash")
        await migrate.upgrade(url)
        yield cluster, url


@pytest.mark.postgres
@pytest.mark.parametrize("coalesce", [False, True], ids=["unary", "coalesced"])
async def test_postgres_survives_server_kills_and_database_crashes(
    private_url: tuple[pg_cluster.Cluster, str], coalesce: bool
) -> None:
    cluster, url = private_url

    async def crash_database() -> None:
        await cluster.stop("immediate")
        await cluster.start()

    figures = await _campaign(
        "postgres" + (" coalesced" if coalesce else ""),
        ("--database-url", url, "--pg-pool-max", "8"),
        ["server", "database"] * ROUNDS,
        crash_database,
        coalesce=coalesce,
    )
    assert (figures.kills, figures.database_crashes) == (ROUNDS, ROUNDS)
    assert CALLS.issubset(figures.calls), sorted(CALLS - figures.calls.keys())
    assert bool(figures.codes.get("(appends carried together)")) == coalesce
