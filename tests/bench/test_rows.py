"""The benchmark's pure logic: percentiles, pairing, row shaping (no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import harness, peers, stats, watch
from tests import needs

ROOT = Path(__file__).resolve().parents[2]


def test_percentile_is_the_floor_rank_of_the_sorted_sample() -> None:
    ordered = [float(v) for v in range(1, 201)]  # 1 … 200
    assert stats.percentile(ordered, 0.99) == 199.0  # rank int(0.99 × 200) = 198
    assert stats.percentile(ordered, 0.5) == 101.0
    assert stats.percentile([7.0], 0.99) == 7.0
    # Below 100 values p99 is the largest.
    assert stats.percentile([1.0, 2.0, 3.0], 0.99) == 3.0
    with pytest.raises(ValueError):
        stats.percentile([], 0.5)


def test_latency_ms_sorts_and_converts_seconds() -> None:
    figures = stats.latency_ms([0.003, 0.001, 0.002, 0.004])
    assert figures == {"p50_ms": pytest.approx(2.5), "p99_ms": pytest.approx(4.0)}
    assert stats.latency_ms([]) == {"p50_ms": None, "p99_ms": None}


def test_throughput_row_keeps_the_spec_and_counts_per_second() -> None:
    row = stats.throughput_row({"workload": "w", "pair": "p"}, [0.01] * 50, 2.0)
    assert row["workload"] == "w" and row["pair"] == "p"
    assert row["ops"] == 50 and row["ops_per_s"] == 25.0
    assert row["p50_ms"] == pytest.approx(10.0)


def _args(*argv: str) -> object:
    return harness.parse_args(["--duration", "1", "--warmup", "0", *argv])


def test_each_peer_measurement_has_a_ceiling_of_its_own() -> None:
    ceilings, measured = peers.plan(_args("--concurrency", "1,16"), "langgraph-sqlitesaver", 2)
    assert [c["workload"] for c in ceilings] == ["ceiling", "ceiling"]
    assert [m["workload"] for m in measured] == ["peer:langgraph-sqlitesaver"] * 2
    assert [(c["pair"], c["concurrency"]) for c in ceilings] == [
        (m["pair"], m["concurrency"]) for m in measured
    ]
    assert len({m["pair"] for m in measured}) == 2
    assert {m["repetition"] for m in measured} == {2}


def test_the_openai_peer_is_measured_with_one_item_and_with_four() -> None:
    ceilings, measured = peers.plan(_args("--concurrency", "16"), "openai-agents-sqlitesession", 0)
    assert [(m["workload"], m.get("items", 1)) for m in measured] == [
        ("peer:openai-agents-sqlitesession", 1),
        ("peer:openai-agents-sqlitesession (4 items)", 4),
    ]
    assert [c["pair"] for c in ceilings] == [m["pair"] for m in measured]
    assert len({m["pair"] for m in measured}) == 2


class _Recorder:
    """A stand-in ``bench.driver.Client`` that notes which session each run starts in."""

    def __init__(self) -> None:
        self.sessions = 0
        self.runs: list[str] = []
        self.runtime = self
        self.worker = ()

    async def session(self) -> str:
        self.sessions += 1
        return f"s{self.sessions}"

    async def start(self, session_id: str) -> object:
        from runstore.v1 import types_pb2 as pb

        self.runs.append(session_id)
        return pb.RunStart(run_id=f"r{len(self.runs)}", agent_id="a", session_id=session_id)


def test_four_runs_share_each_session_in_the_shared_session_workload() -> None:
    import asyncio

    from bench import driver

    client = _Recorder()
    shared: dict[object, object] = {}

    async def make() -> None:
        for index in range(16):
            await driver._make_op(client, "append_shared_session", {}, index, shared)

    asyncio.run(make())
    assert client.sessions == 4
    assert [client.runs.count(f"s{n}") for n in range(1, 5)] == [4, 4, 4, 4]


def test_varied_records_span_two_hundred_bytes_to_sixty_four_kibibytes() -> None:
    from bench import driver

    sizes = [len(driver._varied_payload(size)) for size in driver.VARIED_SIZES]
    assert min(sizes) == 200 and max(sizes) == 64 * 1024


def test_peer_rows_get_their_ratio_from_the_paired_ceiling() -> None:
    raw = [
        {"workload": "ceiling", "pair": "a", "concurrency": 16, "ops_per_s": 1000.0},
        {"workload": "peer:x", "pair": "a", "concurrency": 16, "ops_per_s": 500.0},
        {"workload": "ceiling", "pair": "b", "concurrency": 16, "ops_per_s": 4000.0},
        {"workload": "peer:x", "pair": "b", "concurrency": 16, "ops_per_s": 1000.0},
        {"workload": "ceiling", "pair": "c", "concurrency": 16, "ops_per_s": 2000.0},
        {"workload": "peer:x", "pair": "c", "concurrency": 16, "ops_per_s": 800.0},
    ]
    for row in raw:
        row.update(p50_ms=1.0, p99_ms=2.0)
    by_name = {r["workload"]: r for r in harness.summarise("sqlite", raw)}
    # Paired ratios 0.5, 0.25, 0.4: their median, not 800 / 2000 of the medians.
    assert by_name["peer:x"]["ratio_to_ceiling"] == 0.4
    assert by_name["peer:x"]["ops_per_s"] == 800.0


def test_idle_watchers_alternate_and_are_labelled_by_their_count() -> None:
    assert [watch.idle_order(r) for r in range(4)] == [(0, 100), (100, 0), (0, 100), (100, 0)]
    plan = watch.idle_plan(_args("--concurrency", "1,16"), 3, 100)
    assert [(m["workload"], m["concurrency"]) for m in plan] == [("ceiling", 16), ("append", 16)]
    assert plan[0]["pair"] == plan[1]["pair"] == "idle3-100"
    assert watch.idle_plan(_args("--concurrency", "1,4"), 0, 0)[1]["concurrency"] == 4
    ceiling, append = (watch.relabel(row) for row in plan)
    assert ceiling["workload"] == "ceiling"
    assert append["workload"] == "append (100 idle watchers)"
    assert watch.relabel({"workload": "append"}) == {"workload": "append"}


def _idle(repetition: int, watchers: int, ops: float) -> dict[str, object]:
    return {
        "backend": "sqlite",
        "workload": watch.idle_label(watchers),
        "idle_watchers": watchers,
        "repetition": repetition,
        "ops_per_s": ops,
    }


def test_idle_cost_is_the_median_of_ratios_paired_by_repetition() -> None:
    raw = [
        _idle(0, 0, 1000.0),
        _idle(0, 100, 900.0),  # 0.9
        _idle(1, 100, 600.0),
        _idle(1, 0, 400.0),  # 1.5
        _idle(2, 0, 2000.0),
        _idle(2, 100, 1000.0),  # 0.5
    ]
    summary = [
        {"backend": "sqlite", "workload": "append (100 idle watchers)"},
        {"backend": "sqlite", "workload": "append (0 idle watchers)"},
        {"backend": "postgres", "workload": "append (100 idle watchers)"},
    ]
    watch.annotate_idle_cost(summary, raw)
    assert summary[0]["vs_no_watchers"] == 0.9
    assert summary[0]["vs_no_watchers_range"] == [0.5, 1.5]
    assert "vs_no_watchers" not in summary[1] and "vs_no_watchers" not in summary[2]


def test_latency_rows_are_medians_per_watcher_count() -> None:
    raw = [
        {"workload": "watch_latency", "watchers": w, "records": 20, "replicas": 2, **figures}
        for w, figures in [
            (100, {"p50_ms": 5.0, "p99_ms": 9.0}),
            (1, {"p50_ms": 1.0, "p99_ms": 3.0}),
            (1, {"p50_ms": 2.0, "p99_ms": 4.0}),
            (1, {"p50_ms": 9.0, "p99_ms": 8.0}),
        ]
    ] + [{"workload": "append"}]
    one, hundred = watch.latency_rows("postgres", raw)
    assert one["workload"] == "watch latency (1 watcher)"
    assert (one["p50_ms"], one["p99_ms"], one["repetitions"]) == (2.0, 4.0, 3)
    assert hundred["workload"] == "watch latency (100 watchers)"
    assert hundred["replicas"] == 2 and hundred["ops_per_s"] is None
    table = harness.render([one], "header")
    assert "| postgres | watch latency (1 watcher) | 1 | – | 2.00 | 4.00 | – |" in table


def test_latency_rows_join_the_summary_without_a_ceiling() -> None:
    """The harness summarises the paired rows; bench.watch adds its latencies and
    annotates the idle-watcher row."""
    raw = [
        {"workload": "ceiling", "pair": "i0-0", "concurrency": 16, "ops_per_s": 2000.0},
        {**_idle(0, 0, 1000.0), "pair": "i0-0", "concurrency": 16},
        {"workload": "ceiling", "pair": "i0-100", "concurrency": 16, "ops_per_s": 2000.0},
        {**_idle(0, 100, 950.0), "pair": "i0-100", "concurrency": 16},
        {"workload": "watch_latency", "watchers": 1, "records": 20, "replicas": 1}
        | {"p50_ms": 1.0, "p99_ms": 2.0},
    ]
    for row in raw:
        row.setdefault("p50_ms", 1.0)
        row.setdefault("p99_ms", 2.0)
    summary = {r["workload"]: r for r in harness.summarise_with_modules("sqlite", raw)}
    assert summary["append (100 idle watchers)"]["vs_no_watchers"] == 0.95
    assert summary["append (100 idle watchers)"]["ratio_to_ceiling"] == 0.475
    assert summary["watch latency (1 watcher)"]["p99_ms"] == 2.0
    assert "watch_latency" not in summary


def test_the_watch_latency_plan_scales_records_with_duration() -> None:
    plan = watch.latency_plan(_args("--duration", "3"), 2)
    assert [(m["watchers"], m["repetition"]) for m in plan] == [(1, 0), (100, 0), (1, 1), (100, 1)]
    assert {m["records"] for m in plan} == {300}
    assert {m["records"] for m in watch.latency_plan(_args("--duration", "0.05"), 1)} == {20}


def test_the_default_workloads_include_the_watch_workloads() -> None:
    args = harness.parse_args([])
    assert {"watch_latency", "idle_watchers"} <= args.workloads
    assert {"append_client_go", "lone_append"} <= args.workloads
    assert args.peers is False
    assert {m.__name__ for m in harness.server_modules()} == {
        "bench.watch",
        "bench.peers",
        "bench.goclient",
    }
    assert "bench.lone" in {m.__name__ for m in harness.optional_modules()}


@pytest.mark.parametrize("peer", peers.PEERS["sqlite"])
def test_each_sqlite_peer_process_writes_one_row_per_measurement(tmp_path: Path, peer: str) -> None:
    """The peer process end to end (needs the `peers` group; not a timing test)."""
    needs.module("agents", "the bench peers (pip install --group peers)")
    needs.module("langgraph.checkpoint.sqlite", "the bench peers (pip install --group peers)")
    specs = [
        {"workload": peers.workload_name(peer), "concurrency": c, "duration": 0.05, "warmup": 0}
        for c in (1, 3)
    ]
    plan = {"peer": peer, "database": str(tmp_path / "peer.db"), "measurements": specs}
    completed = subprocess.run(
        [sys.executable, "-m", "bench.peers"],
        input=json.dumps(plan),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    rows = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [(r["workload"], r["concurrency"]) for r in rows] == [
        (s["workload"], s["concurrency"]) for s in specs
    ]
    assert all(r["ops"] > 0 and r["p50_ms"] <= r["p99_ms"] for r in rows)
