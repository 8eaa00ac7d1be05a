"""Request metadata keys that client and server read alike (docs/clients/index.md)."""

from __future__ import annotations

from typing import Final

READ_LAG_KEY: Final = "x-runstore-read-lag"
"""Set to ``READ_LAG_TOLERATED`` on a record listing that may be served by a
standby (``--read-database-url``): an export, say, that does not need the
commits of the last moments. Without it every worker-facing read is served by
the primary, which has every acknowledged write (docs/failover.md)."""

READ_LAG_TOLERATED: Final = "tolerated"

READ_LAG_METADATA: Final = ((READ_LAG_KEY, READ_LAG_TOLERATED),)
"""The metadata entry, as the Python client's ``metadata=`` takes it."""

VERSION_KEY: Final = "x-runstore-version"
"""Sent by the server in the initial metadata of every response it handles,
success or error, unary or streamed: its runstore-server version, e.g.
``0.2.0`` (docs/observability.md#the-servers-version). ``runstore health --json``
shows it."""

NAMESPACE_KEY: Final = "x-runstore-namespace"
"""The namespace a call acts in (docs/namespaces.md). Without it, a principal
bound to exactly one namespace acts there; with authentication off, in
``default``."""


def namespace_metadata(namespace: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata entry naming ``namespace`` (none when it is None or empty)."""
    return ((NAMESPACE_KEY, namespace),) if namespace else ()
