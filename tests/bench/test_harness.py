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

from tests import postgres

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
        timeout=120,
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
    for row in report["results"]:
        assert row["backend"] == backend
        assert row["ops_per_s"] > 0
        assert row["ratio_to_ceiling"] > 0
    # Retention: every seeded session and run was purged (the module checks the counts).
    [retained] = report["retention"]
    assert (retained["backend"], retained["items"]) == (backend, 20)
    assert retained["sessions_per_second"] > 0 and retained["sessionless_runs_per_second"] > 0


def test_bench_runs_on_sqlite(tmp_path: Path) -> None:
    report = _run_bench(tmp_path, "--backend", "sqlite")
    _check_report(report, "sqlite")
    assert report["settings"]["sqlite_synchronous"] == "FULL"


@pytest.mark.postgres
def test_bench_runs_on_postgres(tmp_path: Path) -> None:
    url = postgres.require_postgres()
    report = _run_bench(tmp_path, "--backend", "postgres", "--postgres-url", url)
    _check_report(report, "postgres")


def test_bench_compares_the_interceptor_chain_off_and_on(tmp_path: Path) -> None:
    """``--chain both``: each figure as it is measured, then both side by side."""
    completed, report = _bench(
        tmp_path, "--backend", "sqlite", "--workloads", "append", "--chain", "both", "--repeat", "2"
    )
    progress = [line for line in completed.stdout.splitlines() if line.startswith("[")]
    # 2 repetitions × 2 chains × (ceiling, append) × 2 concurrencies, one line each.
    assert len(progress) == 16
    assert sum("chain on" in line for line in progress) == 8
    assert "Interceptor chain off (the defaults) vs on (metrics + JSON logs" in completed.stdout
    cost = {(row["workload"], row["in_flight"]): row for row in report["chain_cost"]}
    assert set(cost) == {("append", 1), ("append", 2)}
    for row in cost.values():
        assert row["off_ops_per_s"] > 0 and row["on_ops_per_s"] > 0
        assert row["on_vs_off"] == pytest.approx(
            row["on_ops_per_s"] / row["off_ops_per_s"], rel=0.01
        )
    chains = {(r["workload"], r["chain"]) for r in report["results"]}
    assert chains == {(w, c) for w in ("ceiling", "append") for c in ("off", "on")}
    assert {r["repetitions"] for r in report["results"]} == {2}


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
