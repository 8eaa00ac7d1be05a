"""``RemoteStore`` and ``RemoteSessionAdmin``: the protocols over gRPC (asyncio).

One channel per client object (or a shared one you pass in); every call has a
per-attempt deadline, optional metadata, a bearer token (``token=``) over TLS
(``tls=``), and transient failures are retried with the identical command
(``RetryPolicy``). Errors arrive as the classes of ``runstore.contract.errors``;
``UnauthenticatedError`` and ``PermissionDeniedError`` are never retried.

Clients are not thread-safe: use one per event loop (or ``runstore.client.sync``).

The code lives in one module per job; this one keeps the names it always
exported: ``channel`` (keepalive, TLS, ``open_channel``), ``calls`` (what
every client does with a call), ``runtime_store`` (``RemoteStore``, with
``coalesced_appends`` and ``watch_streams``) and ``session_admin``
(``RemoteSessionAdmin``).
"""

from runstore.client.calls import Client as _Client
from runstore.client.calls import TokenSource
from runstore.client.channel import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Keepalive,
    PEMSource,
    TLSConfig,
    open_channel,
)
from runstore.client.runtime_store import RemoteStore
from runstore.client.session_admin import RemoteSessionAdmin

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Keepalive",
    "PEMSource",
    "RemoteSessionAdmin",
    "RemoteStore",
    "TLSConfig",
    "TokenSource",
    "_Client",
    "open_channel",
]
