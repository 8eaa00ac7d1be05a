"""``pip install`` of this checkout's wheels over an installed 0.1.0, in a fresh
virtualenv: one version of each distribution afterwards, the new one, and the
``runstore`` program with every command, serving and announcing its version.

Slow (a virtualenv, four wheel builds, the dependencies from pip's cache or the
index), so it is marked ``slow``; the whole suite, and so CI, runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import venv
from pathlib import Path

import pytest

from runstore.client import version as client_version
from runstore.server import version as server_version
from tests.deploy.conftest import run

pytestmark = pytest.mark.slow

NEW = {
    "runstore-client": client_version.__version__,
    "runstore-server": server_version.__version__,
}
OLD = {"runstore-client": "0.1.0", "runstore-server": "0.1.0"}
SERVING = re.compile(r"serving on \S+ \(port (\d+)\)")


def installed(python: Path) -> dict[str, list[str]]:
    """Each runstore distribution pip lists, with every version it lists."""
    listed = json.loads(run(python, "-m", "pip", "list", "--format=json").stdout)
    found: dict[str, list[str]] = {}
    for entry in listed:
        if entry["name"].lower() in NEW:
            found.setdefault(entry["name"].lower(), []).append(entry["version"])
    return found


def metadata_directories(home: Path) -> list[str]:
    """The runstore distributions' metadata directories in site-packages."""
    return sorted(path.name for path in home.glob("lib/python3*/site-packages/runstore_*-info"))


def program_version(bin_: Path) -> str:
    return run(bin_ / "runstore", "--version").stdout.strip()


@pytest.fixture(scope="module")
def upgraded(
    tmp_path_factory: pytest.TempPathFactory,
    released_wheels: dict[str, Path],
    current_wheels: dict[str, Path],
) -> Path:
    """A virtualenv that had 0.1.0 installed from its wheels, then this checkout's
    wheels installed over it with ``pip install --upgrade``; its home."""
    home = tmp_path_factory.mktemp("upgrade") / "venv"
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", *released_wheels.values())
    assert installed(python) == {name: [version] for name, version in OLD.items()}
    assert program_version(home / "bin") == (
        "runstore (runstore-client 0.1.0, runstore-server 0.1.0)"
    )
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", *current_wheels.values())
    return home


def test_pip_keeps_exactly_one_version_of_each_the_new_one(upgraded: Path) -> None:
    python = upgraded / "bin" / "python"
    assert installed(python) == {name: [version] for name, version in NEW.items()}
    assert metadata_directories(upgraded) == [
        f"{name.replace('-', '_')}-{version}.dist-info" for name, version in NEW.items()
    ]
    run(python, "-m", "pip", "check")  # every requirement met, the client pin included


def test_the_program_names_the_new_versions_and_has_every_command(upgraded: Path) -> None:
    bin_ = upgraded / "bin"
    assert program_version(bin_) == (
        f"runstore (runstore-client {NEW['runstore-client']}, "
        f"runstore-server {NEW['runstore-server']})"
    )
    serve = run(bin_ / "runstore", "serve", "--help")
    assert "--database-url" in serve.stdout and "--listen" in serve.stdout
    health = run(bin_ / "runstore", "health", "--help")
    assert "--target" in health.stdout and "--service" in health.stdout


def test_the_upgraded_server_serves_and_announces_its_version(
    upgraded: Path, tmp_path: Path
) -> None:
    bin_ = upgraded / "bin"
    with subprocess.Popen(
        [bin_ / "runstore", "serve", "--listen", "127.0.0.1:0", "--migrate",
         "--database-url", f"sqlite:///{tmp_path / 'runstore.db'}"],
        stderr=subprocess.PIPE, text=True, cwd="/",
    ) as server:  # fmt: skip
        try:
            assert server.stderr is not None
            log: list[str] = []
            while (serving := SERVING.search(line := server.stderr.readline())) is None:
                assert line, "the server exited before serving:\n" + "".join(log)
                log.append(line)
            target = f"127.0.0.1:{serving.group(1)}"
            health = run(bin_ / "runstore", "health", "--json", "--target", target)
            assert json.loads(health.stdout) == {
                "service": "",
                "status": "SERVING",
                "server_version": NEW["runstore-server"],
            }
        finally:
            server.kill()
