"""The gRPC core settings a server runs with (docs/limits.md): message sizes,
the port's sharing, and the connection, idle and keepalive policies."""

from __future__ import annotations

from runstore.server.config import ServerConfig

RESPONSE_ENVELOPE_BYTES = 64 * 1024
"""Room a response needs beyond the largest request the server accepts: the
record, event or snapshot that request carried comes back with its ID,
cursor and counts around it."""

PAGE_RECORD_ENVELOPE_BYTES = 8 * 1024
"""Room per record of a page for what is not payload (six IDs and keys of at
most 1 KiB each, the record ID, the timestamp, framing)."""


def max_send_bytes(config: ServerConfig) -> int:
    """The largest response: whatever was accepted must be readable, so a page
    holding the largest accepted record (or a full page of records whose
    payloads fill the page budget) always fits."""
    return (
        config.max_message_bytes
        + config.page_limit * PAGE_RECORD_ENVELOPE_BYTES
        + RESPONSE_ENVELOPE_BYTES
    )


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def server_options(config: ServerConfig, *, reuse_port: bool = False) -> list[tuple[str, int]]:
    """gRPC core settings behind docs/limits.md: message sizes,
    the port, and the connection, idle and keepalive policies."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", max_send_bytes(config)),
        # gRPC turns SO_REUSEPORT on by default: a second server on our port
        # would start and take half of the calls to another database. Only the
        # workers of one `serve --workers N` share it (runstore.server.workers).
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        # A connection that never finishes the HTTP/2 preface holds a descriptor.
        ("grpc.server_handshake_timeout_ms", _ms(config.handshake_timeout)),
        ("grpc.max_connection_idle_ms", _ms(config.max_connection_idle)),
        # The server's own pings find clients that vanished mid-call.
        ("grpc.keepalive_time_ms", _ms(config.keepalive_time)),
        ("grpc.keepalive_timeout_ms", _ms(config.keepalive_timeout)),
        # Clients ping while idle (runstore.client.Keepalive): allow it, at most
        # every keepalive_min_ping_interval, instead of gRPC's 5 minutes
        # (2 hours without calls), which answers GOAWAY "too_many_pings".
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(config.keepalive_min_ping_interval)),
        ("grpc.http2.max_ping_strikes", 2),
    ]
