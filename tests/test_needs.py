"""The suite's policy for what a test needs beyond the venv (tests/needs.py),
checked on a pytest run of its own over a tiny test file: under
RUNSTORE_REQUIRE_TOOLS (as .ci/run sets it) a missing package fails naming it;
a skip the machine forces is listed before pytest's closing line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TINY = """
from tests import needs


@needs.unless("widget", "no widget on the PATH")
def test_fixable_mark() -> None:
    pass


@needs.unless("/dev/widget", "no /dev/widget here", fixable=False)
def test_forced() -> None:
    pass


@needs.unless("widget", None)
def test_present() -> None:
    pass


def test_fixable_inside() -> None:
    needs.module("no_such_module_anywhere", "the gizmo group")
"""


def _run(tmp_path: Path, *, required: bool) -> tuple[int, str]:
    test_file = tmp_path / "test_tiny.py"
    test_file.write_text(TINY)
    env = {**os.environ, "RUNSTORE_REQUIRE_TOOLS": "1" if required else ""}
    env.pop("RUNSTORE_REQUIRE_POSTGRES", None)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")),
            *("--rootdir", str(ROOT), "-p", "tests.conftest", "-p", "no:cacheprovider"),
            *("-q", str(test_file)),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout


def _forced_section(out: str) -> list[str]:
    """The lines listing forced skips, each checked to come before the closing line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "the machine cannot run them" in line)
    closing = max(i for i, line in enumerate(lines) if " in " in line and "passed" in line)
    assert start < closing, out
    return [line for line in lines[start + 1 : closing] if "::" in line]


def test_under_ci_a_missing_package_fails_the_run_naming_it(tmp_path: Path) -> None:
    code, out = _run(tmp_path, required=True)
    assert code == pytest.ExitCode.TESTS_FAILED, out
    lines = out.splitlines()
    assert any(line.startswith("ERROR") and "test_fixable_mark" in line for line in lines), out
    assert any(line.startswith("FAILED") and "test_fixable_inside" in line for line in lines), out
    assert "RUNSTORE_REQUIRE_TOOLS: widget is missing (no widget on the PATH)" in out, out
    assert "RUNSTORE_REQUIRE_TOOLS: the gizmo group is missing" in out, out
    assert "1 failed, 1 passed, 1 skipped, 1 error" in out, out
    (forced,) = _forced_section(out)
    assert "test_forced" in forced and "/dev/widget: no /dev/widget here" in forced, out


def test_elsewhere_missing_packages_skip_and_forced_skips_are_listed(tmp_path: Path) -> None:
    code, out = _run(tmp_path, required=False)
    assert code == pytest.ExitCode.OK, out
    assert "1 passed, 3 skipped" in out, out
    (forced,) = _forced_section(out)
    assert "test_forced" in forced, out


def test_no_test_skips_on_a_missing_python_package_by_itself() -> None:
    """A Python package a test imports is the venv's to provide: ``needs``
    (``unless``, ``module``) turns its absence into a failure under CI, where
    ``pytest.importorskip`` would skip it silently."""
    here = Path(__file__).resolve()
    calls = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != here
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "importorskip(" in line
    ]
    assert calls == [], "use tests/needs.py instead: " + ", ".join(calls)
