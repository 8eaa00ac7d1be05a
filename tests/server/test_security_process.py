"""Security of a real ``runstore serve`` process: SIGHUP, the listen rule, secrets.

Revocation: a token removed from the auth file stops working at the next call
after SIGHUP, on a connection that stays open, while other principals carry
on; a broken file keeps the last good principals. Certificates rotate the same
way. A non-loopback address needs TLS and an auth file unless ``--insecure``.
The database password never shows in the log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc

from runstore.client import RemoteSessionAdmin, TLSConfig, records
from runstore.contract.auth_file import hash_token
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from tests.certs import Authority
from tests.pg_cluster import password_cluster, pgpass_line, private_file
from tests.processes import ServerProcess, server_process
from tests.secured import Entry, bearer, handshake_fails, refusal, write_auth_file
from tests.support import unique

LOAD_SESSION = "/runstore.v1.SessionAdmin/LoadSession"


async def _log_line(server: ServerProcess, text: str, after: int = 0) -> None:
    """Waits until the server has logged ``text`` (past byte ``after`` of its log)."""
    async with asyncio.timeout(30):
        while text.encode() not in server.log[after:]:
            if server.process.returncode is not None:
                raise AssertionError(f"server exited:\n{server.log.decode()}")
            await asyncio.sleep(0.02)


async def _sighup(server: ServerProcess, expect: str) -> None:
    mark = len(server.log)
    server.process.send_signal(signal.SIGHUP)
    await _log_line(server, expect, after=mark)


async def _load(channel: grpc.aio.Channel, token: str) -> grpc.StatusCode:
    """OK, or the code of the refusal (the session need not exist)."""
    try:
        await sa_grpc.SessionAdminStub(channel).LoadSession(
            sa.LoadSessionRequest(session_id=unique("s")), metadata=bearer(token)
        )
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_revocation_by_sighup_and_a_broken_file_keeps_the_old_principals(
    tmp_path: Path,
) -> None:
    revoked, kept = Entry("host"), Entry("host")
    auth_file = write_auth_file(tmp_path / "auth.toml", {"revoked": revoked, "kept": kept})
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with (
        server_process("--database-url", database, "--auth-file", str(auth_file)) as server,
        grpc.aio.insecure_channel(server.target) as first,
        grpc.aio.insecure_channel(server.target) as second,
    ):
        assert await _load(first, revoked.token) == grpc.StatusCode.NOT_FOUND
        assert await _load(second, kept.token) == grpc.StatusCode.NOT_FOUND

        write_auth_file(auth_file, {"kept": kept})
        await _sighup(server, "reloaded: 1 principals")
        # The same connection, the next call: refused; the other carries on.
        got = await refusal(
            sa_grpc.SessionAdminStub(first).LoadSession(
                sa.LoadSessionRequest(session_id="x"), metadata=bearer(revoked.token)
            )
        )
        assert got == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", LOAD_SESSION)
        assert await _load(second, kept.token) == grpc.StatusCode.NOT_FOUND

        auth_file.write_text('[[principal]]\nname = "kept"\nrole = "host\n')
        await _sighup(server, "auth file not reloaded, keeping 1 principals")
        assert await _load(second, kept.token) == grpc.StatusCode.NOT_FOUND
        assert await _load(first, revoked.token) == grpc.StatusCode.UNAUTHENTICATED

        # A token added with `runstore auth add-token` works after SIGHUP.
        write_auth_file(auth_file, {"kept": kept})
        token = await _add_token(auth_file, "new-worker", "worker")
        assert await _load(first, token) == grpc.StatusCode.UNAUTHENTICATED
        await _sighup(server, "reloaded: 2 principals")
        assert await _load(first, token) == grpc.StatusCode.PERMISSION_DENIED
    assert hash_token(token) in auth_file.read_text()
    assert token not in auth_file.read_text()


async def _add_token(auth_file: Path, name: str, role: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.cli",
        "auth",
        "add-token",
        "--auth-file",
        str(auth_file),
        "--name",
        name,
        "--role",
        role,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


async def test_certificates_rotate_on_sighup_without_dropping_connections(
    tmp_path: Path,
) -> None:
    old_ca, new_ca = Authority("old CA"), Authority("new CA")
    cert, key = old_ca.server().write(tmp_path, "server")
    host = Entry("host")
    auth_file = write_auth_file(tmp_path / "auth.toml", {"host": host})
    args = ("--database-url", f"sqlite:///{tmp_path / 'runstore.db'}", "--auth-file")
    async with (
        server_process(
            *args, str(auth_file), "--tls-cert", str(cert), "--tls-key", str(key)
        ) as server,
        RemoteSessionAdmin(server.target, tls=TLSConfig(ca=old_ca.pem), token=host.token) as before,
    ):
        await before.create_session(unique("before"), records.now())
        new_ca.server().write(tmp_path, "server")
        await _sighup(server, "reloaded for new connections")
        async with RemoteSessionAdmin(
            server.target, tls=TLSConfig(ca=new_ca.pem), token=host.token
        ) as after:
            await after.create_session(unique("after"), records.now())
        await handshake_fails(server.target, TLSConfig(ca=old_ca.pem), host.token)
        await before.create_session(unique("still-open"), records.now())


def _command_line(pid: int) -> bytes:
    """What every local user sees of a process's arguments."""
    return Path(f"/proc/{pid}/cmdline").read_bytes()


async def _serve_exit(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs ``runstore serve`` expecting it to exit on its own; (code, stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.cli",
        "serve",
        *args,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        env=env,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def test_a_non_loopback_address_needs_tls_and_an_auth_file(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    code, err = await _serve_exit("--listen", "0.0.0.0:0", "--database-url", database)
    assert code == 2
    assert err.count("\n") == 1, err
    for flag in ("--tls-cert", "--auth-file", "--insecure"):
        assert flag in err
    assert not (tmp_path / "runstore.db").exists()  # refused before touching the database

    ca = Authority()
    cert, key = ca.server().write(tmp_path, "server")
    code, err = await _serve_exit(
        "--listen", "0.0.0.0:0", "--database-url", database, "--tls-cert", str(cert),
        "--tls-key", str(key),
    )  # fmt: skip
    assert code == 2
    assert "--auth-file" in err and "--tls-cert" not in err


async def test_insecure_serves_a_non_loopback_address_with_a_warning(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with server_process(
        "--database-url", database, "--listen", "0.0.0.0:0", "--insecure"
    ) as server:
        assert b"WARNING" in server.log and b"--insecure" in server.log
        async with RemoteSessionAdmin(server.target) as admin:
            await admin.create_session(unique("open"), records.now())


async def test_loopback_needs_no_setup(tmp_path: Path) -> None:
    async with server_process("--database-url", f"sqlite:///{tmp_path / 'r.db'}") as server:
        assert b"--insecure" not in server.log
        assert b"authentication off" in server.log


PASSWORD = "s3cret-Pa55word"


async def test_a_password_on_the_command_line_is_warned_about_and_never_logged(
    tmp_path: Path,
) -> None:
    url = f"postgresql://runstore:{PASSWORD}@127.0.0.1:1/runstore"
    code, err = await _serve_exit("--database-url", url, "--pg-connect-timeout", "2")
    assert code != 0
    assert "visible in the process arguments" in err
    assert PASSWORD not in err


async def test_a_database_url_file_keeps_the_password_out_of_argv_and_logs(
    tmp_path: Path,
) -> None:
    url_file = tmp_path / "database-url"
    url_file.write_text(f"postgresql://runstore:{PASSWORD}@127.0.0.1:1/runstore\n")
    code, err = await _serve_exit("--database-url-file", str(url_file), "--pg-connect-timeout", "2")
    assert code != 0
    assert "visible in the process arguments" not in err
    assert PASSWORD not in err

    url_file.write_text(f"postgresql//runstore:{PASSWORD}@127.0.0.1:1/runstore\n")  # no ':'
    code, err = await _serve_exit("--database-url-file", str(url_file))
    assert code == 2 and "does not parse" in err
    assert PASSWORD not in err

    url_file.write_text(f"sqlite:///{tmp_path / 'from-file.db'}\n")
    async with server_process("--database-url-file", str(url_file)) as server:
        assert b"from-file.db" in server.log
        assert b"from-file.db" not in _command_line(server.process.pid)


async def test_pgpassword_and_pgpassfile_supply_the_password(tmp_path: Path) -> None:
    """On a cluster that demands a password, the URL carries none: PGPASSWORD
    or PGPASSFILE supplies it, and without either the server exits without
    printing any secret."""
    async with password_cluster(PASSWORD) as port:
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        clean["PGPASSFILE"] = str(tmp_path / "no-such-pgpass")
        code, err = await _serve_exit("--database-url", url, env=clean)
        assert code != 0
        assert "password" in err.lower() and PASSWORD not in err

        with_password = {**clean, "PGPASSWORD": PASSWORD}
        async with (
            server_process("--database-url", url, "--migrate", env=with_password) as s,
            RemoteSessionAdmin(s.target) as admin,
        ):
            assert PASSWORD.encode() not in s.log
            await admin.create_session(unique("pgpassword"), records.now())

        pgpass = private_file(tmp_path / "pgpass", pgpass_line(port, PASSWORD))
        with_file = {**clean, "PGPASSFILE": str(pgpass)}
        async with (
            server_process("--database-url", url, env=with_file) as s,
            RemoteSessionAdmin(s.target) as admin,
        ):
            await admin.create_session(unique("pgpassfile"), records.now())
