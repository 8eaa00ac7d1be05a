"""TLS and mTLS for real: certificates made by the test, the clients' ``tls=`` option.

Plaintext to a TLS port fails; under mTLS a connection without a client
certificate, or with one from another CA, fails; a good certificate's mapped
principal decides the role unless the call carries a bearer token, which then
decides alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from runstore.client import (
    NO_RETRY,
    PermissionDeniedError,
    RemoteSessionAdmin,
    RemoteStore,
    RunStart,
    TLSConfig,
    UnauthenticatedError,
    UnavailableError,
    records,
)
from runstore.server.app import RunningServer
from runstore.server.config import ServerConfig
from tests.certs import Authority, Pair
from tests.secured import Entry, handshake_fails, running_server, write_auth_file
from tests.support import unique


@dataclass
class TLSServer:
    running: RunningServer
    target: str
    ca: Authority
    directory: Path
    entries: dict[str, Entry]

    def client_tls(self, pair: Pair | None = None, ca: bytes | None = None) -> TLSConfig:
        if pair is None:
            return TLSConfig(ca=ca or self.ca.pem)
        return TLSConfig(ca=ca or self.ca.pem, cert=pair.cert, key=pair.key)


ENTRIES = {
    "ops": Entry("admin", certificates=("spiffe://runstore.test/ops",)),
    "worker-eu": Entry("worker", certificates=("worker-eu.runstore.test",), with_token=False),
    "dashboards": Entry("reader", certificates=("dashboards",)),
    "chat-host": Entry("host"),
}


@asynccontextmanager
async def _serve(database_url: str, directory: Path, mutual: bool) -> AsyncIterator[TLSServer]:
    ca = Authority()
    cert, key = ca.server().write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    auth_file = write_auth_file(directory / "auth.toml", ENTRIES)
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        tls_cert=str(cert),
        tls_key=str(key),
        tls_client_ca=str(directory / "ca.crt") if mutual else "",
        auth_file=str(auth_file),
    )
    async with running_server(config) as running:
        yield TLSServer(running, f"127.0.0.1:{running.port}", ca, directory, ENTRIES)


@pytest.fixture(scope="module", params=[False, True], ids=["tls", "mtls"])
async def tls_server(
    request: pytest.FixtureRequest, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TLSServer]:
    """TLS with tokens, and mTLS: what holds for both."""
    async with _serve(database_url, tmp_path_factory.mktemp("tls"), request.param) as server:
        yield server


@pytest.fixture(scope="module")
async def mtls_server(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TLSServer]:
    async with _serve(database_url, tmp_path_factory.mktemp("mtls"), True) as server:
        yield server


async def _start_one_shot(store: RemoteStore) -> bool:
    started = await store.start_one_shot_run(
        records.one_shot_run_start(
            RunStart(run_id=unique("run"), agent_id="a", session_id="", started_at=records.now())
        )
    )
    return started.record.inserted


def _mutual(server: TLSServer) -> bool:
    tls = server.running.security.tls
    return tls is not None and tls.mutual


async def test_plaintext_to_a_tls_port_fails(tls_server: TLSServer) -> None:
    async with RemoteSessionAdmin(
        tls_server.target, token=ENTRIES["chat-host"].token, retry=NO_RETRY, timeout=5
    ) as admin:
        with pytest.raises(UnavailableError):
            await admin.create_session(unique("plain"), records.now())


async def test_a_token_over_tls_decides_the_role(tls_server: TLSServer) -> None:
    pair = tls_server.ca.client("anyone") if _mutual(tls_server) else None
    tls = tls_server.client_tls(pair)
    async with (
        RemoteSessionAdmin(tls_server.target, tls=tls, token=ENTRIES["chat-host"].token) as host,
        RemoteStore(tls_server.target, tls=tls, token=ENTRIES["chat-host"].token) as as_host,
    ):
        session = await host.create_session(unique("tls"), records.now())
        assert (await host.load_session(session.id)).id == session.id
        with pytest.raises(PermissionDeniedError) as refused:
            await as_host.start_root_run(
                records.root_run_start(
                    RunStart(
                        run_id=unique("run"),
                        agent_id="a",
                        session_id=session.id,
                        started_at=records.now(),
                    )
                )
            )
        assert refused.value.method == "/runstore.v1.RuntimeStore/StartRootRun"


async def test_a_server_certificate_from_another_ca_is_refused(tls_server: TLSServer) -> None:
    stranger = Authority("someone else")
    pair = tls_server.ca.client("anyone") if _mutual(tls_server) else None
    await handshake_fails(
        tls_server.target, tls_server.client_tls(pair, ca=stranger.pem), ENTRIES["chat-host"].token
    )


async def test_mtls_without_a_client_certificate_fails(mtls_server: TLSServer) -> None:
    await handshake_fails(mtls_server.target, mtls_server.client_tls(), ENTRIES["chat-host"].token)


async def test_mtls_with_a_certificate_from_another_ca_fails(mtls_server: TLSServer) -> None:
    forged = Authority("runstore test CA").client("ops", uri="spiffe://runstore.test/ops")
    await handshake_fails(mtls_server.target, mtls_server.client_tls(forged))


@pytest.mark.parametrize(
    ("common_name", "uri", "dns", "principal"),
    [
        ("ignored", "spiffe://runstore.test/ops", "", "ops"),
        ("ignored", "", "worker-eu.runstore.test", "worker-eu"),
        ("dashboards", "", "", "dashboards"),
    ],
    ids=["san-uri", "san-dns", "subject-cn"],
)
async def test_a_mapped_client_certificate_decides_the_role(
    mtls_server: TLSServer, common_name: str, uri: str, dns: str, principal: str
) -> None:
    role = ENTRIES[principal].role
    tls = mtls_server.client_tls(mtls_server.ca.client(common_name, uri=uri, dns=dns))
    async with (
        RemoteSessionAdmin(mtls_server.target, tls=tls) as admin,
        RemoteStore(mtls_server.target, tls=tls) as store,
    ):
        session_id = unique("mtls")
        if role == "admin":
            await admin.create_session(session_id, records.now())
            assert (await store.load_session_status(session_id)).name == "ACTIVE"
            return
        with pytest.raises(PermissionDeniedError):
            await admin.create_session(session_id, records.now())
        with pytest.raises(PermissionDeniedError):
            await admin.end_session(session_id, records.now())
        if role == "worker":
            assert await _start_one_shot(store)
        else:
            with pytest.raises(PermissionDeniedError):
                await _start_one_shot(store)


async def test_an_unmapped_client_certificate_is_unauthenticated(mtls_server: TLSServer) -> None:
    tls = mtls_server.client_tls(mtls_server.ca.client("nobody", dns="nobody.runstore.test"))
    async with RemoteSessionAdmin(mtls_server.target, tls=tls, retry=NO_RETRY) as admin:
        with pytest.raises(UnauthenticatedError) as refused:
            await admin.load_session("x")
    assert refused.value.method == "/runstore.v1.SessionAdmin/LoadSession"


async def test_a_token_beats_the_certificate(mtls_server: TLSServer) -> None:
    ops = mtls_server.client_tls(mtls_server.ca.client("x", uri="spiffe://runstore.test/ops"))
    async with RemoteSessionAdmin(
        mtls_server.target, tls=ops, token=ENTRIES["chat-host"].token
    ) as as_host:
        # The certificate alone would be admin; the host token makes it a host,
        # which may administer sessions but not start runs.
        session = await as_host.create_session(unique("both"), records.now())
        async with RemoteStore(mtls_server.target, tls=ops, token=ENTRIES["chat-host"].token) as s:
            with pytest.raises(PermissionDeniedError):
                await _start_one_shot(s)
        assert session.id
    async with RemoteSessionAdmin(
        mtls_server.target, tls=ops, token="not-a-token", retry=NO_RETRY
    ) as bogus:
        with pytest.raises(UnauthenticatedError):
            await bogus.load_session("x")


async def test_new_certificates_apply_to_new_connections_only(tls_server: TLSServer) -> None:
    """``reload()`` (what SIGHUP calls) swaps the chain; open connections stay up."""
    directory, old_ca = tls_server.directory, tls_server.ca
    new_ca = Authority("rotated CA")
    pair = old_ca.client("x", uri="spiffe://runstore.test/ops") if _mutual(tls_server) else None
    token = None if pair is not None else ENTRIES["ops"].token
    async with RemoteSessionAdmin(
        tls_server.target, tls=tls_server.client_tls(pair), token=token
    ) as before:
        await before.create_session(unique("before"), records.now())
        try:
            new_ca.server().write(directory, "server")
            assert tls_server.running.security.tls is not None
            assert tls_server.running.security.tls.reload()
            async with RemoteSessionAdmin(
                tls_server.target,
                tls=tls_server.client_tls(pair, ca=new_ca.pem),
                token=token,
            ) as after:
                await after.create_session(unique("after"), records.now())
            await handshake_fails(tls_server.target, tls_server.client_tls(pair), token)
            # The connection opened before the rotation still works.
            await before.create_session(unique("still"), records.now())
        finally:
            old_ca_server = old_ca.server()
            old_ca_server.write(directory, "server")
            tls_server.running.security.tls.reload()


async def test_tls_with_raw_credentials_is_an_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        RemoteStore(
            "127.0.0.1:1",
            tls=TLSConfig(ca=b"-----BEGIN CERTIFICATE-----"),
            credentials=grpc.ssl_channel_credentials(),
        )


async def test_tls_files_are_read_from_paths(tls_server: TLSServer, tmp_path: Path) -> None:
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(tls_server.ca.pem)
    pair = tls_server.ca.client("x", uri="spiffe://runstore.test/ops")
    cert_path, key_path = pair.write(tmp_path, "client")
    tls = TLSConfig(ca=str(ca_path), cert=cert_path, key=key_path)
    async with RemoteSessionAdmin(tls_server.target, tls=tls, token=ENTRIES["ops"].token) as a:
        await a.create_session(unique("paths"), records.now())
