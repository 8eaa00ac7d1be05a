"""Runs the Go client's tests against live servers: ``python -m tests.go_servers
--dir go -- go test -count=1 ./...`` (``make test-go``).

Starts two ``runstore serve`` processes on free loopback ports, one on a fresh
SQLite file and one on a fresh PostgreSQL database (RUNSTORE_TEST_POSTGRES_URL's
server, else a private cluster, ``tests/postgres.py``), exports their targets as
RUNSTORE_TEST_TARGET_SQLITE and RUNSTORE_TEST_TARGET_POSTGRES, and the
``runstore`` executable as RUNSTORE_TEST_SERVER_BINARY (for the tests that kill
and restart a server of their own), runs the command in ``--dir`` with go's
output passed through, then stops everything. The exit status is the command's.
Without PostgreSQL the variable stays unset and the Go tests skip that backend,
unless RUNSTORE_REQUIRE_POSTGRES makes it mandatory (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from tests import pg_cluster, postgres
from tests.processes import ServerProcess, server_process

_ROOT = Path(__file__).resolve().parent.parent


@contextlib.asynccontextmanager
async def _postgres_database() -> AsyncIterator[str | None]:
    """A fresh database's URL, or None when no PostgreSQL can run here."""
    if not postgres.EXISTING_URL:
        reason = pg_cluster.available()
        if reason is not None:
            if postgres.REQUIRED:
                raise SystemExit(f"go_servers: PostgreSQL is required: {reason}")
            print(f"go_servers: no PostgreSQL ({reason}): its Go tests skip", flush=True)
            yield None
            return
    try:
        async with postgres.fresh_database("runstore_go") as url:
            yield url
    finally:
        postgres.stop_own_server()


def _log_tail(server: ServerProcess, name: str, lines: int = 30) -> str:
    tail = server.log.decode(errors="replace").splitlines()[-lines:]
    return f"--- {name} server log (last {len(tail)} lines) ---\n" + "\n".join(tail)


async def _run(directory: Path, command: Sequence[str]) -> int:
    environment = dict(os.environ)
    environment["RUNSTORE_TEST_SERVER_BINARY"] = str(Path(sys.executable).with_name("runstore"))
    with tempfile.TemporaryDirectory(prefix="runstore-go-") as scratch:
        async with contextlib.AsyncExitStack() as stack:
            started = time.monotonic()
            servers: dict[str, ServerProcess] = {}
            servers["sqlite"] = await stack.enter_async_context(
                server_process("--database-url", f"sqlite:///{scratch}/go.db")
            )
            url = await stack.enter_async_context(_postgres_database())
            if url is not None:
                servers["postgres"] = await stack.enter_async_context(
                    server_process("--database-url", url, "--migrate")
                )
            for name, server in servers.items():
                environment[f"RUNSTORE_TEST_TARGET_{name.upper()}"] = server.target
            print(
                f"go_servers: {', '.join(f'{n} on {s.target}' for n, s in servers.items())} "
                f"(ready in {time.monotonic() - started:.1f}s); running {' '.join(command)}",
                flush=True,
            )
            process = await asyncio.create_subprocess_exec(*command, cwd=directory, env=environment)
            status = await process.wait()
            if status != 0:
                for name, server in servers.items():
                    print(_log_tail(server, name), file=sys.stderr)
            print(
                f"go_servers: {' '.join(command)} exited {status} "
                f"after {time.monotonic() - started:.1f}s",
                flush=True,
            )
            return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.go_servers", description=__doc__)
    parser.add_argument("--dir", default="go", help="the directory to run it in")
    parser.add_argument("command", nargs="+", help="the command, after --")
    args = parser.parse_args(argv)
    return asyncio.run(_run(_ROOT / args.dir, args.command))


if __name__ == "__main__":
    sys.exit(main())
