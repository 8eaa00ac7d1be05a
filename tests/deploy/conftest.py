"""Wheels built once per test session: this checkout's and those of the last
0.1.0 commit, each with ``pip wheel --no-deps`` (hatchling from pip's cache or
the index), as a release builds them."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RELEASED_0_1_0 = "73d1653"
"""The last commit of 0.1.0 (there is no tag: a clone without tags has it too)."""


def run(*command: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``command`` outside the repository, with nothing of this test's
    environment (its virtualenv, its PYTHONPATH) leaking into it."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    done = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=600,
        env={**environment, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        cwd="/",  # not the repository: nothing of it may be imported by accident
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, command))} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done


def build_wheels(source: Path, out: Path) -> dict[str, Path]:
    """The two distributions of the checkout at ``source``, as wheels in ``out``."""
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", out,
        source / "client", source / "server")  # fmt: skip
    wheels: dict[str, Path] = {}
    for name in ("runstore-client", "runstore-server"):
        (wheels[name],) = out.glob(f"{name.replace('-', '_')}-*-py3-none-any.whl")
    return wheels


@pytest.fixture(scope="session")
def current_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """This checkout's wheels (its work tree, uncommitted changes included)."""
    return build_wheels(ROOT, tmp_path_factory.mktemp("wheels-current"))


@pytest.fixture(scope="session")
def released_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The 0.1.0 wheels, from commit ``RELEASED_0_1_0`` (``git archive``: no
    checkout, no change to the repository's work trees)."""
    source = tmp_path_factory.mktemp("source-0.1.0")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", RELEASED_0_1_0, "client", "server"],
        capture_output=True,
        timeout=120,
    )
    assert archive.returncode == 0, (
        f"commit {RELEASED_0_1_0} (the last 0.1.0) is not in this clone "
        f"(a shallow clone: git fetch --unshallow): {archive.stderr.decode()}"
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    return build_wheels(source, tmp_path_factory.mktemp("wheels-0.1.0"))
