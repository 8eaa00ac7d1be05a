"""The admin commands against a server with mTLS and an auth file.

TLS from ``--tls-ca``, a client certificate from ``--tls-cert/--tls-key``, a
bearer token from ``--token-file`` or ``RUNSTORE_TOKEN``, and the role table
applied to the listings: readers and hosts list, workers may not, and a reader
cannot end a session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from unittest import mock

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.server.config import ServerConfig
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.certs import Authority
from tests.cli.test_admin_cli import runstore
from tests.secured import Entry, running_server, write_auth_file
from tests.support import Store, unique

ENTRIES = {
    "ops": Entry("admin", certificates=("ops.runstore.test",), with_token=False),
    "chat-host": Entry("host"),
    "dashboards": Entry("reader"),
    "worker-eu": Entry("worker"),
}


@dataclasses.dataclass
class Secured:
    store: Store
    """Stubs with the host token, for setting up state; ``target`` is the server."""
    directory: Path
    ca: Authority

    def token_file(self, name: str) -> str:
        path = self.directory / f"{name}.token"
        path.write_text(ENTRIES[name].token + "\n")
        return str(path)

    @property
    def tls(self) -> list[str]:
        return ["--tls-ca", str(self.directory / "ca.crt")]


@pytest.fixture(scope="module")
async def secured(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Secured]:
    directory = tmp_path_factory.mktemp("secured-cli")
    ca = Authority()
    cert, key = ca.server().write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        tls_cert=str(cert),
        tls_key=str(key),
        tls_client_ca=str(directory / "ca.crt"),
        auth_file=str(write_auth_file(directory / "auth.toml", ENTRIES)),
    )
    async with running_server(config) as running:
        target = f"127.0.0.1:{running.port}"
        pair = ca.client("setup")
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(ca.pem, pair.key, pair.cert),
            grpc.access_token_call_credentials(ENTRIES["chat-host"].token),
        )
        async with grpc.aio.secure_channel(target, credentials) as channel:
            yield Secured(Store(channel, target=target), directory, ca)


async def test_a_reader_token_lists_over_tls_with_a_client_certificate(secured: Secured) -> None:
    session_id = unique("secured")
    await secured.store.admin.CreateSession(
        sa.CreateSessionRequest(session_id=session_id, created_at=Timestamp(seconds=-5_000_000_000))
    )
    cert, key = secured.ca.client("anyone").write(secured.directory, "anyone")
    mtls = [*secured.tls, "--tls-cert", str(cert), "--tls-key", str(key)]
    window = ["--created-before", "1812-01-01T00:00:00Z"]
    listed = await runstore(
        secured.store,
        "sessions",
        "list",
        *window,
        *mtls,
        "--token-file",
        secured.token_file("dashboards"),
        "--json",
    )
    assert listed.code == 0, listed.err
    assert session_id in [row["id"] for row in listed.lines()]
    runs = await runstore(
        secured.store, "runs", "list", *mtls, "--token-file", secured.token_file("chat-host")
    )
    assert runs.code == 0, runs.err


async def test_without_a_valid_credential_or_the_role_the_call_fails(secured: Secured) -> None:
    cert, key = secured.ca.client("anyone").write(secured.directory, "anyone")
    mtls = [*secured.tls, "--tls-cert", str(cert), "--tls-key", str(key)]
    anonymous = await runstore(secured.store, "sessions", "list", *mtls)
    assert anonymous.code == 1 and anonymous.err.startswith("runstore: UNAUTHENTICATED:")
    worker = await runstore(
        secured.store, "runs", "list", *mtls, "--token-file", secured.token_file("worker-eu")
    )
    assert worker.code == 1 and worker.err.startswith("runstore: PERMISSION_DENIED:")
    session_id = unique("kept")
    await secured.store.admin.CreateSession(
        sa.CreateSessionRequest(session_id=session_id, created_at=Timestamp(seconds=1))
    )
    with mock.patch.dict("os.environ", {"RUNSTORE_TOKEN": ENTRIES["dashboards"].token}):
        reader_end = await runstore(secured.store, "sessions", "end", session_id, "--yes", *mtls)
        reader_show = await runstore(secured.store, "sessions", "show", session_id, *mtls)
    assert reader_end.code == 1 and reader_end.err.startswith("runstore: PERMISSION_DENIED:")
    assert reader_show.code == 0 and session_id in reader_show.out
    loaded = await secured.store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))
    assert loaded.session.status == pb.SESSION_STATUS_ACTIVE


async def test_a_client_certificate_alone_decides_the_principal(secured: Secured) -> None:
    cert, key = secured.ca.client("ops", dns="ops.runstore.test").write(secured.directory, "ops")
    result = await runstore(
        secured.store,
        "sessions",
        "list",
        *secured.tls,
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
    )
    assert result.code == 0, result.err
    no_client_cert = await runstore(secured.store, "health", *secured.tls)
    assert no_client_cert.code == 1  # mTLS: the handshake needs a client certificate
