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
    a quota set is enforced, docs/namespaces.md#quotas)."""

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

    async def active_namespaces(self) -> list[Namespace]:
        """The active namespaces' rows (their quotas, for the directory)."""
        ...

    async def quota_heartbeat(
        self, replica_id: str, seen_at: Nanos, streams: str, stale_before: Nanos
    ) -> list[tuple[str, int, str]]:
        """Upserts this replica's heartbeat row (``beats`` + 1, its open Watch
        streams as JSON), deletes rows not beating since ``stale_before``, and
        returns every row: (replica_id, beats, streams)."""
        ...

    async def forget_replica(self, replica_id: str) -> None: ...

    async def namespace_usage(self) -> dict[str, tuple[int, Nanos]]:
        """Each measured namespace's stored bytes and when they were measured."""
        ...

    async def recount_usage(self, names: list[str], now: Nanos, fresh_after: Nanos) -> int:
        """Recounts the stored bytes of ``names`` not measured since
        ``fresh_after``, if no other replica is recounting; how many it did."""
        ...

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
