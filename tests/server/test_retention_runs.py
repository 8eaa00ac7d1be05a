"""Retention of sessionless runs and context keys, and the background task.

``PurgeSessionlessRuns`` and ``runstore runs purge``, the run tombstone, the
``--retain-*`` durations, and ``RetentionTask`` passes driven directly with an
injected clock and wait (never by sleeping), on both backends, with two
servers (or two store instances) over one database.

Runs finish (their ending record's timestamp) and sessions end in windows of
their own far in the past (``test_retention.window``), so each test's cut-off
reaches only its own rows; context keys are written with an injected clock in
such a window.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import signal
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from sqlalchemy.engine import make_url

from runstore.contract.errors import ContextNotFoundError
from runstore.server import convert
from runstore.server.app import Telemetry, create_stores, open_database
from runstore.server.config import ConfigError, ServerConfig, load, parse_duration
from runstore.server.core.context import ContextStore
from runstore.server.core.ports import Database
from runstore.server.core.store import RuntimeStore
from runstore.server.db.opening import Backend
from runstore.server.db.postgres import asyncpg_dsn
from runstore.server.metrics import Metrics
from runstore.server.retention import RetentionSettings, RetentionTask
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests.cli.test_admin_cli import runstore
from tests.contract.test_context_store import snapshot as context_snapshot
from tests.contract.test_context_store import user
from tests.processes import run_module, serve_process, server_process
from tests.server.test_retention import DAY_MS, _iso, ended_session, exists, window
from tests.support import Run, Store, fails, failure_of, run_start, serving, ts

pytestmark = pytest.mark.usefixtures("acting_in_default")  # direct database work

NANOS_PER_MS = 1_000_000


@pytest.fixture
async def second(database_url: str, store: Store) -> AsyncIterator[Store]:
    """Another server over the same database: a second replica."""
    async with serving(database_url, migrate=False) as replica:
        yield replica


# --- Building runs -------------------------------------------------------------------


async def one_shot(store: Store, started_ms: int, *, parent: Run | None = None) -> Run:
    run = run_start(parent_run_id=parent.id if parent else "", started_ms=started_ms)
    if parent is None:
        await store.runtime.StartOneShotRun(run.one_shot_request())
    else:
        await store.runtime.StartOneShotChildRun(
            run.one_shot_child_request(parent.start.agent_id, link_key=f"link-{run.id}")
        )
    return run


async def finish(store: Store, run: Run, finished_ms: int) -> None:
    await store.runtime.RecordRunTerminal(run.terminal_request(at_ms=finished_ms))


async def finished(store: Store, started_ms: int, finished_ms: int, **kwargs: Any) -> Run:
    run = await one_shot(store, started_ms, **kwargs)
    await finish(store, run, finished_ms)
    return run


async def run_exists(store: Store, run_id: str) -> bool:
    try:
        await store.runtime.LoadRun(rs.LoadRunRequest(run_id=run_id))
    except grpc.aio.AioRpcError as err:
        assert failure_of(err).reason == "RUN_NOT_FOUND", err
        return False
    return True


async def purge_runs(
    store: Store, finished_before_ms: int, limit: int
) -> sa.PurgeSessionlessRunsResponse:
    return await store.admin.PurgeSessionlessRuns(
        sa.PurgeSessionlessRunsRequest(finished_before=ts(finished_before_ms), limit=limit)
    )


# --- A fingerprint of every table -------------------------------------------------------

TABLES = (
    "sessions",
    "session_tombstones",
    "runs",
    "run_tombstones",
    "records",
    "memory_runs",
    "memory_events",
    "memory_appends",
    "context_keys",
    "context_versions",
    "context_transcript",
    "context_appends",
)


async def table_rows(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read straight from the database."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    if make_url(database_url).get_backend_name() == "sqlite":
        path = make_url(database_url).database
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            for table in TABLES:
                cursor = connection.execute(f"SELECT * FROM {table}")
                names = [column[0] for column in cursor.description]
                rows[table] = [tuple(zip(names, row, strict=True)) for row in cursor]
        finally:
            connection.close()
        return rows
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        for table in TABLES:
            rows[table] = [tuple(record.items()) for record in await conn.fetch(f"TABLE {table}")]
    finally:
        await conn.close()
    return rows


async def fingerprint(database_url: str, leaving_out: Collection[str] = ()) -> str:
    """A digest of every row, but those of the runs ``leaving_out`` (their run
    rows, records and run tombstones)."""
    digest = hashlib.sha256()
    for table, rows in sorted((await table_rows(database_url)).items()):
        kept = sorted(repr(row) for row in rows if dict(row).get("run_id") not in leaving_out)
        digest.update(f"{table}:{len(kept)}:".encode())
        for row in kept:
            digest.update(row.encode())
    return digest.hexdigest()


# --- PurgeSessionlessRuns ---------------------------------------------------------------


async def test_purges_finished_families_before_the_cut_off_and_nothing_else(
    store: Store, database_url: str
) -> None:
    base = window()
    cut = base + 10 * DAY_MS
    # Skipped first (oldest): its grandchild still runs, so the family is kept whole.
    deep = await one_shot(store, base)
    deep_child = await one_shot(store, base + 1, parent=deep)
    deep_grandchild = await one_shot(store, base + 2, parent=deep_child)
    await finish(store, deep_child, base + DAY_MS // 2)
    await finish(store, deep, base + DAY_MS // 2)
    # Purged: a family, every member finished before the cut-off.
    old = await one_shot(store, base)
    old_child = await one_shot(store, base + 1, parent=old)
    old_grandchild = await finished(store, base + 2, base + 3, parent=old_child)
    await finish(store, old_child, base + 4)
    await finish(store, old, base + DAY_MS)
    older_alone = await finished(store, base, base + 2 * DAY_MS)
    # Kept: at the cut-off; running; suspended; a child still running; a child
    # finished after the cut-off; a run in an ended session.
    at_cut = await finished(store, base, cut)
    running = await one_shot(store, base)
    suspended = await one_shot(store, base)
    await store.runtime.RecordRunSuspension(suspended.suspension_request())
    busy_parent = await one_shot(store, base)
    busy_child = await one_shot(store, base + 1, parent=busy_parent)
    await finish(store, busy_parent, base + DAY_MS)
    late_parent = await one_shot(store, base)
    late_child = await finished(store, base + 1, cut + 1, parent=late_parent)
    await finish(store, late_parent, base + DAY_MS)
    in_session = await ended_session(store, base + DAY_MS)

    targets = [old.id, old_child.id, old_grandchild.id, older_alone.id]
    before = await fingerprint(database_url, targets)

    first = await purge_runs(store, cut, 1)
    assert list(first.purged_run_ids) == [old.id, old_child.id, old_grandchild.id]
    assert first.more
    rest = await purge_runs(store, cut, 10)
    assert list(rest.purged_run_ids) == [older_alone.id] and not rest.more
    assert not (await purge_runs(store, cut, 10)).purged_run_ids

    assert await fingerprint(database_url, targets) == before  # nothing else touched
    for run_id in targets:
        assert not await run_exists(store, run_id)
    kept = (deep, deep_child, deep_grandchild, at_cut, running, suspended)
    kept += (busy_parent, busy_child, late_parent, late_child)
    for run in kept:
        assert await run_exists(store, run.id)
    assert await exists(store, in_session)

    # The purged family's start, delayed and sent again exactly, cannot re-create it.
    for request, call in (
        (old.one_shot_request(), store.runtime.StartOneShotRun),
        (
            old_child.one_shot_child_request(old.start.agent_id, link_key=f"link-{old_child.id}"),
            store.runtime.StartOneShotChildRun,
        ),
    ):
        refused = await fails(call(request))
        assert (refused.code, refused.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "RUN_PURGED")
        assert refused.metadata["run_id"] == request.run.run_id
        assert refused.metadata["permanent"] == "true"
    # Nor can a session start reuse the ID.
    session_id = await store.session()
    reuse = run_start(session_id=session_id, run_id=older_alone.id)
    refused = await fails(store.runtime.StartRootRun(reuse.root_request()))
    assert refused.reason == "RUN_PURGED"
    for run_id in targets:
        assert not await run_exists(store, run_id)


async def test_bad_requests_name_their_field(store: Store) -> None:
    missing = await fails(store.admin.PurgeSessionlessRuns(sa.PurgeSessionlessRunsRequest()))
    assert (missing.code, missing.metadata.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "finished_before",
    )
    too_many = await fails(purge_runs(store, window(), 1001))
    assert (too_many.code, too_many.metadata.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "limit",
    )


async def test_two_replicas_purging_at_once_purge_each_run_once(
    store: Store, second: Store, database_url: str
) -> None:
    base = window()
    cut = base + 100 * DAY_MS
    roots = await asyncio.gather(*(one_shot(store, base) for _ in range(30)))
    children = await asyncio.gather(
        *(finished(second, base + 1, base + 2, parent=root) for root in roots[::3])
    )
    await asyncio.gather(
        *(finish(store, root, base + i * DAY_MS // 10) for i, root in enumerate(roots))
    )
    # One family whose parent finished while its child still runs: kept.
    parent = await one_shot(store, base)
    child = await one_shot(store, base + 1, parent=parent)
    await finish(store, parent, base + DAY_MS)
    targets = [run.id for run in (*roots, *children)]
    before = await fingerprint(database_url, targets)
    purged: list[str] = []

    async def drain(replica: Store) -> None:
        while True:
            batch = await purge_runs(replica, cut, 3)
            purged.extend(batch.purged_run_ids)
            if not batch.more:
                return

    await asyncio.gather(*(drain(replica) for replica in (store, second, store, second)))
    assert sorted(purged) == sorted(targets)  # every one, none twice
    assert await fingerprint(database_url, targets) == before  # nothing else touched
    assert await run_exists(store, parent.id) and await run_exists(second, child.id)


async def test_cli_purges_runs_in_batches_up_to_the_limit(store: Store) -> None:
    base = window()
    cut = base + 10 * DAY_MS
    old = [await finished(store, base, base + i * DAY_MS) for i in range(3)]
    cut_iso = _iso(cut)

    unconfirmed = await runstore(store, "runs", "purge", "--finished-before", cut_iso, stdin="n\n")
    assert unconfirmed.code == 1
    assert [await run_exists(store, run.id) for run in old] == [True] * 3

    limited = await runstore(
        store, "runs", "purge", "--finished-before", cut_iso, "--limit", "2", "--yes", "--json"
    )
    assert limited.code == 0, limited.err
    assert [line["id"] for line in limited.lines()] == [run.id for run in old[:2]]
    rest = await runstore(store, "runs", "purge", "--finished-before", cut_iso, "--yes")
    assert rest.code == 0, rest.err
    assert f"purged run {old[2].id}" in rest.out and "purged 1 runs" in rest.out
    missing = await runstore(store, "runs", "purge", "--yes")
    assert missing.code == 2 and "--finished-before" in missing.err


# --- DURATION -------------------------------------------------------------------------


def test_durations_parse_to_seconds() -> None:
    assert [parse_duration(text) for text in ("90s", "30m", "12h", "30d", "600", "1.5h")] == [
        90,
        1800,
        43200,
        2592000,
        600,
        5400,
    ]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "a number and ms, s, m, h or d"),
        ("-5m", "must not be negative"),
        ("5 m", "a number and ms, s, m, h or d"),
        ("2w", "a number and ms, s, m, h or d"),
        ("0s", "longer than zero"),
        ("36501d", "at most 36500d"),
    ],
)
def test_bad_durations_are_config_errors(text: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        parse_duration(text)


def test_retention_flags_go_through_the_server_config() -> None:
    assert not ServerConfig().retention_on
    assert ServerConfig().retention_interval == "10m"
    config = load(env={"RUNSTORE_RETAIN_CONTEXTS": "12h", "RUNSTORE_RETENTION_INTERVAL": "90s"})
    settings = RetentionSettings.from_config(config)
    assert (settings.contexts, settings.ended_sessions, settings.interval) == (43200, None, 90)
    with pytest.raises(ConfigError, match=r"^--retain-ended-sessions must be a number of seconds"):
        ServerConfig(retain_ended_sessions="3 days")
    with pytest.raises(ConfigError, match=r"RUNSTORE_RETENTION_INTERVAL \(--retention-interval\)"):
        load(env={"RUNSTORE_RETENTION_INTERVAL": ""})


# --- Stores over the test database, with an injected clock --------------------------------


@dataclass
class Replica:
    """The store cores of one replica over the shared test database."""

    db: Database
    backend: Backend
    runtime: RuntimeStore
    context: ContextStore
    metrics: Metrics


class Clock:
    """UTC nanoseconds that move only when told to."""

    def __init__(self, ms: int) -> None:
        self.nanos = ms * NANOS_PER_MS

    def __call__(self) -> int:
        return self.nanos

    def advance_ms(self, ms: int) -> None:
        self.nanos += ms * NANOS_PER_MS


@asynccontextmanager
async def replica(database_url: str, clock: Clock) -> AsyncIterator[Replica]:
    """A replica's stores, metered, with contexts written at ``clock``."""
    config = ServerConfig(database_url=database_url)
    metrics = Metrics("test")
    async with open_database(config, Telemetry(metrics=metrics)) as db:
        stores = create_stores(config, db)
        yield Replica(
            db.calls, db.backend, stores.runtime, ContextStore(db.calls, clock=clock), metrics
        )


def task_of(
    replica: Replica,
    clock: Clock,
    *,
    lock: Callable[[], AbstractAsyncContextManager[bool]] | None = None,
    wait: Callable[[float], Awaitable[None]] | None = None,
    interval: int = 600,
) -> RetentionTask:
    day = 86_400
    return RetentionTask(
        replica.runtime,
        replica.context,
        lock or replica.backend.retention_lock,
        RetentionSettings(
            ended_sessions=day, sessionless_runs=day, contexts=day, interval=interval
        ),
        clock=clock,
        wait=wait,
        metrics=replica.metrics,
    )


@asynccontextmanager
async def always_held() -> AsyncIterator[bool]:
    yield True


def snapshot(text: str) -> Any:
    return convert.context_snapshot_from_wire(context_snapshot(user(text)))


async def save(context: ContextStore, key: str) -> None:
    await context.save_context(key, snapshot(key), 0)


async def context_exists(context: ContextStore, key: str) -> bool:
    """Whether anything of the key is left: a snapshot or a transcript."""
    if (await context.list_transcript(key, "", 10)).messages:
        return True
    try:
        await context.get_context(key)
    except ContextNotFoundError:
        return False
    return True


def counted(metrics: Metrics, name: str) -> float:
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return 0.0


async def test_contexts_not_written_for_the_duration_are_deleted(database_url: str) -> None:
    base = window()
    clock = Clock(base)
    async with replica(database_url, clock) as one:
        keys = [f"ctx-{base}-{i}" for i in range(5)]
        await save(one.context, keys[0])  # saved, never since: deleted
        await one.context.append_transcript(keys[1], [], "")  # nothing written: still created
        messages = [convert.context_message_from_wire(user("hi"))]
        await one.context.append_transcript(keys[2], messages, "")  # a transcript only: deleted
        await save(one.context, keys[3])
        clock.advance_ms(5 * DAY_MS)
        await one.context.append_transcript(keys[3], messages, "")  # written again later: kept
        await save(one.context, keys[4])  # saved later: kept
        cut = (base + DAY_MS) * NANOS_PER_MS

        purged, more = await one.context.purge_stale_contexts(cut, 1)
        assert (purged, more) == (1, True)
        purged, more = await one.context.purge_stale_contexts(cut, 10)
        assert (purged, more) == (2, False)
        assert [await context_exists(one.context, key) for key in keys] == [
            False,
            False,
            False,
            True,
            True,
        ]
        assert counted(one.metrics, "runstore_contexts_purged_total") == 3
        # A deleted key starts again from version 0.
        assert await one.context.save_context(keys[0], snapshot("again"), 0) == 1


async def test_a_pass_purges_what_is_old_enough_and_counts_it(
    store: Store, database_url: str
) -> None:
    base = window()
    now = base + 10 * DAY_MS  # the cut-offs: one day before
    clock = Clock(now)
    old_session = await ended_session(store, base)
    busy_session = await ended_session(store, base, running=True)
    young_session = await ended_session(store, now - DAY_MS // 2)
    old_run = await one_shot(store, base)
    old_child = await finished(store, base + 1, base + 2, parent=old_run)
    await finish(store, old_run, base + DAY_MS)
    running_run = await one_shot(store, base)
    young_run = await finished(store, base, now - DAY_MS // 2)
    async with replica(database_url, Clock(base)) as one:
        await save(one.context, f"ctx-{base}-old")
        task = task_of(one, clock)

        report = await task.run_pass()
        assert report.ran
        assert (report.sessions, report.runs, report.contexts) == (1, 2, 1)
        assert not await exists(store, old_session)
        assert await exists(store, busy_session) and await exists(store, young_session)
        assert not await run_exists(store, old_run.id) and not await run_exists(store, old_child.id)
        assert await run_exists(store, running_run.id) and await run_exists(store, young_run.id)

        assert counted(one.metrics, "runstore_sessions_purged_total") == 1
        assert counted(one.metrics, "runstore_runs_purged_total") == 2
        assert counted(one.metrics, "runstore_contexts_purged_total") == 1
        assert counted(one.metrics, "runstore_retention_passes_total") == 1
        assert counted(one.metrics, "runstore_retention_last_success_timestamp_seconds") > 0

        # The on-demand call counts into the same counter.
        extra = await finished(store, base, base + DAY_MS)
        ids, _ = await one.runtime.purge_sessionless_runs((now - DAY_MS) * NANOS_PER_MS, 10)
        assert ids == [extra.id]
        assert counted(one.metrics, "runstore_runs_purged_total") == 3


async def test_the_task_purges_on_its_interval(store: Store, database_url: str) -> None:
    base = window()
    clock = Clock(base + 2 * DAY_MS)
    waited: list[float] = []
    three_passes = asyncio.Event()
    sessions = [await ended_session(store, base)]
    async with replica(database_url, clock) as one:

        async def wait(seconds: float) -> None:
            """Instead of sleeping: the next pass's data, the clock moved on."""
            waited.append(seconds)
            if len(waited) == 3:
                three_passes.set()
                await task.stopping.wait()
                return
            assert not await exists(store, sessions[-1])  # the pass before purged it
            sessions.append(await ended_session(store, base + len(waited) * DAY_MS))
            clock.advance_ms(DAY_MS)

        task = task_of(one, clock, wait=wait, interval=300)
        task.start()
        await three_passes.wait()
        await task.stop()
        assert waited == [300, 300, 300]
        assert [await exists(store, session_id) for session_id in sessions] == [False] * 3
        assert counted(one.metrics, "runstore_retention_passes_total") == 3


async def test_replicas_take_turns_and_purge_each_row_once(store: Store, database_url: str) -> None:
    base = window()
    clock = Clock(base + 200 * DAY_MS)
    sessions = await asyncio.gather(*(ended_session(store, base + i) for i in range(12)))
    runs = await asyncio.gather(*(finished(store, base, base + i) for i in range(12)))
    async with replica(database_url, clock) as one, replica(database_url, clock) as two:
        # While one replica holds the retention lock, the other's pass is skipped.
        async with one.backend.retention_lock() as held:
            assert held
            same_db = make_url(database_url).get_backend_name() == "sqlite"
            other = task_of(one if same_db else two, clock)
            assert not (await other.run_pass()).ran
        assert counted((one if same_db else two).metrics, "runstore_retention_passes_total") == 1

        # Without the lock the store's re-checks alone still purge each row once.
        reports = await asyncio.gather(
            *(task_of(replica, clock, lock=always_held).run_pass() for replica in (one, two))
        )
        assert sum(report.sessions for report in reports) == len(sessions)
        assert sum(report.runs for report in reports) == len(runs)
    for session_id in sessions:
        assert not await exists(store, session_id)
    for run in runs:
        assert not await run_exists(store, run.id)


async def test_a_stop_mid_pass_ends_the_task_cleanly(store: Store, database_url: str) -> None:
    base = window()
    clock = Clock(base + 200 * DAY_MS)
    await asyncio.gather(*(finished(store, base, base + i) for i in range(5)))
    async with replica(database_url, clock) as one:
        task = task_of(one, clock)
        task.settings = RetentionSettings(sessionless_runs=86_400, batch=1)
        calls = 0
        purge = one.runtime.purge_sessionless_runs

        async def stopping_after_one(*args: Any) -> Any:
            nonlocal calls
            calls += 1
            task.stopping.set()  # a SIGTERM arrives during the first batch
            return await purge(*args)

        one.runtime.purge_sessionless_runs = stopping_after_one  # type: ignore[method-assign]
        report = await task.run_pass()
        assert (calls, report.runs) == (1, 1)  # the batch finished; no batch after it
        await task.stop()


async def test_a_failed_pass_is_counted_and_the_next_one_runs(
    store: Store, database_url: str
) -> None:
    base = window()
    clock = Clock(base + 200 * DAY_MS)
    old_session = await ended_session(store, base)
    attempts = 0

    @asynccontextmanager
    async def down_once() -> AsyncIterator[bool]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionRefusedError("the database is down")
        yield True

    async with replica(database_url, clock) as one:
        waited: list[float] = []
        second_pass = asyncio.Event()

        async def wait(seconds: float) -> None:
            waited.append(seconds)
            if len(waited) == 2:
                second_pass.set()
                await task.stopping.wait()

        task = task_of(one, clock, lock=down_once, wait=wait)
        task.start()
        await second_pass.wait()
        await task.stop()
        assert attempts == 2
        assert counted_with(one.metrics, "runstore_retention_passes_total", outcome="failed") == 1
        assert counted_with(one.metrics, "runstore_retention_passes_total", outcome="done") == 1
        assert not await exists(store, old_session)


def counted_with(metrics: Metrics, name: str, **labels: str) -> float:
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


# --- The real server process -------------------------------------------------------------


async def test_serve_runs_retention_at_start_and_stops_cleanly(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    base = window()
    async with (
        serve_process("--database-url", database) as (process, target),
        grpc.aio.insecure_channel(target) as channel,
    ):
        seeding = Store(channel, target=target)
        old_session = await ended_session(seeding, base)
        old_run = await finished(seeding, base, base + 1)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0

    flags = ("--retain-ended-sessions", "30d", "--retain-sessionless-runs", "30d")
    async with server_process("--database-url", database, *flags) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            store = Store(channel, target=server.target)
            # The first pass runs at start; its log line says when it is done.
            for _ in range(400):  # bounded: 20 s
                if b"retention pass: purged" in server.log:
                    break
                await asyncio.sleep(0.05)
            assert b"retention pass: purged 1 sessions, 1 sessionless runs" in server.log
            # Human units, not a repr of the settings or seconds with three decimals.
            log = server.log.decode()
            assert (
                "retention on: ended sessions after 30d, sessionless runs after 30d; every 10m"
                in log
            )
            assert re.search(r"retention pass: purged .* context keys in \d+ ms\n", log), log
            assert "RetentionSettings(" not in log
            assert not await exists(store, old_session)
            assert not await run_exists(store, old_run.id)
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), timeout=30) == 0
    assert b"runstore stopped" in server.log


async def test_serve_refuses_a_bad_duration() -> None:
    code, _, err = await run_module("runstore.server", "serve", "--retain-contexts", "3w")
    assert code == 2
    assert b"--retain-contexts must be a number of seconds or a number and ms, s, m, h or d" in err


async def test_serve_refuses_a_negative_duration_in_one_line() -> None:
    """``-5m`` is the flag's value, refused by name, not argparse's usage dump."""
    code, _, err = await run_module("runstore.server", "serve", "--retain-ended-sessions", "-5m")
    assert code == 2
    line = "runstore: --retain-ended-sessions must not be negative, not '-5m'"
    assert err.decode().strip() == line
