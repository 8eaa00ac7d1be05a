"""A private PostgreSQL cluster for tests that crash, stop or freeze the
database, or that need one demanding a password.

The shared server (RUNSTORE_TEST_POSTGRES_URL) must never be disturbed, so a
test that kills PostgreSQL starts its own: ``initdb`` and ``pg_ctl`` run as the
``postgres`` OS user in a fresh directory, with its own socket directory and a
free loopback port, and everything is deleted afterwards. Durability is that
of a crashed *process* (the kernel keeps the page cache), so ``fsync`` is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from tests import postgres

BIN = Path(os.environ.get("RUNSTORE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"


def _as_postgres(*command: str) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", OS_USER, "--", *command]
    return list(command)


def available() -> str | None:
    """Why a private cluster cannot run here, or None."""
    if not (BIN / "initdb").exists():
        return f"no PostgreSQL binaries in {BIN}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser is missing"
    return None


def require() -> None:
    """Skips (fails where PostgreSQL is mandatory) when no private cluster can run."""
    reason = available()
    if reason is None:
        return
    if postgres.REQUIRED:
        pytest.fail(f"a private PostgreSQL cluster is needed: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Cluster:
    """One private cluster: start, stop (any mode), freeze and thaw it."""

    root: Path
    port: int
    password: str | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        user = OS_USER if self.password is None else f"{OS_USER}:{self.password}"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    async def _pg_ctl(self, *args: str) -> None:
        command = _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-w", "-s", *args)
        process = await asyncio.create_subprocess_exec(
            *command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {err.decode().strip()}")

    async def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root / 'sock'} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=60 "
            "-c shared_buffers=16MB"
        )
        await self._pg_ctl("-l", str(self.root / "log"), "-o", options, "start")

    async def stop(self, mode: str = "fast") -> None:
        """``mode="immediate"`` is a crash: no checkpoint, recovery on start."""
        await self._pg_ctl("-m", mode, "stop")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def _processes(self) -> list[int]:
        """The postmaster and every process it forked."""
        parent = self.postmaster_pid()
        if parent is None:
            return []
        pids = [parent]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid == parent:
                    pids.append(int(entry.name))
        return pids

    def _signal_all(self, signum: int) -> None:
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def freeze(self) -> None:
        """SIGSTOP the postmaster and its backends: the database hangs, sockets stay open."""
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_all(signal.SIGCONT)

    async def create_database(self, name: str) -> str:
        conn = await asyncpg.connect(self.url())
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url(name)


def _make_root(password: str | None) -> Path:
    """A fresh directory the ``postgres`` user owns and can enter (with the
    superuser's password file when there is one)."""
    root = Path(tempfile.mkdtemp(prefix="runstore-pg-", dir="/tmp"))
    (root / "sock").mkdir()
    if password is not None:
        (root / "pwfile").write_text(password + "\n")
    if os.geteuid() == 0:
        for path in (root, root / "sock", *([root / "pwfile"] if password is not None else [])):
            shutil.chown(path, OS_USER)
    root.chmod(0o755)
    return root


@contextlib.asynccontextmanager
async def private_cluster(password: str | None = None) -> AsyncIterator[Cluster]:
    """A started private cluster, stopped and deleted afterwards. With a
    ``password`` the superuser ``postgres`` must give it (scram-sha-256)."""
    require()
    root = _make_root(password)
    cluster = Cluster(root, _free_port(), password)
    auth = ["--auth=trust"]
    if password is not None:
        auth = ["--auth=scram-sha-256", f"--pwfile={root / 'pwfile'}"]
    initdb = await asyncio.create_subprocess_exec(
        *_as_postgres(
            str(BIN / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            OS_USER,
            *auth,
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, err = await initdb.communicate()
    if initdb.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {err.decode().strip()}")
    try:
        await cluster.start()
        yield cluster
    finally:
        cluster.thaw()
        with contextlib.suppress(RuntimeError):
            await cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@contextlib.asynccontextmanager
async def password_cluster(password: str) -> AsyncIterator[int]:
    """A private cluster whose superuser ``postgres`` needs ``password``; yields its port."""
    async with private_cluster(password) as cluster:
        yield cluster.port


def pgpass_line(port: int, password: str) -> str:
    return f"127.0.0.1:{port}:*:postgres:{password}\n"


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path
