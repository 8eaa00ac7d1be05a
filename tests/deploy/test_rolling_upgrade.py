"""A rolling upgrade from the previous release to this checkout, on PostgreSQL,
with real processes (docs/upgrades.md#the-rolling-upgrade-test).

Two replicas of the previous release (``deploy/previous-release``, installed
from its own wheels into its own virtualenv) serve one private durable
database holding 1,000,000 records, under a steady load through the Python
client: starts, appends and terminals through both replicas, and a Watch of the
load's session that resumes from its cursor whenever its replica goes away.
Meanwhile this checkout's ``runstore migrate`` migrates the schema, replica A
becomes this checkout, then replica B, then A goes back to the previous release
(which so serves the newer schema). No call may fail once the client's retries
are done, every acknowledged append must be in the database byte for byte, and
the Watch must have seen every record of the session exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import venv
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import asyncpg
import pytest

from runstore.client import (
    RemoteSessionAdmin,
    RemoteStore,
    RunRecord,
    RunStart,
    RunStartOutcome,
    RunStatus,
    records,
)
from runstore.contract.errors import RunstoreError
from tests import pg_cluster
from tests.deploy.conftest import ROOT, build_wheels, run

pytestmark = [pytest.mark.deploy, pytest.mark.postgres, pytest.mark.timeout(600)]

T = TypeVar("T")

PREVIOUS_RELEASE = ROOT / "deploy" / "previous-release"
HEAD_PYTHON = Path(sys.executable)
"""This checkout's runstore: the virtualenv running the tests (its editable install)."""

SEEDED_RECORDS = 1_000_000
SEEDED_RUNS = 100
WRITERS_PER_REPLICA = 2
CALLS_PER_SECOND = 15
"""Per writer: four writers make a steady 60 calls a second."""
APPENDS_PER_RUN = 8
MAX_RUNS_PER_WRITER = 400
"""The load's bound in count: it stops sooner, once the sequence is done."""
PROGRESS = 12
"""Appends each replica acknowledges after each step before the next one."""
STEP_TIMEOUT = 90.0
SERVING = re.compile(rb"serving on \S+ \(port (\d+)\)")
MIGRATING = b"migrating schema from"
SERVES_NEWER = b"is newer than this runstore's"


# --- The previous release -------------------------------------------------------


def previous_release_commit() -> str:
    """The commit ``deploy/previous-release`` names (its one non-comment line)."""
    lines = [
        line.strip()
        for line in PREVIOUS_RELEASE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert len(lines) == 1 and re.fullmatch(r"[0-9a-f]{40}", lines[0]), (
        f"{PREVIOUS_RELEASE} must hold one full commit hash besides its comments, not {lines}"
    )
    return lines[0]


@contextlib.contextmanager
def checked_out(commit: str, where: Path) -> Iterator[Path]:
    """``commit``'s tree in a detached worktree at ``where`` (removed after):
    no tag is needed, only the commit."""
    present = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if present.returncode != 0:
        pytest.fail(
            f"the previous release's commit {commit} (deploy/previous-release) is not in this "
            "clone: a shallow clone? run `git fetch --unshallow` (or fetch that commit) first "
            f"({present.stderr.strip()})"
        )
    run("git", "-C", ROOT, "worktree", "add", "--detach", where, commit)
    try:
        yield where
    finally:
        run("git", "-C", ROOT, "worktree", "remove", "--force", where, check=False)


@dataclass(frozen=True)
class Installed:
    python: Path
    seconds: float
    """How long building and installing it took."""


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A virtualenv holding the previous release, installed from wheels built
    from its commit (its dependencies from pip's cache or the index)."""
    begun = time.monotonic()
    base = tmp_path_factory.mktemp("previous-release")
    with checked_out(previous_release_commit(), base / "source") as source:
        wheels = build_wheels(source, base / "wheels")
    home = base / "venv"
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", *wheels.values())
    return Installed(python, time.monotonic() - begun)


def head_revision(python: Path) -> str:
    """The newest schema revision the runstore installed for ``python`` knows."""
    return run(
        python, "-c", "from runstore.server.db.migrate import head_revision; print(head_revision())"
    ).stdout.strip()


def clean_environment() -> dict[str, str]:
    """Nothing of this test's virtualenv or import path leaks into a child."""
    hidden = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    return {key: value for key, value in os.environ.items() if key not in hidden} | {
        "PYTHONUNBUFFERED": "1"
    }


# --- The database --------------------------------------------------------------

_SEED_SESSIONS = (
    "INSERT INTO sessions (session_id, status, created_at_s, created_at_ns) "
    "SELECT 'seed-' || s, 'active', 0, 0 FROM generate_series(0, $1 - 1) AS s"
)
_SEED_RUNS = (
    "INSERT INTO runs (run_id, agent_id, session_id, parent_run_id, started_at_ms, labels, "
    "start_outcome, status, cancellation_reason, updated_at, start_key, parent_link_key, "
    "cancellation_key, suspension_key, terminal_key) "
    "SELECT 'seed-run-' || s, 'seed-agent', 'seed-' || s, '', 0, '{}', 'proceed', 'running', "
    "'', 0, 'run_started', '', '', '', '' FROM generate_series(0, $1 - 1) AS s"
)
_SEED_RECORDS = (
    "INSERT INTO records (run_id, record_id, event_key, agent_id, session_id, turn_id, type, "
    "payload, payload_size, timestamp_ms, session_position) "
    "SELECT 'seed-run-' || (g / $2), g % $2 + 1, 'seed-' || lpad((g % $2)::text, 8, '0'), "
    "'seed-agent', 'seed-' || (g / $2), '', 'seeded', $3::bytea, length($3::bytea), g, "
    "g % $2 + 1 FROM generate_series(0, $1 - 1) AS g"
)


async def seed(url: str) -> float:
    """``SEEDED_RECORDS`` records in ``SEEDED_RUNS`` runs, inserted in SQL
    (the previous release's columns); returns the seconds it took. The
    secondary indexes of ``records`` are dropped and recreated from their own
    definitions around the insert (one sorted build beats a million inserts)."""
    begun = time.monotonic()
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            indexes = await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'records' AND indexname NOT IN ("
                "SELECT conname FROM pg_constraint WHERE conrelid = 'records'::regclass)"
            )
            for index in indexes:
                await conn.execute(f'DROP INDEX "{index["indexname"]}"')
            await conn.execute(_SEED_SESSIONS, SEEDED_RUNS)
            await conn.execute(_SEED_RUNS, SEEDED_RUNS)
            await conn.execute(
                _SEED_RECORDS,
                SEEDED_RECORDS,
                SEEDED_RECORDS // SEEDED_RUNS,
                b'{"seeded":true}',
            )
            for index in indexes:
                await conn.execute(index["indexdef"])
        await conn.execute("ANALYZE records")
        assert await conn.fetchval("SELECT count(*) FROM records") == SEEDED_RECORDS
    finally:
        await conn.close()
    return time.monotonic() - begun


async def schema_revision(url: str) -> tuple[str, str]:
    """The database's revision and the revision its compatibility marker names."""
    conn = await asyncpg.connect(url)
    try:
        version = await conn.fetchval("SELECT version_num FROM runstore_schema_version")
        marker = await conn.fetchval("SELECT revision FROM runstore_schema_compat")
    finally:
        await conn.close()
    return str(version), str(marker)


# --- The replicas --------------------------------------------------------------


@dataclass
class Replica:
    """One replica's address, and the ``runstore serve`` process behind it now."""

    name: str
    url: str
    port: int = 0
    """0 until the first start picks one; every later start reuses it."""
    release: str = ""
    process: asyncio.subprocess.Process | None = None
    logs: list[bytearray] = field(default_factory=list)
    drain: asyncio.Task[None] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> bytes:
        return bytes(self.logs[-1]) if self.logs else b""

    async def start(self, python: Path, release: str) -> None:
        self.release = release
        log = bytearray()
        self.logs.append(log)
        self.process = process = await asyncio.create_subprocess_exec(
            str(python), "-m", "runstore.cli", "serve",
            "--listen", f"127.0.0.1:{self.port}", "--database-url", self.url,
            "--pg-pool-max", "8",
            stderr=asyncio.subprocess.PIPE, env=clean_environment(), cwd="/",
        )  # fmt: skip
        assert process.stderr is not None
        while (serving := SERVING.search(log)) is None:
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
            assert line, f"replica {self.name} ({release}) exited before serving:\n{log.decode()}"
            log.extend(line)
        self.port = int(serving.group(1))
        self.drain = asyncio.ensure_future(_drain(process.stderr, log))

    async def stop(self) -> None:
        """A graceful stop (SIGTERM): calls in flight finish, Watch streams end
        UNAVAILABLE so their clients resume elsewhere; it must exit 0."""
        process = self.process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=60)
        self.process = None  # only now: one that does not exit is killed on the way out
        if self.drain is not None:
            await self.drain
        assert code == 0, f"{self.name} ({self.release}) exited {code}:\n{self.log.decode()}"

    async def kill(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        if self.drain is not None:
            self.drain.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.drain


async def _drain(stream: asyncio.StreamReader, log: bytearray) -> None:
    while chunk := await stream.read(65536):
        log.extend(chunk)


@dataclass
class Migration:
    revisions: str
    """What ``runstore migrate`` printed: one line per revision applied."""
    launched: float
    migrating: float
    """When it logged that it had the lock and began migrating."""
    exited: float


async def migrate(python: Path, url: str) -> Migration:
    """``runstore migrate`` of the runstore installed for ``python``, timed."""
    launched = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        str(python), "-m", "runstore.cli", "migrate", "--database-url", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=clean_environment(), cwd="/",
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    log, migrating = bytearray(), 0.0
    try:
        stdout = asyncio.ensure_future(process.stdout.read())
        while line := await asyncio.wait_for(process.stderr.readline(), timeout=STEP_TIMEOUT):
            log.extend(line)
            if MIGRATING in line and not migrating:
                migrating = time.monotonic()
        code = await process.wait()
        exited = time.monotonic()
        printed = (await stdout).decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, f"runstore migrate exited {code}:\n{printed}{log.decode()}"
    assert migrating, f"runstore migrate never said it was migrating:\n{log.decode()}"
    return Migration(printed, launched, migrating, exited)


# --- The load ------------------------------------------------------------------


class CallFailed(Exception):
    """A call of the load failed for good (``Load.failures`` says how)."""


@dataclass(frozen=True)
class Ack:
    """A record the server acknowledged (a start's ``run_started``, an append,
    a terminal's ``run_completed``), and when (monotonic seconds)."""

    what: str
    record: RunRecord
    id: str
    replica: str
    begun: float
    done: float


@dataclass
class Load:
    """Starts, appends and terminals through one client per replica, at a
    steady pace, all in one session; and a Watch of that session through both."""

    session_id: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    calls: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    retried_errors: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    appended: Counter[str] = field(default_factory=Counter)
    """Appends acknowledged through each replica."""
    watched: list[RunRecord] = field(default_factory=list)
    watch_resumes: int = 0
    progress: asyncio.Condition = field(default_factory=asyncio.Condition)

    def on_retry(self, replica: str) -> Callable[[RunstoreError, int, float], None]:
        def count(error: RunstoreError, attempt: int, delay: float) -> None:
            self.retries[replica] += 1
            self.retried_errors[type(error).__name__] += 1

        return count

    def on_watch_resume(self, error: RunstoreError, attempt: int, delay: float) -> None:
        self.watch_resumes += 1
        self.retried_errors[type(error).__name__] += 1

    async def call(self, what: str, replica: str, call: Awaitable[T]) -> T:
        """``call``, counted; a failure (what the client's retries could not
        complete) is recorded and ends the writer."""
        self.calls[what] += 1
        try:
            return await call
        except Exception as error:
            await self.fail(f"{what} through {replica}: {error!r}")
            raise CallFailed from error

    async def fail(self, failure: str) -> None:
        async with self.progress:
            self.failures.append(failure)
            self.progress.notify_all()  # whoever waits for progress fails now

    async def writer(self, client: RemoteStore, replica: str, index: int) -> None:
        loop = asyncio.get_running_loop()
        tick = loop.time()

        async def paced() -> None:
            nonlocal tick
            tick += 1 / CALLS_PER_SECOND
            await asyncio.sleep(max(0.0, tick - loop.time()))  # the load's rate, not a wait

        try:
            for number in range(MAX_RUNS_PER_WRITER):
                if self.stop.is_set():
                    return
                run_start = RunStart(
                    run_id=f"{self.session_id}-{replica}{index}-{number}",
                    agent_id="rolling-agent",
                    started_at=records.now(),
                    session_id=self.session_id,
                )
                start = records.root_run_start(run_start)
                await paced()
                begun = time.monotonic()
                started = await self.call("start", replica, client.start_root_run(start))
                assert started.outcome is RunStartOutcome.PROCEED, started
                await self.acked_by(replica, "start", start.started, started.started.id, begun)
                for step in range(APPENDS_PER_RUN):
                    record = RunRecord(
                        event_key=f"step-{step}",
                        run_id=run_start.run_id,
                        agent_id=run_start.agent_id,
                        session_id=self.session_id,
                        type="rolling_step",
                        payload=json.dumps(
                            {"run": run_start.run_id, "step": step, "nonce": uuid.uuid4().hex}
                        ).encode(),
                        timestamp=records.now(),
                    )
                    await paced()
                    begun = time.monotonic()
                    result = await self.call("append", replica, client.append_run_record(record))
                    await self.acked_by(replica, "append", record, result.id, begun)
                terminal = records.run_terminal(run_start, RunStatus.COMPLETED)
                await paced()
                begun = time.monotonic()
                ended = await self.call("terminal", replica, client.record_run_terminal(terminal))
                await self.acked_by(replica, "terminal", terminal.record, ended.id, begun)
        except CallFailed:
            pass  # recorded by call()
        except Exception as error:
            await self.fail(f"writer {replica}{index}: {error!r}")

    async def acked_by(
        self, replica: str, what: str, record: RunRecord, record_id: str, begun: float
    ) -> None:
        assert record_id, f"{what} acknowledged without a record ID"
        async with self.progress:
            self.acks.append(Ack(what, record, record_id, replica, begun, time.monotonic()))
            if what == "append":
                self.appended[replica] += 1
                self.progress.notify_all()

    async def watch(self, client: RemoteStore) -> None:
        try:
            async for record in client.watch_session_run_records(self.session_id):
                async with self.progress:
                    self.watched.append(record)
                    self.progress.notify_all()
        except Exception as error:
            await self.fail(f"the Watch: {error!r}")
            raise

    async def until(self, what: str, done: Callable[[], bool]) -> None:
        """Waits for ``done()``; fails at the first failed call instead."""
        async with self.progress:
            try:
                await asyncio.wait_for(
                    self.progress.wait_for(lambda: bool(self.failures) or done()), STEP_TIMEOUT
                )
            except TimeoutError:
                raise AssertionError(f"{what}: not done after {STEP_TIMEOUT}s") from None
        assert not self.failures, f"waiting for {what}: {self.failures}"

    async def flowing_through(self, *replicas: Replica) -> None:
        """Waits until each replica has acknowledged ``PROGRESS`` more appends."""
        wanted = {replica.name: self.appended[replica.name] + PROGRESS for replica in replicas}
        await self.until(
            f"appends through {', '.join(f'{r.name} ({r.release})' for r in replicas)}",
            lambda: all(self.appended[name] >= count for name, count in wanted.items()),
        )


@contextlib.asynccontextmanager
async def running(load: Load, a: Replica, b: Replica) -> AsyncIterator[list[asyncio.Task[None]]]:
    """The writers and the Watch, running; cancelled on the way out if still running."""
    watch_client = RemoteStore(
        f"ipv4:{a.target},{b.target}", on_retry=load.on_watch_resume
    )  # either replica: the channel connects to whichever answers
    clients = {r.name: RemoteStore(r.target, on_retry=load.on_retry(r.name)) for r in (a, b)}
    writers = [
        asyncio.ensure_future(load.writer(client, name, index))
        for name, client in clients.items()
        for index in range(WRITERS_PER_REPLICA)
    ]
    watcher = asyncio.ensure_future(load.watch(watch_client))
    try:
        yield [*writers, watcher]
    finally:
        for task in [*writers, watcher]:
            task.cancel()
        await asyncio.gather(*writers, watcher, return_exceptions=True)
        for client in [watch_client, *clients.values()]:
            await client.close()


# --- The test ------------------------------------------------------------------


async def test_a_rolling_upgrade_loses_nothing_and_fails_no_call(
    previous_release: Installed, capsys: pytest.CaptureFixture[str]
) -> None:
    begun = time.monotonic()
    previous_python = previous_release.python
    previous_head, new_head = head_revision(previous_python), head_revision(HEAD_PYTHON)
    assert previous_head != new_head, (
        f"no migration between previous-release and HEAD: both are at schema {new_head}; "
        "a rolling upgrade needs at least one (deploy/previous-release names the release before)"
    )
    previous, head = f"previous release ({previous_head})", f"HEAD ({new_head})"

    async with pg_cluster.private_cluster(durable=True) as cluster:
        url = await cluster.create_database("rolling")
        await migrate(previous_python, url)
        assert await schema_revision(url) == (previous_head, previous_head)
        seeding = await seed(url)

        a, b = Replica("A", url), Replica("B", url)
        try:
            await a.start(previous_python, previous)
            await b.start(previous_python, previous)
            session_id = f"rolling-{uuid.uuid4().hex[:12]}"
            async with RemoteSessionAdmin(a.target) as admin:
                await admin.create_session(session_id, records.now())
            load = Load(session_id)
            async with running(load, a, b) as tasks:
                await load.flowing_through(a, b)

                # This checkout's migration, while the previous release serves.
                migration = await migrate(HEAD_PYTHON, url)
                assert new_head in migration.revisions, migration.revisions
                assert await schema_revision(url) == (new_head, new_head)
                await load.flowing_through(a, b)

                # A becomes HEAD, then B; then A goes back to the previous release.
                for replica, python, release in (
                    (a, HEAD_PYTHON, head),
                    (b, HEAD_PYTHON, head),
                    (a, previous_python, previous),
                ):
                    await replica.stop()
                    await replica.start(python, release)
                    await load.flowing_through(a, b)
                assert SERVES_NEWER in a.log, a.log.decode()

                load.stop.set()
                writers = tasks[:-1]
                await asyncio.wait_for(asyncio.gather(*writers), STEP_TIMEOUT)
                assert not load.failures, load.failures
                stored = await session_records(url, session_id)
                await load.until("the Watch catching up", lambda: len(load.watched) >= len(stored))
            await a.stop()
            await b.stop()
        finally:
            await a.kill()
            await b.kill()

    # 0 failed calls: every one the client's retries did not complete would be here.
    assert not load.failures, load.failures
    # 0 acknowledged records lost: each one is in the database, byte for byte.
    by_key = {(row["run_id"], row["event_key"]): row for row in stored}
    lost, altered = [], []
    for ack in load.acks:
        row = by_key.get((ack.record.run_id, ack.record.event_key))
        if row is None:
            lost.append(ack)
        elif (str(row["record_id"]), bytes(row["payload"]), row["type"]) != (
            ack.id,
            ack.record.payload,
            ack.record.type,
        ):
            altered.append(ack)
    assert not lost and not altered, (lost[:3], altered[:3])
    # The Watch: every record of the session exactly once, in session order.
    seen = [(record.run_id, record.id) for record in load.watched]
    assert len(set(seen)) == len(seen), "the Watch sent a record twice"
    assert seen == [(row["run_id"], str(row["record_id"])) for row in stored]
    assert load.watch_resumes >= 1, "the Watch never lost its replica"

    appends = [ack for ack in load.acks if ack.what == "append"]
    during = [ack for ack in appends if migration.launched <= ack.done <= migration.exited]
    migrating = [ack for ack in during if ack.done >= migration.migrating]
    overlapping = [
        ack for ack in appends if ack.begun <= migration.exited and ack.done >= migration.launched
    ]
    assert during, "no append completed while runstore migrate ran"
    wall = time.monotonic() - begun
    with capsys.disabled():
        print(
            f"\nrolling upgrade {previous_head} -> {new_head} in {wall:.1f}s "
            f"(+{previous_release.seconds:.1f}s building the previous release): "
            f"{sum(load.calls.values())} calls ({dict(load.calls)}), 0 failed; "
            f"{sum(load.retries.values())} retried attempts ({dict(load.retries)}; "
            f"{dict(load.retried_errors)}); {len(load.acks)} records acknowledged "
            f"({len(appends)} appends), all stored; "
            f"the Watch saw {len(seen)} records once each, resuming {load.watch_resumes} times\n"
            f"seeded {SEEDED_RECORDS:,} records in {seeding:.1f}s; runstore migrate took "
            f"{migration.exited - migration.launched:.2f}s "
            f"({migration.exited - migration.migrating:.2f}s migrating); "
            f"{len(during)} appends completed meanwhile ({len(migrating)} while migrating), "
            "slowest append during it "
            f"{max(ack.done - ack.begun for ack in overlapping) * 1000:.0f} ms"
        )


async def session_records(url: str, session_id: str) -> list[asyncpg.Record]:
    """Every record of the session, in session order, from the database itself."""
    conn = await asyncpg.connect(url)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT run_id, record_id, event_key, type, payload FROM records "
            "WHERE session_id = $1 ORDER BY session_position",
            session_id,
        )
    finally:
        await conn.close()
    return rows
