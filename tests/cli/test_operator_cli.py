"""What an operator's shell sees from the client commands (docs/cli.md): the
real ``runstore`` program as a process, against real servers. Each mistake is
one line on stderr and an exit code, never a traceback: tokens from files and
variables, ``--target``, ``--timeout``, TLS files and variables, TLS mistakes
with a hint, and a reader that closes the pipe early."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from runstore.server.config import ServerConfig
from runstore.v1 import runtime_store_pb2 as rs
from tests.certs import Authority
from tests.cli.test_admin_cli import create, started
from tests.secured import Entry, running_server, write_auth_file
from tests.support import Store, unique

CLOSED_PIPE_EXIT = 141
ENTRIES = {"ops": Entry("admin", certificates=("ops",))}


@dataclass
class Finished:
    code: int
    out: str
    err: str

    def one_line_error(self) -> str:
        """The single line on stderr (asserting there is one, and no traceback)."""
        assert "Traceback" not in self.err, self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTORE_")}
    return {**clean, **extra}


async def shell(*argv: str, env: Mapping[str, str] | None = None) -> Finished:
    """``runstore ARGV`` as its own process, with ``env`` added to a clean environment."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.cli",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_environment(env or {}),
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())


@dataclass
class Servers:
    directory: Path
    ca: Authority
    with_tokens: str
    """Plaintext, with the auth file (tokens only)."""
    tls: str
    mtls: str

    def file(self, name: str, text: str | bytes) -> str:
        path = self.directory / name
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return str(path)


@pytest.fixture(scope="module")
async def servers(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Servers]:
    directory = tmp_path_factory.mktemp("operator-cli")
    ca = Authority()
    cert, key = ca.server().write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    auth_file = str(write_auth_file(directory / "auth.toml", ENTRIES))

    def config(tls: bool = False, mutual: bool = False) -> ServerConfig:
        return ServerConfig(
            listen="127.0.0.1:0",
            database_url=database_url,
            tls_cert=str(cert) if tls else "",
            tls_key=str(key) if tls else "",
            tls_client_ca=str(directory / "ca.crt") if mutual else "",
            auth_file=auth_file,
        )

    async with (
        running_server(config()) as plaintext,
        running_server(config(tls=True)) as tls,
        running_server(config(tls=True, mutual=True)) as mtls,
    ):
        yield Servers(
            directory,
            ca,
            f"127.0.0.1:{plaintext.port}",
            f"127.0.0.1:{tls.port}",
            f"127.0.0.1:{mtls.port}",
        )


# --- tokens -----------------------------------------------------------------------


async def test_tokens_from_files_and_the_environment_are_stripped(servers: Servers) -> None:
    token = ENTRIES["ops"].token
    target = ["--target", servers.with_tokens]
    from_file = servers.file("ops.token", f"{token}\n")
    by_file = await shell("sessions", "list", *target, "--token-file", from_file)
    assert by_file.code == 0, by_file.err
    by_variable = await shell("sessions", "list", *target, env={"RUNSTORE_TOKEN": f" {token}\n"})
    assert by_variable.code == 0, by_variable.err
    assert by_variable.err == ""


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("empty-file", "token file"),
        ("variable-newline-only", "RUNSTORE_TOKEN is empty"),
        ("variable-control-character", "RUNSTORE_TOKEN has a control or non-ASCII character"),
        ("flag-blank", "--token is empty"),
    ],
)
async def test_an_unusable_token_is_exit_2_before_any_call(
    servers: Servers, how: str, says: str
) -> None:
    argv = ["sessions", "list", "--target", servers.with_tokens]
    env: dict[str, str] = {}
    if how == "empty-file":
        argv += ["--token-file", servers.file("empty.token", "\n")]
    elif how == "variable-newline-only":
        env["RUNSTORE_TOKEN"] = "\n"
    elif how == "variable-control-character":
        env["RUNSTORE_TOKEN"] = ENTRIES["ops"].token[:5] + "\x1b" + ENTRIES["ops"].token[5:]
    else:
        argv += ["--token", "  "]
    refused = await shell(*argv, env=env)
    assert refused.code == 2, refused
    line = refused.err.splitlines()[-1]  # after --token's warning, if any
    assert line.startswith("runstore: ") and says in line, refused.err
    assert "Traceback" not in refused.err and "UNAUTHENTICATED" not in refused.err


# --- target, timeout and TLS files --------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--target", "127.0.0.1:99999"], "the port must be 1-65535, not '99999'"),
        (["--target", "127.0.0.1:0"], "the port must be 1-65535"),
        (["--target", "localhost"], "--target must be HOST:PORT"),
        (["--target", "::1:50051"], "IPv6 host in brackets"),
        (["--timeout", "-1"], "--timeout must not be negative"),
        (["--timeout", "0"], "--timeout must be more than zero"),
        (["--timeout", "soon"], "--timeout must be a number of seconds"),
        (["--tls-ca", "/nonexistent/ca.pem"], "cannot read --tls-ca /nonexistent/ca.pem"),
        (["--tls-ca", "NOT-PEM"], "is not a PEM file"),
        (["--tls-cert", "NOT-PEM"], "--tls-cert and --tls-key go together"),
    ],
)
async def test_bad_connection_options_are_exit_2_with_one_line(
    servers: Servers, flags: list[str], says: str
) -> None:
    not_pem = servers.file("not.pem", "hello\n")
    flags = [not_pem if flag == "NOT-PEM" else flag for flag in flags]
    result = await shell("sessions", "list", *flags)
    assert result.code == 2, result
    assert says in result.one_line_error()


async def test_tls_files_come_from_the_environment_and_durations_are_accepted(
    servers: Servers,
) -> None:
    ca = str(servers.directory / "ca.crt")
    cert, key = servers.ca.client("ops").write(servers.directory, "ops-client")
    env = {"RUNSTORE_TLS_CA": ca, "RUNSTORE_TLS_CERT": str(cert), "RUNSTORE_TLS_KEY": str(key)}
    mtls = await shell("sessions", "list", "--target", servers.mtls, "--timeout", "5s", env=env)
    assert mtls.code == 0, mtls.err
    bad = await shell(
        "health", "--target", servers.tls, env={"RUNSTORE_TLS_CA": servers.file("x.pem", "x")}
    )
    assert bad.code == 2 and "--tls-ca" in bad.one_line_error()
    health = await shell("health", "--target", servers.tls, "--timeout", "1500ms", "--tls-ca", ca)
    assert (health.code, health.out.strip()) == (0, "SERVING")


# --- TLS mistakes ---------------------------------------------------------------------


async def test_tls_mistakes_print_the_hint_in_one_line(servers: Servers) -> None:
    ca = str(servers.directory / "ca.crt")
    stranger = Authority("another CA")
    token = ["--token-file", servers.file("ops.token", ENTRIES["ops"].token)]
    cases = [
        ([servers.tls], "the server expects TLS: pass --tls-ca"),
        ([servers.mtls], "the server expects TLS: pass --tls-ca"),
        ([servers.mtls, "--tls-ca", ca], "the server requires a client certificate"),
        (
            [servers.tls, "--tls-ca", servers.file("stranger.pem", stranger.pem)],
            "the server's certificate is not trusted by the CA you gave",
        ),
        ([servers.with_tokens, "--tls-ca", ca], "the server does not speak TLS"),
    ]
    for (target, *flags), says in cases:
        failed = await shell("sessions", "list", "--target", target, *flags, *token)
        assert failed.code == 1, failed
        assert failed.one_line_error().startswith(f"runstore: {says}"), failed.err
        health = await shell("health", "--target", target, *flags)
        assert health.code == 1 and says in health.one_line_error()


async def test_a_wrong_server_name_gets_its_hint_in_one_line(
    database_url: str, tmp_path: Path
) -> None:
    """The server's certificate names other.example (and 127.0.0.1); the
    command connects to localhost: the hint, not gRPC's raw text."""
    ca = Authority()
    cert, key = ca.server("other.example").write(tmp_path, "server")
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    config = ServerConfig(
        listen="127.0.0.1:0", database_url=database_url, tls_cert=str(cert), tls_key=str(key)
    )
    async with running_server(config) as server:
        target = f"localhost:{server.port}"
        for argv in (["sessions", "list"], ["health"]):
            failed = await shell(*argv, "--target", target, "--tls-ca", str(tmp_path / "ca.crt"))
            assert failed.code == 1, failed
            assert failed.one_line_error().startswith(
                "runstore: the server's certificate is not for the name you connected to: "
                "connect by a name the server's certificate holds"
            ), failed.err


async def test_a_tls_key_that_is_not_the_certificates_is_named_before_any_call(
    servers: Servers,
) -> None:
    cert, _ = servers.ca.client("ops").write(servers.directory, "ops-pair")
    _, other_key = servers.ca.client("someone").write(servers.directory, "someone-pair")
    for target in (servers.mtls, "127.0.0.1:1"):  # a server, and nothing listening
        failed = await shell(
            "sessions", "list", "--target", target, "--tls-ca", str(servers.directory / "ca.crt"),
            "--tls-cert", str(cert), "--tls-key", str(other_key),
        )  # fmt: skip
        assert failed.code == 2, failed
        assert failed.one_line_error() == (
            f"runstore: --tls-key {other_key} is not the private key of --tls-cert {cert}"
        )
    swapped = await shell(
        "health", "--target", servers.mtls, "--tls-cert", str(other_key), "--tls-key", str(cert)
    )
    assert swapped.code == 2 and "do not load as a certificate" in swapped.one_line_error()


# --- closed pipes -------------------------------------------------------------------


def _first_line_then_close(argv: list[str]) -> tuple[int, str, str]:
    """Runs ``runstore ARGV | head -1`` with a real pipe: the reader takes one
    line and closes its end while the command still has much to write."""
    with subprocess.Popen(
        [sys.executable, "-m", "runstore.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment({}),
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline().decode()
        process.stdout.close()
        err = process.stderr.read().decode()
        return process.wait(timeout=60), first, err


async def test_a_closed_pipe_ends_the_command_quietly(store: Store) -> None:
    session_id = unique("pipe")
    await create(store, session_id, 1_700_000_000)
    run = await started(store, session_id=session_id, agent_id="piped")
    filler = json.dumps({"text": "x" * 1000}, separators=(",", ":")).encode()
    for batch in range(10):  # 1001 records: far more than a pipe holds
        await store.runtime.AppendRunRecords(
            rs.AppendRunRecordsRequest(
                records=[run.record(f"k{batch}-{i}", payload=filler) for i in range(100)]
            )
        )
    target = ["--target", store.target]
    for argv in (
        ["export", "--session", session_id],
        ["records", "list", "--session", session_id, "--all"],
        ["records", "list", "--session", session_id, "--all", "--json"],
    ):
        code, first, err = await asyncio.to_thread(_first_line_then_close, [*argv, *target])
        assert first, err
        assert code in (0, CLOSED_PIPE_EXIT), (argv, code, err)
        assert err == "", (argv, err)
