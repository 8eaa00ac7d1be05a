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
from runstore.server.db.schema import namespace_tombstones, namespaces

DATA_TABLES: Final = (
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
    purges: tuple[Compiled, ...]
    """One per table of ``DATA_TABLES``, in that order."""

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
        return cls(**compiled, purges=purges)


def _namespace(row: Any) -> Namespace:
    values = dict(zip((column.name for column in _COLUMNS), tuple(row), strict=True))
    return Namespace(**values)


def _params(namespace: Namespace) -> dict[str, Any]:
    return {field.name: getattr(namespace, field.name) for field in fields(Namespace)}


class NamespaceOperations:
    """``core.namespace_model.NamespaceTransaction`` over a ``SqlTransaction``'s
    primitives (mixed into it)."""

    async def _one(self, statement: Compiled, **params: Any) -> Any:
        raise NotImplementedError

    async def _all(self, statement: Compiled, **params: Any) -> list[Any]:
        raise NotImplementedError

    async def _run(self, statement: Compiled, **params: Any) -> None:
        raise NotImplementedError

    @property
    def _namespace_sql(self) -> NamespaceStatements:
        raise NotImplementedError

    async def namespace_row(self, name: str) -> Namespace | None:
        row = await self._one(self._namespace_sql.get, name=name)
        return None if row is None else _namespace(row)

    async def namespace_page(self, after: str, limit: int) -> list[Namespace]:
        rows = await self._all(self._namespace_sql.page, after=after, limit=limit)
        return [_namespace(row) for row in rows]

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
        await self._run(self._namespace_sql.tombstone, name=name, deleted_at=deleted_at)
