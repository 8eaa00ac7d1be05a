"""The generated figures of docs/benchmarks.md (bench/readme.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import readme

ROOT = Path(__file__).resolve().parents[2]


def test_only_the_part_between_the_markers_is_replaced() -> None:
    text = f"intro\n{readme.BEGIN}\nold figures\n{readme.END}\noutro\n"
    replaced = readme.replace(text, "new figures\n")
    assert replaced == f"intro\n{readme.BEGIN}\nnew figures\n{readme.END}\noutro\n"
    assert readme.replace(replaced, "new figures") == replaced


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all",
        f"{readme.BEGIN}\n{readme.BEGIN}\n{readme.END}",
        f"{readme.END}\n{readme.BEGIN}\n",
    ],
)
def test_missing_or_misplaced_markers_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        readme.replace(text, "figures")


def test_the_body_names_the_command_and_the_commit() -> None:
    report = {
        "command": "python -m bench --peers",
        "commit": "abc1234",
        "started": "2026-12-01T14:00:00+00:00",
        "machine": {"cpus": 2, "platform": "Linux"},
    }
    body = readme.body(report, ["| table |"])
    assert "`python -m bench --peers`" in body and "abc1234" in body
    assert body.endswith("| table |")


def test_the_benchmark_page_has_the_markers() -> None:
    assert readme.PAGE == ROOT / "docs" / "benchmarks.md"
    text = readme.PAGE.read_text()
    assert text.count(readme.BEGIN) == 1 and text.count(readme.END) == 1


def test_the_readme_has_no_figures_of_its_own() -> None:
    """The figures live on one page; the README links it."""
    text = (ROOT / "README.md").read_text()
    assert readme.BEGIN not in text and readme.END not in text
    assert "](docs/benchmarks.md)" in text
