"""``pip install "./client[cli]"`` alone, in a fresh virtualenv: the operator's
``runstore`` works there without any of the server's dependencies.

Slow (about a minute: a virtualenv, a wheel build, and the dependencies from
pip's cache or the index), so it is marked ``slow``; the whole suite runs it.
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest

from runstore.server.auth.principals import load_principals

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(*command: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=600,
        check=check,
        env={**environment, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        cwd="/",  # not the repository: nothing of it may be imported by accident
    )


@pytest.fixture(scope="module")
def client_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a virtualenv holding runstore-client[cli] and its dependencies only."""
    home = tmp_path_factory.mktemp("client-only") / "venv"
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", f"{ROOT / 'client'}[cli]")
    return home / "bin"


def test_the_operator_commands_run_without_the_server(client_only: Path) -> None:
    python = client_only / "python"
    listed = _run(python, "-m", "pip", "list", "--format=freeze")
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "runstore-client" in installed
    assert not installed & {"runstore-server", "sqlalchemy", "asyncpg", "alembic", "aiosqlite"}

    help_ = _run(client_only / "runstore", "sessions", "list", "--help")
    assert "sessions by creation time" in help_.stdout and "--target" in help_.stdout
    for command in ("runs", "records", "export", "health", "auth", "namespaces"):
        assert _run(client_only / "runstore", command, "--help").returncode == 0

    for module in ("sqlalchemy", "runstore.server"):
        imported = _run(python, "-c", f"import {module}", check=False)
        assert imported.returncode == 1 and "ModuleNotFoundError" in imported.stderr

    serve = _run(client_only / "runstore", "serve", "--help")
    assert 'pip install "runstore-server"' in " ".join(serve.stdout.split())
    refused = _run(client_only / "runstore", "serve", "--listen", "127.0.0.1:0", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr == (
        "runstore: 'serve' comes with runstore-server, which is not installed: "
        'pip install "runstore-server"\n'
    )


def test_auth_writes_an_auth_file_the_server_accepts_without_the_server(
    client_only: Path, tmp_path: Path
) -> None:
    path = tmp_path / "auth.toml"
    added = _run(
        client_only / "runstore",
        "auth",
        "add-token",
        "--auth-file",
        path,
        "--name",
        "ops",
        "--role",
        "admin",
    )
    token = added.stdout.strip()
    assert token and path.stat().st_mode & 0o777 == 0o600
    # Read back by the server's own loader (this test process has it).
    found = load_principals(path).by_token(token)
    assert found is not None and (found.name, found.role) == ("ops", "admin")


def test_without_the_extra_the_script_says_what_to_install(client_only: Path) -> None:
    """The script comes with the base distribution (an extra cannot gate it):
    without the extra's packages it explains instead of a traceback."""
    python = client_only / "python"
    _run(python, "-m", "pip", "uninstall", "--quiet", "--yes", "rich")
    try:
        missing = _run(client_only / "runstore", "sessions", "list", check=False)
        assert missing.returncode == 1 and "Traceback" not in missing.stderr
        assert missing.stderr == (
            "runstore: the operator commands need runstore-client's cli extra "
            '(missing: rich): pip install "runstore-client[cli]"\n'
        )
    finally:
        _run(python, "-m", "pip", "install", "--quiet", "--no-deps", "rich>=13.7")
