"""The pid file of ``runstore serve`` (``--pid-file``): how ``runstore auth
reload`` finds the server it sends SIGHUP (docs/security.md#reloading).

Both sides share this module: the server writes the file and holds an
exclusive ``flock`` on it for as long as it serves (the parent, under
``--workers``: it forwards SIGHUP to every worker); the reloader reads the pid
only from a file someone holds, so a file left by a server that was killed is
reported stale instead of signalling whatever process got its pid since.

Without ``--pid-file`` the file is named after the port of ``--listen`` in the
temporary directory (``$TMPDIR``, else ``/tmp``): writable in the image under
its read-only root, and found again from the same address.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

DEFAULT_LISTEN: Final = "127.0.0.1:50051"
"""``runstore serve``'s default ``--listen``."""


class PidFileError(Exception):
    """No running server can be found through the file; one line saying why."""


def default_path(listen: str) -> Path:
    """The pid file of a server on ``listen`` (``host:port``: its port names
    it, so ``0.0.0.0:50051`` and ``127.0.0.1:50051`` find the same file; a
    ``unix:`` path: the path)."""
    if listen.startswith("unix"):
        name = re.sub(r"[^A-Za-z0-9.]", "_", listen.partition(":")[2]).strip("_")
    else:
        name = listen.rpartition(":")[2]
    return Path(tempfile.gettempdir()) / f"runstore-{name or 'server'}.pid"


def server_path(configured: str, listen: str, port: int) -> Path:
    """A server's pid file: ``configured`` (``--pid-file``), else the default of
    ``listen`` on the port it actually bound (``port``, for ``:0``)."""
    if configured:
        return Path(configured)
    if not listen.startswith("unix"):
        listen = f"{listen.rpartition(':')[0]}:{port}"
    return default_path(listen)


class Unwritable(PidFileError):
    """The file cannot be created or opened for writing."""


class HeldElsewhere(PidFileError):
    """Another running process holds the file."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


@contextlib.contextmanager
def held(path: Path, pid: int | None = None, *, label: str = "") -> Iterator[Path]:
    """Writes ``pid`` (this process's by default) to ``path`` and holds it
    locked until the block ends, then removes it. ``label`` names the file
    in errors (default: ``the pid file PATH (--pid-file)``).

    Raises:
        HeldElsewhere: another process holds it (a server already runs with
            this pid file).
        PidFileError: it cannot be written.
    """
    descriptor = _locked(path, label or f"the pid file {path} (--pid-file)")
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid() if pid is None else pid}\n".encode(), 0)
        try:
            yield path
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)  # still ours: _locked saw this very file at the path
    finally:
        os.close(descriptor)


def hold(stack: contextlib.ExitStack, path: Path, *, required: bool) -> None:
    """Holds ``path`` (``held``) until ``stack`` closes. A default path
    (``required`` False) that cannot be written costs only the reload: one
    warning, and the server serves; a ``--pid-file`` given, or one another
    server holds, stops it."""
    try:
        stack.enter_context(held(path))
    except Unwritable as exc:
        if required:
            raise
        log.warning("%s: runstore auth reload will not find this server (set --pid-file)", exc)


def _locked(path: Path, label: str) -> int:
    """A descriptor of ``path`` holding its exclusive lock. A file its holder
    removed on the way out (between our open and our lock) is opened again:
    the lock must be on the file the path names, or two could hold one."""
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            problem = (exc.strerror or str(exc)).lower()
            raise Unwritable(f"cannot write {label}: {problem}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _read_pid(descriptor)
            os.close(descriptor)
            raise HeldElsewhere(
                f"{label} is held by another runstore serve" + (f" (pid {other})" if other else ""),
                other,
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                return descriptor
        except FileNotFoundError:
            pass
        os.close(descriptor)


def _read_pid(descriptor: int) -> int | None:
    text = os.pread(descriptor, 64, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def running_pid(path: Path) -> int:
    """The pid of the server that holds ``path``.

    Raises:
        PidFileError: there is no such file, nobody holds it (stale), or it
            holds no pid yet.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise PidFileError(
            f"no pid file {path}: no runstore serve with this --pid-file (or --listen) runs here"
        ) from None
    except OSError as exc:
        raise PidFileError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        else:
            raise PidFileError(f"{path} is stale: no runstore serve holds it")
        pid = _read_pid(descriptor)
        if pid is None:
            raise PidFileError(f"{path} holds no pid yet (the server is starting); try again")
        return pid
    finally:
        os.close(descriptor)
