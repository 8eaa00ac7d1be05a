"""The example worker (examples/worker.py, shown in docs/clients/python.md) runs
against a real server."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from runstore.server.config import ServerConfig
from tests.certs import Authority
from tests.secured import Entry, running_server, write_auth_file
from tests.support import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "worker.py"


async def test_example_worker_runs_end_to_end(store: Store) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        "--target",
        store.target,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "root run turn-1-" in text and ": proceed" in text
    assert "link is record 4 of the root" in text
    assert "root run suspended" in text
    assert "resumes checkpoint await-user-" in text
    assert "assistant: Rain in Paris: take an umbrella." in text
    assert "=suspended" in text and "=completed" in text


async def test_example_worker_with_host_and_worker_tokens_over_tls(
    database_url: str, tmp_path: Path
) -> None:
    ca = Authority()
    cert, key = ca.server().write(tmp_path, "server")
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    host, worker = Entry("host"), Entry("worker")
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        tls_cert=str(cert),
        tls_key=str(key),
        auth_file=str(write_auth_file(tmp_path / "auth.toml", {"host": host, "w": worker})),
    )
    async with running_server(config) as running:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLE),
            "--target",
            f"127.0.0.1:{running.port}",
            "--ca",
            str(tmp_path / "ca.crt"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={
                **os.environ,
                "RUNSTORE_HOST_TOKEN": host.token,
                "RUNSTORE_WORKER_TOKEN": worker.token,
            },
        )
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "successor completed" in text
    assert "the worker may not end the session: principal 'w' (role worker)" in text
