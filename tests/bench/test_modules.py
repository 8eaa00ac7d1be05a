"""How other benchmark modules plug into the harness (bench/harness.py)."""

from __future__ import annotations

from bench import harness


def test_a_modules_section_is_merged_into_the_report() -> None:
    report = {"results": [{"workload": "append"}], "commit": "abc"}
    harness._merge(report, {"results": [{"workload": "peer:x"}], "retention": {"rows": 3}})
    assert [r["workload"] for r in report["results"]] == ["append", "peer:x"]
    assert report["retention"] == {"rows": 3} and report["commit"] == "abc"


def test_only_modules_that_exist_and_define_the_hook_are_used() -> None:
    # bench.cpu exists but has no measure_server; bench.nothing does not exist.
    assert harness._modules(("bench.nothing", "bench.cpu"), "measure_server") == []
    (found,) = harness._modules(("bench.nothing", "bench.cpu"), "project")
    assert found.__name__ == "bench.cpu"
