"""Every start-up failure of ``serve``, ``migrate`` and ``backup`` is one line
naming what failed and the flag or variable to fix, with exit code 2, no
traceback unless ``--log-level debug``, and never the database password
(docs/errors.md#start-up-failures). Driven through the real ``runstore``
program (runstore-client's script, whose serve, migrate and backup the
server's entry points add), as an operator runs it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.postgres import fresh_database, require_postgres
from tests.processes import server_process

PASSWORD = "sekret-do-not-print"

RUNSTORE = Path(sys.executable).with_name("runstore")
"""The venv's ``runstore`` script (``make install`` installs it)."""


def runstore(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``runstore *argv`` to its end; its exit code and stderr."""
    assert RUNSTORE.is_file(), f"no runstore program at {RUNSTORE}: make install"
    done = subprocess.run(
        [str(RUNSTORE), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stderr


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("runstore: "), stderr
    return lines[0]


def with_password(url: str, **parts: Any) -> str:
    """The test server's URL changed by ``parts``, with a password (trust ignores it)."""
    return make_url(url).set(password=PASSWORD, **parts).render_as_string(hide_password=False)


@contextmanager
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bad_database_urls() -> list[tuple[str, str]]:
    base = require_postgres()
    return [
        (
            with_password(base, database="runstore_no_such_database"),
            'database "runstore_no_such_database" does not exist: create it, or fix the '
            "database name in RUNSTORE_DATABASE_URL",
        ),
        (
            with_password(base, port=refused_port()),
            "connection refused at 127.0.0.1:",
        ),
        (
            with_password(base, username="runstore_no_such_role"),
            'role "runstore_no_such_role" does not exist: create the role, or fix the user '
            "name in RUNSTORE_DATABASE_URL",
        ),
        (
            with_password(base, host="no-such-host.invalid"),
            "the host name no-such-host.invalid does not resolve: fix the host in "
            "RUNSTORE_DATABASE_URL",
        ),
    ]


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_an_unusable_database_is_one_line_naming_the_variable(command: str) -> None:
    for url, reason in bad_database_urls():
        code, stderr = runstore(command, env={"RUNSTORE_DATABASE_URL": url})
        line = one_line(stderr)
        assert code == 2, stderr
        assert line.startswith("runstore: cannot open the database postgresql://"), line
        assert reason in line
        assert PASSWORD not in stderr


def test_the_flag_is_named_when_the_url_came_from_the_flag() -> None:
    url = make_url(require_postgres()).set(database="runstore_no_such_database")
    code, stderr = runstore("migrate", "--database-url", url.render_as_string())
    assert code == 2
    assert one_line(stderr).endswith("fix the database name in --database-url")


def test_debug_shows_the_traceback_and_still_hides_the_password() -> None:
    url = with_password(require_postgres(), database="runstore_no_such_database")
    code, stderr = runstore("migrate", "--log-level", "debug", env={"RUNSTORE_DATABASE_URL": url})
    assert code == 2
    assert "Traceback" in stderr
    ours = [line for line in stderr.splitlines() if line.startswith("runstore: ")]
    assert len(ours) == 1 and ours[0].startswith("runstore: cannot open the database"), stderr
    assert PASSWORD not in stderr


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen", "--console-listen"])
def test_a_busy_port_is_one_line_naming_the_flag_before_the_database(
    flag: str, tmp_path: Path
) -> None:
    database = tmp_path / "runstore.db"
    with taken_port() as port:
        code, stderr = runstore(
            "serve", "--database-url", f"sqlite:///{database}", flag, f"127.0.0.1:{port}"
        )
    assert code == 2
    line = one_line(stderr)
    assert f"127.0.0.1:{port} ({flag}): address already in use" in line
    assert not database.exists(), "the port is checked before the database is created"


async def test_an_unmigrated_database_names_the_flag_that_was_used(tmp_path: Path) -> None:
    async with fresh_database("runstore_unmigrated") as url:
        url_file = tmp_path / "database-url"
        url_file.write_text(url + "\n")
        code, stderr = runstore("serve", "--database-url-file", str(url_file))
        assert code == 2
        line = one_line(stderr)
        assert "database schema is at nothing (empty database)" in line
        assert f"run `runstore migrate --database-url-file {url_file}` first" in line

        code, stderr = runstore("serve", "--database-url", url)
        assert code == 2
        assert "run `runstore migrate --database-url URL` first" in one_line(stderr)

        code, stderr = runstore("serve", env={"RUNSTORE_DATABASE_URL": url})
        assert code == 2
        assert "with RUNSTORE_DATABASE_URL set" in one_line(stderr)


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_sqlite_in_a_missing_directory_is_refused_and_nothing_is_created(
    command: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nonexistent-dir"
    code, stderr = runstore(command, "--database-url", f"sqlite:///{missing / 'x.db'}")
    assert code == 2
    assert one_line(stderr) == (
        f"runstore: cannot create the SQLite database {missing / 'x.db'}: its directory "
        f"{missing} does not exist (create it, or fix the path in --database-url)"
    )
    assert not missing.exists()


def test_an_unknown_interceptor_chain_is_refused_before_the_database(tmp_path: Path) -> None:
    database = tmp_path / "x.db"
    code, stderr = runstore(
        "serve",
        "--database-url",
        f"sqlite:///{database}",
        env={"RUNSTORE_INTERCEPTOR_CHAIN": "loop"},
    )
    assert code == 2
    assert one_line(stderr) == (
        "runstore: RUNSTORE_INTERCEPTOR_CHAIN='loop' is not a kind of interceptor chain "
        "(expected flat or nested)"
    )
    assert not database.exists()


async def test_a_new_sqlite_file_is_logged_and_alembic_stays_quiet(tmp_path: Path) -> None:
    database = tmp_path / "runstore.db"
    for start in ("first", "second"):
        async with server_process("--database-url", f"sqlite:///{database}") as server:
            log = server.log.decode()
        assert "alembic" not in log, log
        created = f"creating a new SQLite database file {database}" in log
        migrated = log.count("migrating schema from empty to")
        assert (created, migrated) == ((True, 1) if start == "first" else (False, 0)), log


def test_backup_failures_name_the_flag(tmp_path: Path) -> None:
    code, stderr = runstore(
        "backup", "--database-url", f"sqlite:///{tmp_path / 'none.db'}", "--to", "x"
    )
    assert code == 2
    assert one_line(stderr).endswith("fix the path in --database-url")
    code, stderr = runstore(
        "backup", "--database-url", f"postgresql://u:{PASSWORD}@h:port/db", "--to", "x"
    )
    assert code == 2
    assert "--database-url does not parse" in one_line(stderr)
    assert PASSWORD not in stderr
