"""The channel a client opens: message size limits, HTTP/2 keepalive, TLS
(``TLSConfig``) and tracing interceptors (``open_channel``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import grpc

from runstore.client import tracing as client_tracing

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Keepalive:
    """HTTP/2 keepalive pings, so a dead peer is noticed between calls.

    A runstore server accepts a ping every 10 s at most (its
    ``--keepalive-min-ping-interval``); a client pinging more often is
    disconnected with GOAWAY ``too_many_pings``. Keep ``interval`` above it."""

    interval: float = 30.0
    """Seconds between pings, with or without calls in flight."""
    timeout: float = 10.0
    """Seconds to wait for a ping's answer before the connection is dropped."""
    without_calls: bool = True
    """Ping even when no call is in flight."""
    idle_timeout: float | None = 240.0
    """Seconds without calls after which the client closes its connection itself
    (the next call reconnects), before the server's 300 s idle limit would;
    None keeps gRPC's 30 minutes."""


PEMSource: TypeAlias = bytes | str | os.PathLike[str]
"""PEM data as ``bytes``, or the path of a file holding it (``str`` or ``Path``)."""


def read_pem(source: PEMSource | None) -> bytes | None:
    """The PEM bytes of ``source``: the bytes themselves, or its file's."""
    if source is None or isinstance(source, bytes):
        return source
    return Path(source).read_bytes()


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """TLS to the server and, for mTLS, this client's certificate.

    Each of ``ca``, ``cert`` and ``key`` is PEM bytes or a file path; files are
    read when the client is created.
    """

    ca: PEMSource | None = None
    """CA that signed the server's certificate; None trusts the system roots."""
    cert: PEMSource | None = None
    """This client's certificate chain (mTLS); needs ``key``."""
    key: PEMSource | None = None
    """The private key of ``cert``."""
    server_name: str | None = None
    """Name to verify the server's certificate against, when not the target's host."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TLSConfig: cert and key go together (mTLS)")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=read_pem(self.ca),
            private_key=read_pem(self.key),
            certificate_chain=read_pem(self.cert),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


def open_channel(
    target: str,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    keepalive: Keepalive | None = Keepalive(),
    options: Sequence[tuple[str, Any]] = (),
    tracing: bool | None = None,
    tracer_provider: Any | None = None,
) -> grpc.aio.Channel:
    """A channel to ``target`` (``host:port`` or any gRPC target), TLS when
    ``credentials`` are given; with ``tracing`` (by default: the ``otel`` extra
    installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, or a ``tracer_provider``
    given) every call gets a client span and sends its trace context."""
    settings: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES),
    ]
    if keepalive is not None:
        settings += [
            ("grpc.keepalive_time_ms", int(keepalive.interval * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive.timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", int(keepalive.without_calls)),
            # Without these gRPC stretches idle pings to one a minute after two,
            # so ``interval`` would not mean what it says.
            ("grpc.http2.min_time_between_pings_ms", int(keepalive.interval * 1000)),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        if keepalive.idle_timeout is not None:
            settings.append(("grpc.client_idle_timeout_ms", int(keepalive.idle_timeout * 1000)))
    settings += list(options)
    traced = client_tracing.wanted(True if tracer_provider is not None else tracing)
    interceptors = client_tracing.client_interceptors(tracer_provider) if traced else None
    if credentials is not None:
        return grpc.aio.secure_channel(
            target, credentials, options=settings, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=settings, interceptors=interceptors)
