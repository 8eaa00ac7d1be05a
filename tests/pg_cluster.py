"""A private PostgreSQL cluster that demands a password, for the secrets tests.

It runs as the ``postgres`` OS user in a directory of its own, with its own
socket directory and a free loopback port, and is deleted afterwards; the
shared server on 5432 is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _as_postgres(*command: str) -> None:
    process = await asyncio.create_subprocess_exec(
        "runuser",
        "-u",
        "postgres",
        "--",
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {output.decode(errors='replace')}")


def _layout(password: str) -> tuple[Path, Path]:
    """A directory the postgres user can enter, with a socket dir and a password file."""
    base = Path(tempfile.mkdtemp(prefix="runstore-secrets-pg-"))
    base.chmod(0o777)
    (base / "sockets").mkdir()
    (base / "sockets").chmod(0o777)
    pwfile = base / "pwfile"
    pwfile.write_text(password + "\n")
    shutil.chown(pwfile, "postgres")
    return base, pwfile


@asynccontextmanager
async def password_cluster(password: str) -> AsyncIterator[int]:
    """Starts a cluster whose superuser ``postgres`` needs ``password``; yields its port."""
    if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("PostgreSQL 15 binaries or runuser are not installed")
    base, pwfile = _layout(password)
    data, sockets = base / "data", base / "sockets"
    port = _free_port()
    initialised = False
    try:
        await _as_postgres(
            str(BIN / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
        )
        initialised = True
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
        await _as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(base / "log"),
            "-o",
            options,
            "-w",
            "start",
        )
        yield port
    finally:
        if initialised:  # stop whatever started, even if "start" itself failed
            with contextlib.suppress(RuntimeError):
                await _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


def pgpass_line(port: int, password: str) -> str:
    return f"127.0.0.1:{port}:*:postgres:{password}\n"


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path
