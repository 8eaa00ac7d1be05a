"""Private PostgreSQL clusters in tests: ``devtools.pg_cluster`` (binaries,
reaper, durability) with the suite's policy when none can run here (skip, or
fail where CI made PostgreSQL mandatory), and the helpers of the tests that
need a server demanding a password."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devtools import pg_cluster as _clusters
from devtools.pg_cluster import (
    SUPERUSER,
    Cluster,
    as_cluster_user,
    available,
    binaries,
    os_user,
    start_on_a_free_port,
)

__all__ = [
    "REQUIRED",
    "SUPERUSER",
    "Cluster",
    "as_cluster_user",
    "available",
    "binaries",
    "create",
    "os_user",
    "password_cluster",
    "pgpass_line",
    "private_cluster",
    "private_file",
    "require",
    "start_on_a_free_port",
]

REQUIRED = os.environ.get("RUNSTORE_REQUIRE_POSTGRES", "") not in ("", "0")
"""CI makes PostgreSQL mandatory: what would skip fails instead."""


def require() -> None:
    """Skips (fails where PostgreSQL is mandatory) when no private cluster can run."""
    reason = available()
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"a private PostgreSQL cluster is needed: {reason}")
    pytest.skip(reason)


def create(password: str | None = None, *, durable: bool = True) -> Cluster:
    """``devtools.pg_cluster.create`` once ``require()`` has passed."""
    require()
    return _clusters.create(password, durable=durable)


@contextlib.asynccontextmanager
async def private_cluster(
    password: str | None = None, *, durable: bool = True
) -> AsyncIterator[Cluster]:
    """``devtools.pg_cluster.private_cluster`` once ``require()`` has passed."""
    require()
    async with _clusters.private_cluster(password, durable=durable) as cluster:
        yield cluster


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


# The names helpers written against the first version of this module use.
OS_USER = SUPERUSER
_as_postgres = as_cluster_user
_make_root = _clusters.make_root
_free_port = _clusters.free_port


def __getattr__(name: str) -> Path:
    """``BIN``: the binaries' directory, found on first use (``binaries()``)."""
    if name == "BIN":
        directory = binaries()
        if directory is None:
            raise AttributeError(f"BIN: {available()}")
        return directory
    raise AttributeError(name)
