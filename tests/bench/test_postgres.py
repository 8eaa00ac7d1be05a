"""The benchmarks' PostgreSQL server (``bench/postgres.py``): a private durable
one when no server is named, described from what the server itself reports,
and gone when the run ends."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from bench import postgres
from devtools import pg_cluster as clusters
from tests import pg_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.postgres
def test_a_run_without_a_server_starts_a_private_durable_one_and_deletes_it(
    tmp_path: Path,
) -> None:
    pg_cluster.require()
    output = tmp_path / "report.json"
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("RUNSTORE_BENCH_POSTGRES_URL", "RUNSTORE_TEST_POSTGRES_URL")
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--backend",
            "postgres",
            "--workloads",
            "append",
            "--concurrency",
            "1",
            "--repeat",
            "1",
            "--duration",
            "0.2",
            "--warmup",
            "0",
            "--protections",
            "off",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(output.read_text())
    server = report["postgres"]
    assert server["server"] == "private"
    assert {name: server[name] for name in postgres.DURABLE} == dict.fromkeys(
        postgres.DURABLE, "on"
    )
    assert any(row["workload"] == "append" for row in report["results"])
    # The settings as the server gave them, in the progress line and the report's table.
    assert "PostgreSQL: a private server started for this run" in completed.stdout
    row = " | ".join(str(server[name]) for name in ("server", *postgres.SHOWN))
    assert f"| {row} |" in completed.stdout
    # Gone once the run has ended: its directory and its port.
    root = Path(server["data_directory"]).parent
    assert root.name.startswith("runstore-pg-")
    assert not root.exists()
    port = make_url(server["url"]).port
    assert port is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.mark.postgres
def test_a_given_server_is_described_as_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # A scratch cluster (fsync off): the description is what the server says.
    cluster = pg_cluster.create(durable=False)
    try:
        pg_cluster.start_on_a_free_port(cluster)
        args = argparse.Namespace(backend="postgres", postgres_url=cluster.url())
        with postgres.provide(args) as server:
            assert args.postgres_url == cluster.url()
    finally:
        cluster.destroy()
    assert server is not None
    assert server["server"] == "given"
    assert {name: server[name] for name in postgres.DURABLE} == dict.fromkeys(
        postgres.DURABLE, "off"
    )
    assert (server["shared_buffers"], server["max_connections"]) == ("16MB", "60")
    assert "PostgreSQL: the server of --postgres-url" in capsys.readouterr().out


@pytest.mark.postgres
def test_a_private_server_that_does_not_sync_is_refused_and_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pg_cluster.require()
    created: list[clusters.Cluster] = []
    create = clusters.create

    def recording_create(**options: Any) -> clusters.Cluster:
        created.append(create(**options))
        return created[-1]

    monkeypatch.setattr(clusters, "create", recording_create)
    monkeypatch.setattr(postgres, "PRIVATE_SETTINGS", {**postgres.PRIVATE_SETTINGS, "fsync": "off"})
    args = argparse.Namespace(backend="postgres", postgres_url="")
    with pytest.raises(RuntimeError, match="not durable: fsync=off"), postgres.provide(args):
        pass
    assert args.postgres_url == ""
    (cluster,) = created
    assert not cluster.root.exists()


def test_no_server_is_started_without_the_postgres_backend_or_binaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clusters, "available", lambda: "no binaries here")
    with postgres.provide(argparse.Namespace(backend="sqlite", postgres_url="")) as server:
        assert server is None
    args = argparse.Namespace(backend="sqlite,postgres", postgres_url="")
    refused = pytest.raises(SystemExit, match="no binaries here; name a server with --postgres-url")
    with refused, postgres.provide(args):
        pass
