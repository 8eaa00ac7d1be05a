"""Start-up refusals in one line (docs/errors.md#start-up-failures): a second
``serve`` on one SQLite file (while ``backup`` and ``migrate`` still run
beside the first), and a ``--tls-key`` that is not the key of ``--tls-cert``."""

from __future__ import annotations

from pathlib import Path

from runstore.server.db import migrate
from tests.certs import Authority
from tests.processes import run_module, server_process


def _one_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


async def test_a_second_server_on_one_sqlite_file_is_refused_not_backup_or_migrate(
    tmp_path: Path,
) -> None:
    database = tmp_path / "runstore.db"
    url = f"sqlite:///{database}"
    async with server_process("--database-url", url) as first:
        lock = tmp_path / "runstore.db.lock"
        assert lock.read_text() == f"{first.process.pid}\n"
        code, _, stderr = await run_module(
            "runstore.server", "serve", "--listen", "127.0.0.1:0", "--database-url", url
        )
        assert code == 2
        assert _one_line(stderr) == (
            f"runstore: another runstore serve (pid {first.process.pid}) serves {database} "
            f"(it holds {lock}): one server per SQLite file; more need PostgreSQL"
        )
        # Only serve takes the lock: an online backup and a migrate run beside it.
        code, stdout, stderr = await run_module(
            "runstore.server", "backup", "--database-url", url, "--to", str(tmp_path / "copy.db")
        )
        assert code == 0, stderr
        assert b"backed up to" in stdout
        code, stdout, stderr = await run_module("runstore.server", "migrate", "--database-url", url)
        assert code == 0, stderr
        assert f"schema already at {migrate.head_revision()}".encode() in stdout
        assert first.process.returncode is None
    # Gone with its server (killed, even): the next one serves.
    async with server_process("--database-url", url) as second:
        assert lock.read_text() == f"{second.process.pid}\n"


async def test_a_tls_key_of_another_certificate_is_named_at_start(tmp_path: Path) -> None:
    authority = Authority()
    cert, _ = authority.server().write(tmp_path, "server")
    _, other_key = authority.server().write(tmp_path, "other")
    code, _, stderr = await run_module(
        "runstore.server",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        f"sqlite:///{tmp_path / 'runstore.db'}",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(other_key),
    )
    assert code == 2
    line = _one_line(stderr)
    assert line.startswith(
        f"runstore: the TLS key {other_key} does not match the certificate {cert}"
    ), line
    assert not (tmp_path / "runstore.db").exists()  # refused before the database
