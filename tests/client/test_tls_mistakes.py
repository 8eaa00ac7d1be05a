"""TLS mistakes against real servers: each is a ``TLSHandshakeError`` with the
cause and a hint, raised by the first attempt instead of being retried for the
whole retry deadline as if the server were down (docs/security.md#tls-mistakes)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runstore.client import (
    RemoteSessionAdmin,
    RetryPolicy,
    TLSConfig,
    TLSHandshakeError,
    TLSProblem,
    UnavailableError,
)
from runstore.client.retry import DEFAULT_RETRY
from runstore.server.config import ServerConfig
from tests.certs import Authority
from tests.secured import Entry, running_server, write_auth_file
from tests.support import serving

FIRST_ATTEMPT_SECONDS = 5.0
"""Well under the default retry deadline (30 s) that an outage would use up."""

ENTRIES = {"ops": Entry("admin", certificates=("ops",))}


@dataclass
class Servers:
    ca: Authority
    tls: str
    mtls: str
    plaintext: str


@pytest.fixture(scope="module")
async def servers(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Servers]:
    directory = tmp_path_factory.mktemp("tls-mistakes")
    ca = Authority()
    cert, key = ca.server().write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    auth_file = str(write_auth_file(directory / "auth.toml", ENTRIES))

    def config(mutual: bool) -> ServerConfig:
        return ServerConfig(
            listen="127.0.0.1:0",
            database_url=database_url,
            tls_cert=str(cert),
            tls_key=str(key),
            tls_client_ca=str(directory / "ca.crt") if mutual else "",
            auth_file=auth_file,
        )

    async with (
        running_server(config(False)) as tls,
        running_server(config(True)) as mtls,
        serving(database_url) as plaintext,
    ):
        yield Servers(ca, f"127.0.0.1:{tls.port}", f"127.0.0.1:{mtls.port}", plaintext.target)


async def _refused(target: str, tls: TLSConfig | None) -> TLSHandshakeError:
    """The error of one call with the default retries, and that it came at once."""
    started = time.monotonic()
    async with RemoteSessionAdmin(
        target, tls=tls, token=ENTRIES["ops"].token, retry=DEFAULT_RETRY
    ) as admin:
        with pytest.raises(TLSHandshakeError) as refused:
            await admin.load_session("x")
    assert time.monotonic() - started < FIRST_ATTEMPT_SECONDS
    assert isinstance(refused.value, UnavailableError)  # what callers caught before
    return refused.value


async def test_plaintext_to_a_tls_server_says_it_expects_tls(servers: Servers) -> None:
    for target in (servers.tls, servers.mtls):
        error = await _refused(target, None)
        assert error.problem is TLSProblem.SERVER_EXPECTS_TLS
        assert "the server expects TLS: pass tls=TLSConfig(" in str(error)


async def test_a_ca_that_did_not_sign_the_server_certificate(servers: Servers) -> None:
    error = await _refused(servers.tls, TLSConfig(ca=Authority("another CA").pem))
    assert error.problem is TLSProblem.SERVER_NOT_TRUSTED
    assert "not trusted by the CA you gave" in str(error)
    assert "CERTIFICATE_VERIFY_FAILED" in str(error)  # the cause, kept


async def test_a_name_the_server_certificate_does_not_hold(servers: Servers) -> None:
    error = await _refused(servers.tls, TLSConfig(ca=servers.ca.pem, server_name="other.example"))
    assert error.problem is TLSProblem.WRONG_SERVER_NAME
    assert "pass TLSConfig(server_name=...)" in str(error)


async def test_mtls_without_a_client_certificate(servers: Servers) -> None:
    error = await _refused(servers.mtls, TLSConfig(ca=servers.ca.pem))
    assert error.problem is TLSProblem.CLIENT_CERTIFICATE_REQUIRED
    assert "the server requires a client certificate" in str(error)


async def test_mtls_with_a_certificate_of_another_ca(servers: Servers) -> None:
    stranger = Authority("another CA").client("ops")
    error = await _refused(
        servers.mtls, TLSConfig(ca=servers.ca.pem, cert=stranger.cert, key=stranger.key)
    )
    assert error.problem is TLSProblem.CLIENT_CERTIFICATE_REFUSED


async def test_tls_to_a_plaintext_server(servers: Servers) -> None:
    error = await _refused(servers.plaintext, TLSConfig(ca=servers.ca.pem))
    assert error.problem is TLSProblem.SERVER_IS_PLAINTEXT


async def test_the_right_settings_work_and_an_outage_is_still_retried(
    servers: Servers, tmp_path: Path
) -> None:
    pair = servers.ca.client("ops")
    async with RemoteSessionAdmin(
        servers.mtls, tls=TLSConfig(ca=servers.ca.pem, cert=pair.cert, key=pair.key)
    ) as admin:
        assert (await admin.list_sessions()).items is not None
    retries: list[int] = []
    async with RemoteSessionAdmin(
        "127.0.0.1:1",
        retry=RetryPolicy(initial=0.01, maximum=0.02, max_attempts=3),
        on_retry=lambda error, attempt, delay: retries.append(attempt),
    ) as nowhere:
        with pytest.raises(UnavailableError) as down:
            await nowhere.load_session("x")
    assert not isinstance(down.value, TLSHandshakeError)
    assert retries == [1, 2]
