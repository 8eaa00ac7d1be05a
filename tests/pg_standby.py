"""A private primary with a streaming standby, for failover and replica tests.

Both are private clusters (``tests.pg_cluster``) on free loopback ports, run
with ``fsync`` on: a primary that is killed loses what a real one would. The
standby is a ``pg_basebackup`` of the primary that streams its WAL; with
``synchronous=True`` the primary's commits wait until the standby has it
(``synchronous_standby_names``), so promoting the standby loses nothing
acknowledged. Everything is stopped and deleted afterwards, even on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from tests import pg_cluster

STANDBY_NAME = "standby1"
"""The standby's ``application_name``, named by ``synchronous_standby_names``."""


@dataclass
class Node(pg_cluster.Cluster):
    """A private cluster started with durable settings of its own."""

    settings: dict[str, str] = field(default_factory=dict)

    async def start(self) -> None:
        settings = {
            "listen_addresses": "127.0.0.1",
            "fsync": "on",
            "full_page_writes": "on",
            "max_connections": "120",
            "shared_buffers": "16MB",
            "max_wal_senders": "4",
            "wal_level": "replica",
            **self.settings,
        }
        options = " ".join(
            [f"-p {self.port}", f"-k {self.root / 'sock'}"]
            + [f"-c {name}={value}" for name, value in settings.items()]
        )
        await self._pg_ctl("-l", str(self.root / "log"), "-o", options, "start")

    async def promote(self) -> None:
        await self._pg_ctl("promote")

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once: the machine is gone."""
        pid = self.postmaster_pid()
        try:
            alive = Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
        except OSError:
            alive = False
        if alive:  # never a stale pid file's number, reused by another process
            self._signal_all(signal.SIGKILL)

    def log_text(self) -> str:
        try:
            return (self.root / "log").read_text(errors="replace")
        except FileNotFoundError:
            return ""


async def _run(*command: str) -> None:
    process = await asyncio.create_subprocess_exec(
        *pg_cluster._as_postgres(*command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed: {err.decode().strip()}")


async def _initdb(node: Node) -> None:
    await _run(
        str(pg_cluster.BIN / "initdb"),
        "-D",
        str(node.data),
        "-U",
        pg_cluster.OS_USER,
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync",  # a killed process leaves the page cache: initdb's files stay
        "--no-instructions",
    )


async def _stop_and_delete(node: Node) -> None:
    try:
        await node.stop("immediate")
    except RuntimeError:
        node.kill()  # whatever pg_ctl could not reach
    shutil.rmtree(node.root, ignore_errors=True)


@contextlib.asynccontextmanager
async def durable_cluster(settings: dict[str, str] | None = None) -> AsyncIterator[Node]:
    """One started private cluster with fsync on and ``settings``, deleted afterwards."""
    pg_cluster.require()
    node = Node(pg_cluster._make_root(None), pg_cluster._free_port(), settings=settings or {})
    try:
        await _initdb(node)
        await node.start()
        yield node
    finally:
        await _stop_and_delete(node)


@dataclass
class Pair:
    """A primary and its standby, with the multi-host URL that names both."""

    primary: Node
    standby: Node
    database: str

    def url(self, *, target_session_attrs: str | None = "read-write") -> str:
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        query = f"?target_session_attrs={target_session_attrs}" if target_session_attrs else ""
        return f"postgresql://{pg_cluster.OS_USER}@{hosts}/{self.database}{query}"

    def standby_url(self) -> str:
        return self.standby.url(self.database)

    async def replication_state(self) -> str | None:
        """The standby's ``sync_state`` as the primary reports it (None: not streaming)."""
        conn = await asyncpg.connect(self.primary.url(), timeout=5)
        try:
            state: str | None = await conn.fetchval(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
                STANDBY_NAME,
            )
            return state
        finally:
            await conn.close()


async def _until(condition: str, check: object, seconds: float = 30.0) -> None:
    """Polls the async ``check`` until it is truthy, at most ``seconds``."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while True:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            if await check():  # type: ignore[operator]
                return
        if loop.time() > until:
            raise AssertionError(f"not within {seconds} s: {condition}")
        await asyncio.sleep(0.05)


async def _name_synchronous_standby(primary: Node) -> None:
    conn = await asyncpg.connect(primary.url(), timeout=5)
    try:
        await conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def primary_and_standby(
    database: str, *, synchronous: bool = True, setting_copied: bool = False
) -> AsyncIterator[Pair]:
    """A started primary holding ``database`` (empty) and a standby streaming
    from it, synchronous (the primary's commits wait for it) or not.

    ``setting_copied``: the primary names the standby in
    ``synchronous_standby_names`` before ``pg_basebackup`` copies it, as on a
    primary set up for synchronous replication before its standby was made:
    the standby's ``postgresql.auto.conf`` names a synchronous standby too,
    and once promoted its commits wait for one that does not exist."""
    pg_cluster.require()
    primary = Node(pg_cluster._make_root(None), pg_cluster._free_port())
    standby: Node | None = None
    try:
        await _initdb(primary)
        await primary.start()
        await primary.create_database(database)
        if synchronous and setting_copied:
            await _name_synchronous_standby(primary)
        standby = Node(
            pg_cluster._make_root(None),
            pg_cluster._free_port(),
            settings={"hot_standby": "on", "hot_standby_feedback": "on"},
        )
        await _run(
            str(pg_cluster.BIN / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            pg_cluster.OS_USER,
            "-D",
            str(standby.data),
            "-X",
            "stream",
            "--checkpoint=fast",
            "--no-sync",
        )
        (standby.data / "standby.signal").touch()
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={primary.port} "
                f"user={pg_cluster.OS_USER} application_name={STANDBY_NAME}'\n"
            )
        await standby.start()
        pair = Pair(primary, standby, database)
        await _until("the standby streams", lambda: pair.replication_state())
        if synchronous:
            if not setting_copied:
                await _name_synchronous_standby(primary)

            async def is_sync() -> bool:
                return await pair.replication_state() == "sync"

            await _until("the standby is synchronous", is_sync)
        yield pair
    finally:
        for node in (standby, primary):
            if node is not None:
                await _stop_and_delete(node)


async def replay_lag_seconds(standby_url: str) -> float | None:
    """What the standby reports of its own lag (None before it replayed anything)."""
    conn = await asyncpg.connect(standby_url, timeout=5)
    try:
        lag: float | None = await conn.fetchval(
            "SELECT EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8"
        )
        return lag
    finally:
        await conn.close()
