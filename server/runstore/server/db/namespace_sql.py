"""The statements on namespaces and the purge of a deleted namespace's data
(docs/namespaces.md), and the transaction operations that run them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import BindParameter

from runstore.server.core.model import Nanos
from runstore.server.core.namespace_model import ACTIVE, DELETING, Namespace
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.primitives import StatementPrimitives
from runstore.server.db.schema import namespace_tombstones, namespace_usage, namespaces

DATA_TABLES: Final = (
    "synchronous_runs",
    "seed_records",
    "seed_attempts",
    "seed_operations",
    "records",
    "runs",
    "run_tombstones",
    "sessions",
    "session_tombstones",
    "memory_events",
    "memory_appends",
    "memory_runs",
    "context_transcript",
    "context_versions",
    "context_appends",
    "context_keys",
)
"""Every table keyed by namespace, in the order a purge empties them."""

_COLUMNS: Final = tuple(namespaces.c[field.name] for field in fields(Namespace))
_VALUES: Final[dict[str, BindParameter[Any]]] = {
    column.name: bindparam(column.name) for column in _COLUMNS
}


def _purge(table: str, dialect: Dialect) -> ClauseElement:
    """Deletes one bounded batch of ``table``'s rows of a namespace: by the
    rows' physical address, so a batch is bounded in rows whatever the key."""
    address = "ctid" if dialect.name == "postgresql" else "rowid"
    # Not :namespace, which the backends bind to the transaction's own namespace.
    return text(
        f"DELETE FROM {table} WHERE {address} IN "
        f"(SELECT {address} FROM {table} WHERE namespace = :purged LIMIT :limit) "
        "RETURNING 1"
    ).bindparams(bindparam("purged"), bindparam("limit"))


STORED_SIZES: Final = (
    ("records", "payload_size"),
    ("memory_events", "length(data)"),
    ("context_versions", "length(snapshot)"),
    ("context_transcript", "length(message)"),
    ("runs", "length(checkpoint_data)"),
    ("seed_records", "length(data)"),
    ("seed_attempts", "{text_bytes}(rendered_prompts)"),
)
"""What a namespace's stored bytes count (``stored_bytes`` quota): record
payloads, memory event data, context snapshots and transcript messages,
suspension checkpoints, seed records and seed declarations' rendered prompts
(docs/namespaces.md#quotas). ``{text_bytes}(column)`` is a text column's
size in bytes, not characters (``_stored_size``)."""


def _stored_size(size: str, dialect: Dialect) -> str:
    """``size`` with ``{text_bytes}(column)`` written in ``dialect``'s SQL."""
    if "{text_bytes}" not in size:
        return size
    column = size.removeprefix("{text_bytes}(").removesuffix(")")
    if dialect.name == "postgresql":
        return f"octet_length({column})"
    return f"length(CAST({column} AS BLOB))"


QUOTA_LOCK_KEY: Final = 0x72756E73746F7171
"""The advisory lock key of the stored-bytes recount (PostgreSQL; retention
and migrations use others)."""


def _quota_sources(dialect: Dialect) -> dict[str, ClauseElement]:
    """The heartbeat and usage statements: plain SQL, the same on both backends
    (``INSERT ... ON CONFLICT``), but for the recount's lock."""
    lock = (
        "SELECT pg_try_advisory_xact_lock(:key)"
        if dialect.name == "postgresql"
        else "SELECT :key IS NOT NULL"  # SQLite: one writer at a time already
    )
    return {
        "beat": text(
            "INSERT INTO quota_replicas (replica_id, beats, seen_at, streams) "
            "VALUES (:replica_id, 1, :seen_at, :streams) ON CONFLICT (replica_id) DO UPDATE "
            "SET beats = quota_replicas.beats + 1, seen_at = excluded.seen_at, "
            "streams = excluded.streams"
        ),
        "replicas": text("SELECT replica_id, beats, streams FROM quota_replicas"),
        "forget_stale": text("DELETE FROM quota_replicas WHERE seen_at < :before"),
        "forget_replica": text("DELETE FROM quota_replicas WHERE replica_id = :replica_id"),
        "usage": select(
            namespace_usage.c.name, namespace_usage.c.stored_bytes, namespace_usage.c.measured_at
        ),
        "set_usage": text(
            "INSERT INTO namespace_usage (name, stored_bytes, measured_at) "
            "VALUES (:name, :stored_bytes, :measured_at) ON CONFLICT (name) DO UPDATE "
            "SET stored_bytes = excluded.stored_bytes, measured_at = excluded.measured_at"
        ),
        "drop_usage": delete(namespace_usage).where(namespace_usage.c.name == bindparam("name")),
        "recount_lock": text(lock),
    }


@dataclass(frozen=True, slots=True)
class NamespaceStatements:
    get: Compiled
    page: Compiled
    names_in_state: Compiled
    tombstoned: Compiled
    insert: Compiled
    update: Compiled
    drop: Compiled
    tombstone: Compiled
    rows_in_state: Compiled
    beat: Compiled
    replicas: Compiled
    forget_stale: Compiled
    forget_replica: Compiled
    usage: Compiled
    set_usage: Compiled
    drop_usage: Compiled
    recount_lock: Compiled
    purges: tuple[Compiled, ...]
    """One per table of ``DATA_TABLES``, in that order."""
    stored: tuple[Compiled, ...]
    """The stored bytes of a namespace in each table of ``STORED_SIZES``: one
    statement each, so none runs long on a large namespace."""

    @classmethod
    def compile(cls, dialect: Dialect) -> NamespaceStatements:
        sources: dict[str, ClauseElement] = {
            "get": select(*_COLUMNS).where(namespaces.c.name == bindparam("name")),
            "page": select(*_COLUMNS)
            .where(namespaces.c.name > bindparam("after"))
            .order_by(namespaces.c.name)
            .limit(bindparam("limit")),
            "names_in_state": select(namespaces.c.name).where(
                namespaces.c.state == bindparam("state")
            ),
            "rows_in_state": select(*_COLUMNS).where(namespaces.c.state == bindparam("state")),
            **_quota_sources(dialect),
            "tombstoned": select(namespace_tombstones.c.name).where(
                namespace_tombstones.c.name == bindparam("name")
            ),
            "insert": insert(namespaces).values(**_VALUES),
            "update": update(namespaces)
            .where(namespaces.c.name == bindparam("name"))
            .values(**{k: v for k, v in _VALUES.items() if k not in ("name", "created_at")}),
            "drop": delete(namespaces).where(namespaces.c.name == bindparam("name")),
            "tombstone": insert(namespace_tombstones).values(
                name=bindparam("name"), deleted_at=bindparam("deleted_at")
            ),
        }
        compiled = {name: compile_for(statement, dialect) for name, statement in sources.items()}
        purges = tuple(compile_for(_purge(table, dialect), dialect) for table in DATA_TABLES)
        stored = tuple(
            compile_for(
                text(
                    f"SELECT COALESCE(SUM({_stored_size(size, dialect)}), 0) "
                    f"FROM {table} WHERE namespace = :counted"
                ),
                dialect,
            )
            for table, size in STORED_SIZES
        )
        return cls(**compiled, purges=purges, stored=stored)


def _namespace(row: Any) -> Namespace:
    values = dict(zip((column.name for column in _COLUMNS), tuple(row), strict=True))
    return Namespace(**values)


def _params(namespace: Namespace) -> dict[str, Any]:
    return {field.name: getattr(namespace, field.name) for field in fields(Namespace)}


class NamespaceOperations(StatementPrimitives):
    """``core.namespace_model.NamespaceTransaction`` over a ``SqlTransaction``'s
    primitives (mixed into it)."""

    @property
    def _namespace_sql(self) -> NamespaceStatements:
        raise NotImplementedError

    async def namespace_row(self, name: str) -> Namespace | None:
        row = await self._one(self._namespace_sql.get, name=name)
        return None if row is None else _namespace(row)

    async def namespace_page(self, after: str, limit: int) -> list[Namespace]:
        rows = await self._all(self._namespace_sql.page, after=after, limit=limit)
        return [_namespace(row) for row in rows]

    async def active_namespaces(self) -> list[Namespace]:
        rows = await self._all(self._namespace_sql.rows_in_state, state=ACTIVE)
        return [_namespace(row) for row in rows]

    async def quota_heartbeat(
        self, replica_id: str, seen_at: Nanos, streams: str, stale_before: Nanos
    ) -> list[tuple[str, int, str]]:
        sql = self._namespace_sql
        await self._run(sql.beat, replica_id=replica_id, seen_at=seen_at, streams=streams)
        await self._run(sql.forget_stale, before=stale_before)
        return [(str(r[0]), int(r[1]), str(r[2])) for r in await self._all(sql.replicas)]

    async def forget_replica(self, replica_id: str) -> None:
        await self._run(self._namespace_sql.forget_replica, replica_id=replica_id)

    async def namespace_usage(self) -> dict[str, tuple[int, Nanos]]:
        rows = await self._all(self._namespace_sql.usage)
        return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}

    async def recount_usage(self, names: list[str], now: Nanos, fresh_after: Nanos) -> int:
        sql = self._namespace_sql
        if not (await self._one(sql.recount_lock, key=QUOTA_LOCK_KEY))[0]:
            return 0  # another replica is recounting
        measured = await self.namespace_usage()
        recounted = 0
        for name in names:
            if name in measured and measured[name][1] >= fresh_after:
                continue  # another replica recounted it since
            stored = 0
            for statement in sql.stored:
                stored += int((await self._one(statement, counted=name))[0])
            await self._run(sql.set_usage, name=name, stored_bytes=stored, measured_at=now)
            recounted += 1
        return recounted

    async def active_namespace_names(self) -> list[str]:
        rows = await self._all(self._namespace_sql.names_in_state, state=ACTIVE)
        return [str(row[0]) for row in rows]

    async def deleting_namespace_names(self) -> list[str]:
        rows = await self._all(self._namespace_sql.names_in_state, state=DELETING)
        return [str(row[0]) for row in rows]

    async def namespace_tombstoned(self, name: str) -> bool:
        return await self._one(self._namespace_sql.tombstoned, name=name) is not None

    async def insert_namespace(self, namespace: Namespace) -> None:
        await self._run(self._namespace_sql.insert, **_params(namespace))

    async def update_namespace(self, namespace: Namespace) -> None:
        params = _params(namespace)
        del params["created_at"]
        await self._run(self._namespace_sql.update, **params)

    async def purge_namespace_rows(self, name: str, limit: int) -> int:
        for statement in self._namespace_sql.purges:
            deleted = len(await self._all(statement, purged=name, limit=limit))
            if deleted:
                return deleted
        return 0

    async def drop_namespace(self, name: str, deleted_at: Nanos) -> None:
        await self._run(self._namespace_sql.drop, name=name)
        await self._run(self._namespace_sql.drop_usage, name=name)
        await self._run(self._namespace_sql.tombstone, name=name, deleted_at=deleted_at)
