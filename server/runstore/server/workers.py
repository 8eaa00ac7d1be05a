"""``runstore serve --workers N``: N server processes on one port (PostgreSQL).

One Python process serves calls on one core (the GIL). On PostgreSQL every
replica already shares the database, so a host runs N worker processes
behind one port: each binds it with ``SO_REUSEPORT`` and the kernel spreads
new connections over them. The parent serves nothing: it reserves the port,
starts the workers, forwards SIGTERM, SIGINT and SIGHUP to them, and exits
non-zero as soon as one dies unexpectedly (after stopping the others), so a
supervisor (systemd, Kubernetes) restarts the whole set.

The port is still refused to anyone else: a runstore serving it alone did not
set ``SO_REUSEPORT``, so the kernel refuses the workers (and them to it), and
a second ``--workers`` runstore is refused by the lock file the parent holds.
SQLite has one writer: it stays one process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Final

from runstore.contract import pid_file
from runstore.server import logs
from runstore.server.config import ServerConfig

log = logging.getLogger("runstore")

WORKER_ENV: Final = "RUNSTORE_WORKER"
"""Set (to the worker's number) in a worker's environment: it binds with SO_REUSEPORT."""

_FORWARDED: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class WorkersError(Exception):
    """``--workers`` cannot be honoured (SQLite, or the port is taken); one line."""


def is_worker() -> bool:
    return WORKER_ENV in os.environ


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def _lock_path(host: str, port: int) -> Path:
    name = re.sub(r"[^A-Za-z0-9.]", "_", host) or "any"
    return Path(tempfile.gettempdir()) / f"runstore-{name}-{port}.lock"


@contextlib.contextmanager
def reserved_port(listen: str) -> Iterator[int]:
    """The port of ``listen`` (an ephemeral one for port 0), held for the
    workers: a socket bound with SO_REUSEPORT (refused if a runstore serves
    it alone) and an exclusive lock on a file named after it (refused if
    another ``--workers`` runstore holds it)."""
    host, port = _host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as reservation:
        reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            reservation.bind((host, port))
        except OSError as exc:
            raise WorkersError(
                f"cannot listen on {listen} (--listen): {(exc.strerror or str(exc)).lower()}"
            ) from exc
        port = reservation.getsockname()[1]
        path = _lock_path(host, port)
        with path.open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise WorkersError(
                    f"cannot listen on {host}:{port} (--listen): address already in use "
                    f"(another runstore --workers holds {path})"
                ) from None
            yield port


def _without_workers_flag(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return out


def worker_argv(config: ServerConfig, argv: Sequence[str], port: int, number: int) -> list[str]:
    """A worker's command line: the parent's, on the reserved port; a fixed
    metrics port becomes one per worker (port + number); the console is served
    by the first worker alone (its port is not shared, and one console reads
    every worker's commits through the database and its wake-ups)."""
    host, _ = _host_port(config.listen)
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    extra = ["--listen", listen]
    if config.metrics_listen:
        metrics_host, metrics_port = _host_port(config.metrics_listen)
        if metrics_port:
            extra += ["--metrics-listen", f"{metrics_host}:{metrics_port + number}"]
    if config.console_listen and number > 0:
        extra += ["--console-listen", ""]
    return [sys.executable, "-m", "runstore.server", *_without_workers_flag(argv), *extra]


def check(config: ServerConfig) -> None:
    """Refuses ``--workers`` above 1 on SQLite (one writer, one process)."""
    if config.workers > 1 and not config.database_url.startswith("postgresql"):
        raise WorkersError(
            f"--workers {config.workers}: SQLite is served by one process (its one writer); "
            "more workers need PostgreSQL"
        )


def supervise(config: ServerConfig, argv: Sequence[str]) -> int:
    """Runs ``config.workers`` workers until a signal stops them (0 when they
    all stopped cleanly) or one dies unexpectedly (1, the others stopped)."""
    check(config)
    with reserved_port(config.listen) as port:
        children: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}
        stopping = False

        def forward(signum: int, _frame: FrameType | None) -> None:
            nonlocal stopping
            if signum != signal.SIGHUP:
                stopping = True
            for pid in children:  # os.kill: Popen.send_signal would reap a dead child
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

        previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED}
        held = contextlib.ExitStack()
        try:
            path = pid_file.server_path(config.pid_file, config.listen, port)
            pid_file.hold(held, path, required=bool(config.pid_file))
            for number in range(config.workers):
                env = {**os.environ, WORKER_ENV: str(number), "RUNSTORE_WORKERS": "1"}
                # Each worker writes its own lines (JSON too) to the original stderr.
                # It inherits SIGHUP ignored until its server handles it: a
                # reload while it starts must not end it (and with it the set).
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                try:
                    child = subprocess.Popen(
                        worker_argv(config, argv, port, number),
                        env=env,
                        stderr=logs.original_stderr(),
                    )
                finally:
                    signal.signal(signal.SIGHUP, forward)
                children[child.pid] = (number, child)
            log.info(
                "runstore: %d workers on port %d (pids %s)",
                config.workers,
                port,
                ", ".join(str(pid) for pid in children),
            )
            failed = False
            while children:
                try:
                    pid, status = os.waitpid(-1, 0)
                except ChildProcessError:  # reaped elsewhere: nothing left to wait for
                    break
                if pid not in children:
                    continue
                number, _ = children.pop(pid)
                code = os.waitstatus_to_exitcode(status)
                if not stopping:
                    log.error(
                        "runstore: worker %d (pid %d) exited unexpectedly (code %d); "
                        "stopping the others",
                        number,
                        pid,
                        code,
                    )
                    failed = stopping = True
                    forward(signal.SIGTERM, None)
                elif code != 0:
                    failed = True
            return 1 if failed else 0
        finally:
            held.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
