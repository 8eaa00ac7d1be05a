"""A namespace as the store keeps it, and the transaction operations on namespaces
(docs/namespaces.md). Kept apart from ``ports`` so that the namespace
administration reads as one piece; ``ports.Transaction`` includes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from runstore.server.core.model import Nanos

ACTIVE: Final = "active"
DELETING: Final = "deleting"
"""Refusing new calls while the background purge deletes its data."""


@dataclass(frozen=True, slots=True)
class Namespace:
    """One namespace: its state, description, retention overrides and quotas.

    Overrides and quotas are None when unset (the server's settings apply;
    quotas are stored only, not enforced, in this version)."""

    name: str
    state: str
    created_at: Nanos
    updated_at: Nanos
    description: str = ""
    retain_ended_sessions_s: float | None = None
    retain_sessionless_runs_s: float | None = None
    quota_writes_per_s: float | None = None
    quota_reads_per_s: float | None = None
    quota_watch_streams: int | None = None
    quota_stored_bytes: int | None = None


class NamespaceTransaction(Protocol):
    """Named operations on namespaces inside one database transaction."""

    async def namespace_row(self, name: str) -> Namespace | None: ...

    async def namespace_page(self, after: str, limit: int) -> list[Namespace]:
        """Up to ``limit`` namespaces named after ``after``, in name order."""
        ...

    async def active_namespace_names(self) -> list[str]: ...

    async def deleting_namespace_names(self) -> list[str]: ...

    async def namespace_tombstoned(self, name: str) -> bool: ...

    async def insert_namespace(self, namespace: Namespace) -> None: ...

    async def update_namespace(self, namespace: Namespace) -> None: ...

    async def purge_namespace_rows(self, name: str, limit: int) -> int:
        """Deletes at most ``limit`` rows of the namespace's data, from the first
        table that still has some; returns how many (0: no data left)."""
        ...

    async def drop_namespace(self, name: str, deleted_at: Nanos) -> None:
        """Deletes the namespace's row and tombstones its name."""
        ...
