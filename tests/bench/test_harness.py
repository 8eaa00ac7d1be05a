"""The benchmark harness end to end, at toy sizes: seeds, server, driver, report.

Not a timing test: it checks that ``make bench`` still runs against the current
schema and reads the pages it claims to read (the driver refuses a page that is
not the full last page of the seeded history).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import readme
from tests import needs, postgres

ROOT = Path(__file__).resolve().parents[2]


def _run_bench(tmp_path: Path, *args: str) -> dict:
    return _bench(tmp_path, *args)[1]


def _bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Runs the harness at toy sizes; a later flag in ``args`` overrides a default."""
    output = tmp_path / "report.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--duration",
            "0.05",
            "--warmup",
            "0",
            "--repeat",
            "1",
            "--concurrency",
            "1,2",
            "--history",
            "150,400",
            "--tables",
            "5000,6000",
            "--retention-items",
            "20",
            "--output",
            str(output),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert "× ceiling" in completed.stdout
    return completed, json.loads(output.read_text())


def _check_report(report: dict, backend: str) -> None:
    rows = {(r["workload"], r["in_flight"]) for r in report["results"]}
    for in_flight in (1, 2):
        for workload in (
            "ceiling",
            "append",
            "append_client",
            "append_batch",
            "append_shared_session",
            "append_varied",
            "start_terminal",
            "turn",
            "list_run (last page of 150)",
            "list_run (last page of 400)",
            "list_session (last page of 150)",
            "list_session (last page of 400)",
        ):
            assert (workload, in_flight) in rows
    # Listings: a page's cost at 1 in flight, per table size.
    for listing in (
        "sessions, deep page (table of 5,000)",
        "runs, agent + 2 statuses (table of 6,000)",
        "runs, sessionless (table of 6,000)",
    ):
        assert (listing, 1) in rows and (listing, 2) not in rows
    # Watch: latency with 1 and 100 watchers (PostgreSQL: across two replicas), and
    # appends with 100 idle watchers against none, paired.
    replicas = 2 if backend == "postgres" else 1
    for watchers in ("1 watcher", "100 watchers"):
        (latency,) = [
            r for r in report["results"] if r["workload"] == f"watch latency ({watchers})"
        ]
        assert latency["replicas"] == replicas
        assert 0 < latency["p50_ms"] <= latency["p99_ms"]
    (idle,) = [r for r in report["results"] if r["workload"] == "append (100 idle watchers)"]
    assert idle["in_flight"] == 2 and idle["vs_no_watchers"] > 0
    assert ("append (0 idle watchers)", 2) in rows
    for row in report["results"]:
        assert row["backend"] == backend
        if row["workload"].startswith("watch latency"):
            continue
        assert row["ops_per_s"] > 0
        assert row["ratio_to_ceiling"] > 0
        assert row["client_cpu_ms_per_op"] is not None
    # PostgreSQL: every write workload's commits per operation (its database's
    # xact_commit, published by the backends at most once a second: only present).
    for row in report["results"]:
        if row["workload"] in (
            "append",
            "append_client",
            "append_batch",
            "append_shared_session",
            "turn",
        ):
            assert (row["commits_per_op"] is not None) == (backend == "postgres")
    # Retention: every seeded session and run was purged (the module checks the counts).
    [retained] = report["retention"]
    assert (retained["backend"], retained["items"]) == (backend, 20)
    assert retained["sessions_per_second"] > 0 and retained["sessionless_runs_per_second"] > 0


# Every workload on fresh servers (one more per idle-watchers arm): longer than
# the suite's default per-test timeout on a busy machine.
@pytest.mark.timeout(480)
def test_bench_runs_on_sqlite(tmp_path: Path) -> None:
    report = _run_bench(tmp_path, "--backend", "sqlite")
    _check_report(report, "sqlite")
    assert report["settings"]["sqlite_synchronous"] == "FULL"


@pytest.mark.postgres
@pytest.mark.timeout(480)
def test_bench_runs_on_postgres(tmp_path: Path) -> None:
    url = postgres.require_postgres()
    report = _run_bench(tmp_path, "--backend", "postgres", "--postgres-url", url)
    _check_report(report, "postgres")


def test_protections_on_by_default_with_cpu_per_call_and_goals(tmp_path: Path) -> None:
    """The default server runs with protections (the driver checks it refuses a
    call without a token; the harness checks metrics answer and the log holds
    JSON access lines), and the report carries CPU per call, the projection and
    every goal."""
    report = _run_bench(
        tmp_path, "--backend", "sqlite", "--workloads", "append,start_terminal,turn"
    )
    assert report["settings"]["protections"] == "on"
    append = {r["in_flight"]: r for r in report["results"] if r["workload"] == "append"}
    assert append[2]["server_cpu_ms_per_op"] > 0 and append[2]["db_cpu_ms_per_op"] is None
    assert {g["goal"] for g in report["goals"]} == {
        "coalescing",
        *(str(number) for number in range(1, 8)),
        "pages",
        "watchers",
        "projection",
    }
    assert "protections_cost" not in report


@pytest.mark.postgres
def test_postgres_reports_the_database_cpu(tmp_path: Path) -> None:
    url = postgres.require_postgres()
    report = _run_bench(
        tmp_path,
        "--backend",
        "postgres",
        "--postgres-url",
        url,
        "--workloads",
        "append",
        "--concurrency",
        "16",
        "--duration",
        "0.3",
    )
    (append,) = [r for r in report["results"] if r["workload"] == "append"]
    assert append["db_cpu_ms_per_op"] > 0 and append["server_cpu_ms_per_op"] > 0
    assert {(r["replicas"], r["db_cores"]) for r in report["projection"]} >= {(1, 2), (8, 16)}


def test_protections_both_pairs_alternating_servers(tmp_path: Path) -> None:
    """``--protections both``: the main plan with protections on, then the
    paired cost on appends at 16 in flight, each pair's servers in turn."""
    completed, report = _bench(
        tmp_path,
        "--backend",
        "sqlite",
        "--workloads",
        "append",
        "--protections",
        "both",
        "--pairs",
        "3",
        "--tls",
    )
    paired = [line for line in completed.stdout.splitlines() if "16 in flight, protections" in line]
    assert [line.rsplit("protections ", 1)[1].split(":")[0] for line in paired] == [
        "on",
        "off",
        "off",
        "on",
        "on",
        "off",
    ]
    (cost,) = report["protections_cost"]
    assert cost["pairs"] == 3 and cost["on_ops_per_s"] > 0 and cost["off_ops_per_s"] > 0
    assert cost["on_vs_off_min"] <= cost["on_vs_off"] <= cost["on_vs_off_max"]
    assert "Protections' cost on appends" in completed.stdout
    (goal,) = [g for g in report["goals"] if "protections" in g["what"]]
    assert goal["measured"] == cost["cost"] and goal["met"] is False  # fewer than 10 pairs
    assert report["settings"]["tls"] is True


def test_the_benchmark_page_is_regenerated_from_a_results_file(tmp_path: Path) -> None:
    """``--readme`` on a copy of docs/benchmarks.md: only the generated part changes."""
    report = _run_bench(tmp_path, "--backend", "sqlite", "--workloads", "append")
    results = tmp_path / "report.json"
    copy = tmp_path / "benchmarks.md"
    copy.write_text(readme.PAGE.read_text())
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--readme", str(results), "--readme-file", str(copy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    text = copy.read_text()
    generated = text.split(readme.BEGIN)[1].split(readme.END)[0]
    assert f"commit {report['commit']}" in generated
    assert "| sqlite | append | 2 |" in generated and "Goals (16 in flight)" in generated
    original = readme.PAGE.read_text()
    assert text.split(readme.BEGIN)[0] == original.split(readme.BEGIN)[0]
    assert text.split(readme.END)[1] == original.split(readme.END)[1]


def _check_peers(report: dict, backend: str, expected: tuple[str, ...]) -> None:
    peer_rows = {
        (r["workload"], r["in_flight"]): r
        for r in report["results"]
        if r["workload"].startswith("peer:")
    }
    assert set(peer_rows) == {(name, n) for name in expected for n in (1, 2)}
    for row in peer_rows.values():
        assert row["backend"] == backend
        assert row["ops_per_s"] > 0 and row["ratio_to_ceiling"] > 0


def test_bench_measures_the_sqlite_peers_side_by_side(tmp_path: Path) -> None:
    needs.module("agents", "the bench peers (pip install --group peers)")
    needs.module("langgraph.checkpoint.sqlite", "the bench peers (pip install --group peers)")
    report = _run_bench(tmp_path, "--backend", "sqlite", "--workloads", "append", "--peers")
    _check_peers(
        report,
        "sqlite",
        (
            "peer:openai-agents-sqlitesession",
            "peer:openai-agents-sqlitesession (4 items)",
            "peer:langgraph-sqlitesaver",
        ),
    )
    (batch,) = [
        r
        for r in report["results"]
        if r["workload"] == "peer:openai-agents-sqlitesession (4 items)" and r["in_flight"] == 2
    ]
    assert batch["ops_per_s"] > 0


def test_bench_measures_the_postgres_peer_side_by_side(tmp_path: Path) -> None:
    # Not marked `postgres`: the peers are an optional group (`make bench ARGS=--peers`),
    # and a skip for their absence must not count as a skipped PostgreSQL test where CI
    # makes PostgreSQL mandatory; require_postgres() still fails there without a URL.
    needs.module("langgraph.checkpoint.postgres", "the bench peers (pip install --group peers)")
    url = postgres.require_postgres()
    report = _run_bench(
        tmp_path,
        "--backend",
        "postgres",
        "--postgres-url",
        url,
        "--workloads",
        "append",
        "--peers",
    )
    _check_peers(report, "postgres", ("peer:langgraph-asyncpostgressaver",))


def test_bench_runs_the_batch_workload(tmp_path: Path) -> None:
    output = tmp_path / "batch.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--backend",
            "sqlite",
            "--workloads",
            "append_batch",
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--repeat",
            "1",
            "--concurrency",
            "2",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    rows = {r["workload"]: r for r in json.loads(output.read_text())["results"]}
    assert set(rows) == {"ceiling", "append_batch"}
    assert rows["append_batch"]["ops_per_s"] > 0
