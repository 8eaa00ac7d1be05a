"""Telling a TLS mistake from an outage (``docs/security.md#tls-mistakes``).

gRPC reports every failed handshake as UNAVAILABLE, which the client would
retry for its whole deadline. Some causes are in the status text (the
server's certificate failed verification; a TLS client met a plaintext
server); the others are only "Socket closed", so for those the client asks
the server once with a short TLS probe what it expects (TLS at all, a client
certificate, one signed by another CA). Each finding becomes a
``TLSHandshakeError``: never retried, with the cause and a hint.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator
from enum import Enum
from typing import Final

from runstore.contract.errors import UnavailableError

PROBE_SECONDS: Final = 2.0
"""How long the probe may take at most (connect, handshake, first answer)."""

_HTTP2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
"""The client connection preface and an empty SETTINGS frame: a gRPC server that
accepted the handshake answers with its SETTINGS; one that refused the client's
certificate closes the connection instead."""


class TLSProblem(Enum):
    """What went wrong, each with the words the error says."""

    SERVER_EXPECTS_TLS = "the server expects TLS"
    CLIENT_CERTIFICATE_REQUIRED = "the server requires a client certificate"
    CLIENT_CERTIFICATE_REFUSED = "the server does not trust the client certificate you gave"
    SERVER_NOT_TRUSTED = "the server's certificate is not trusted by the CA you gave"
    SERVER_NOT_TRUSTED_BY_SYSTEM = "the server's certificate is not trusted by the system's CAs"
    WRONG_SERVER_NAME = "the server's certificate is not for the name you connected to"
    SERVER_IS_PLAINTEXT = "the server does not speak TLS (a plaintext server)"


CLIENT_HINTS: Final = {
    TLSProblem.SERVER_EXPECTS_TLS: "pass tls=TLSConfig(ca=...) with the CA of its certificate",
    TLSProblem.CLIENT_CERTIFICATE_REQUIRED: "pass tls=TLSConfig(ca=..., cert=..., key=...)",
    TLSProblem.CLIENT_CERTIFICATE_REFUSED: (
        "use a certificate signed by the server's --tls-client-ca"
    ),
    TLSProblem.SERVER_NOT_TRUSTED: "pass the CA that signed the server's certificate as ca=",
    TLSProblem.SERVER_NOT_TRUSTED_BY_SYSTEM: (
        "pass the CA that signed the server's certificate as TLSConfig(ca=...)"
    ),
    TLSProblem.WRONG_SERVER_NAME: (
        "connect by a name the certificate holds, or pass TLSConfig(server_name=...)"
    ),
    TLSProblem.SERVER_IS_PLAINTEXT: "drop tls= (or start the server with --tls-cert/--tls-key)",
}
"""What a Python caller changes; the CLI says the same with its flags."""


class TLSHandshakeError(UnavailableError):
    """The TLS handshake failed for a reason a retry cannot fix.

    Still an ``UnavailableError`` (what gRPC reports, and what older callers
    catch), but never retried. ``problem`` says what is wrong and ``cause``
    is gRPC's own text."""

    def __init__(self, problem: TLSProblem, cause: str, hint: str | None = None) -> None:
        self.problem = problem
        self.cause = cause
        self.hint = CLIENT_HINTS[problem] if hint is None else hint
        super().__init__(f"TLS handshake failed: {problem.value}: {self.hint} ({cause})")


def from_status_text(details: str, *, uses_tls: bool, has_ca: bool) -> TLSProblem | None:
    """The problem a failed connection's status text names, if it names one."""
    if not uses_tls:
        return None
    if "Hostname Verification Check failed" in details or (
        "Peer name" in details and "not in peer certificate" in details
    ):
        return TLSProblem.WRONG_SERVER_NAME
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return TLSProblem.SERVER_NOT_TRUSTED if has_ca else TLSProblem.SERVER_NOT_TRUSTED_BY_SYSTEM
    if "WRONG_VERSION_NUMBER" in details:
        return TLSProblem.SERVER_IS_PLAINTEXT
    return None


def needs_probe(details: str) -> bool:
    """Whether a failed connection could be a refused handshake: the server
    hung up during connection set-up, without a reason."""
    return "failed to connect" in details and (
        "Socket closed" in details or "Connection reset" in details
    )


def host_and_port(target: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``host:port`` or ``[v6]:port`` target; None for others."""
    host, separator, port = target.rpartition(":")
    if not separator or not port.isdigit() or not host or "/" in host:
        return None
    return host.strip("[]"), int(port)


@contextlib.contextmanager
def _pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """``ssl`` loads a client certificate from files only: private, removed after."""
    with tempfile.TemporaryDirectory(prefix="runstore-probe-") as directory:
        paths = (os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem"))
        for path, data in zip(paths, (cert, key), strict=True):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
        yield paths


def probe(
    target: str, *, uses_tls: bool, cert: bytes | None = None, key: bytes | None = None
) -> TLSProblem | None:
    """Asks the server at ``target`` over TLS what it expects of this client
    (blocking, ``PROBE_SECONDS`` at most); None when TLS is not the problem."""
    address = host_and_port(target)
    if address is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only what the server thinks of us matters here
    context.set_alpn_protocols(["h2"])
    with contextlib.ExitStack() as stack:
        if cert is not None and key is not None:
            cert_path, key_path = stack.enter_context(_pem_files(cert, key))
            try:
                context.load_cert_chain(cert_path, key_path)
            except ssl.SSLError:
                return None
        try:
            raw = stack.enter_context(socket.create_connection(address, timeout=PROBE_SECONDS))
            secured = stack.enter_context(context.wrap_socket(raw, server_hostname=address[0]))
        except (ssl.SSLError, OSError):
            return None  # not a TLS server, or not reachable: the outage is real
        try:
            secured.sendall(_HTTP2_PREFACE)
            answered = bool(secured.recv(64))
        except TimeoutError:
            return None  # a slow server, not a refusal: say nothing
        except (ssl.SSLError, OSError):
            answered = False
    if not uses_tls:
        return TLSProblem.SERVER_EXPECTS_TLS
    if answered:
        return None
    if cert is None:
        return TLSProblem.CLIENT_CERTIFICATE_REQUIRED
    return TLSProblem.CLIENT_CERTIFICATE_REFUSED


def diagnose(
    details: str,
    target: str,
    *,
    uses_tls: bool,
    has_ca: bool = False,
    cert: bytes | None = None,
    key: bytes | None = None,
    may_probe: bool = True,
) -> TLSProblem | None:
    """The TLS problem behind a failed connection to ``target`` whose status
    text is ``details``, or None when it looks like an ordinary outage. Blocks
    for the probe (run it in a thread from asyncio)."""
    named = from_status_text(details, uses_tls=uses_tls, has_ca=has_ca)
    if named is not None or not may_probe or not needs_probe(details):
        return named
    return probe(target, uses_tls=uses_tls, cert=cert, key=key)
