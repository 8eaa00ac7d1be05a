"""The statements of seeds and preparations (docs/contract.md §9.7), and
``core.seed_model.SeedTransaction`` over a ``SqlTransaction``'s primitives."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, insert, literal_column, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from runstore.contract.seeds import (
    HistoryPrefix,
    LiteralPart,
    PreparationOperation,
    RenderedPrompt,
    SeedDeclaration,
    SeedKind,
    SeedRecord,
)
from runstore.server.core.model import Nanos
from runstore.server.core.seed_model import (
    PUBLISHED,
    SeedAttemptRow,
    SeedOperationRow,
    StoredSeedRecord,
)
from runstore.server.db.compiled import Compiled, compile_for
from runstore.server.db.primitives import StatementPrimitives
from runstore.server.db.record_writes import in_namespace, namespace_param
from runstore.server.db.schema import (
    seed_attempts,
    seed_operations,
    seed_records,
    synchronous_runs,
)

_OPERATION = (
    seed_operations.c.agent_id,
    seed_operations.c.session_id,
    seed_operations.c.command_id,
    seed_operations.c.published_attempt_id,
)
_ATTEMPT = tuple(c for c in seed_attempts.columns if c.name not in ("namespace", "run_id"))
_RECORD = (
    seed_records.c.record_id,
    seed_records.c.record_key,
    seed_records.c.body,
    seed_records.c.data,
    seed_records.c.final,
    seed_records.c.json_size,
)
_MUTABLE = (
    "state",
    "end_id",
    "seed_end_id",
    "prepared_bytes",
    "has_source",
    "literal_open",
)


def _run(table: Any) -> Any:
    return and_(in_namespace(table), table.c.run_id == bindparam("run_id"))


def _attempt(table: Any) -> Any:
    return and_(_run(table), table.c.attempt_id == bindparam("attempt_id"))


@dataclass(frozen=True, slots=True)
class SeedStatements:
    operation: Compiled
    operation_for_update: Compiled
    record_operation: Compiled
    attempt: Compiled
    insert_attempt: Compiled
    update_attempt: Compiled
    publish: Compiled
    record_by_key: Compiled
    insert_record: Compiled
    record_sizes: Compiled
    records: Compiled
    lock_session_operations: Compiled
    delete_session_records: Compiled
    delete_session_attempts: Compiled
    delete_session_operations: Compiled
    expired: Compiled
    delete_attempt_records: Compiled
    delete_attempt: Compiled
    delete_idle_operation: Compiled
    synchronous_run: Compiled
    insert_synchronous_run: Compiled
    delete_run_records: Compiled
    delete_run_attempts: Compiled
    delete_run_operation: Compiled
    delete_synchronous_run: Compiled

    @classmethod
    def compile(cls, dialect: Dialect) -> SeedStatements:
        insert_of = postgresql_insert if dialect.name == "postgresql" else sqlite_insert
        operation = select(*_OPERATION).where(_run(seed_operations))
        in_session = (
            select(seed_operations.c.run_id)
            .where(
                in_namespace(seed_operations),
                seed_operations.c.session_id == bindparam("session_id"),
            )
            .scalar_subquery()
        )
        sources: dict[str, ClauseElement] = {
            "operation": operation,
            "operation_for_update": operation.with_for_update(),
            "record_operation": insert_of(seed_operations)
            .values(
                namespace=namespace_param(),
                run_id=bindparam("run_id"),
                agent_id=bindparam("agent_id"),
                session_id=bindparam("session_id"),
                command_id=bindparam("command_id"),
                published_attempt_id=None,
                created_at=bindparam("created_at"),
            )
            .on_conflict_do_nothing(),
            "attempt": select(*_ATTEMPT).where(_attempt(seed_attempts)),
            "insert_attempt": insert(seed_attempts).values(
                namespace=namespace_param(),
                run_id=bindparam("run_id"),
                **{c.name: bindparam(c.name) for c in _ATTEMPT},
            ),
            "update_attempt": update(seed_attempts)
            .where(_attempt(seed_attempts))
            .values(**{name: bindparam(name) for name in _MUTABLE}),
            "publish": update(seed_operations)
            .where(_run(seed_operations))
            .values(published_attempt_id=bindparam("attempt_id")),
            "record_by_key": select(*_RECORD).where(
                _attempt(seed_records), seed_records.c.key_digest == bindparam("key_digest")
            ),
            "insert_record": insert(seed_records).values(
                namespace=namespace_param(),
                run_id=bindparam("run_id"),
                attempt_id=bindparam("attempt_id"),
                key_digest=bindparam("key_digest"),
                **{c.name: bindparam(c.name) for c in _RECORD},
            ),
            "record_sizes": select(seed_records.c.json_size)
            .where(
                _attempt(seed_records),
                seed_records.c.record_id > bindparam("after"),
                seed_records.c.record_id <= bindparam("through"),
            )
            .order_by(seed_records.c.record_id)
            .limit(bindparam("limit")),
            "records": select(*_RECORD)
            .where(
                _attempt(seed_records),
                seed_records.c.record_id > bindparam("after"),
                seed_records.c.record_id <= bindparam("through"),
            )
            .order_by(seed_records.c.record_id),
            "lock_session_operations": select(seed_operations.c.run_id)
            .where(
                in_namespace(seed_operations),
                seed_operations.c.session_id == bindparam("session_id"),
            )
            .with_for_update(),
            "delete_session_records": delete(seed_records).where(
                in_namespace(seed_records), seed_records.c.run_id.in_(in_session)
            ),
            "delete_session_attempts": delete(seed_attempts).where(
                in_namespace(seed_attempts), seed_attempts.c.run_id.in_(in_session)
            ),
            "delete_session_operations": delete(seed_operations).where(
                in_namespace(seed_operations),
                seed_operations.c.session_id == bindparam("session_id"),
            ),
            "expired": select(seed_attempts.c.run_id, seed_attempts.c.attempt_id)
            .where(
                in_namespace(seed_attempts),
                seed_attempts.c.state != literal_column(f"'{PUBLISHED}'"),
                seed_attempts.c.created_at < bindparam("created_before"),
            )
            .order_by(seed_attempts.c.created_at, seed_attempts.c.run_id)
            .limit(bindparam("limit")),
            "delete_attempt_records": delete(seed_records).where(_attempt(seed_records)),
            "delete_attempt": delete(seed_attempts).where(_attempt(seed_attempts)),
            "delete_idle_operation": delete(seed_operations).where(
                _run(seed_operations),
                seed_operations.c.published_attempt_id.is_(None),
                ~exists().where(_run(seed_attempts)),
            ),
            "synchronous_run": select(synchronous_runs.c.seed_end_id).where(_run(synchronous_runs)),
            "delete_run_records": delete(seed_records).where(_run(seed_records)),
            "delete_run_attempts": delete(seed_attempts).where(_run(seed_attempts)),
            "delete_run_operation": delete(seed_operations).where(_run(seed_operations)),
            "delete_synchronous_run": delete(synchronous_runs).where(_run(synchronous_runs)),
            "insert_synchronous_run": insert(synchronous_runs).values(
                namespace=namespace_param(),
                run_id=bindparam("run_id"),
                seed_end_id=bindparam("seed_end_id"),
            ),
        }
        return cls(**{name: compile_for(stmt, dialect) for name, stmt in sources.items()})


def _prefix_json(prefix: HistoryPrefix) -> bytes:
    return json.dumps(
        [prefix.run_id, prefix.end_id, prefix.exclude_system, prefix.exclude_reasoning]
    ).encode()


def _prefix_from_json(data: bytes) -> HistoryPrefix:
    run_id, end_id, exclude_system, exclude_reasoning = json.loads(data)
    return HistoryPrefix(run_id, end_id, bool(exclude_system), bool(exclude_reasoning))


def _record_columns(record: SeedRecord) -> dict[str, Any]:
    if record.literal_part is not None:
        return {
            "body": "literal_part",
            "data": record.literal_part.data,
            "final": int(record.literal_part.final),
        }
    if record.prefix is not None:
        return {"body": "prefix", "data": _prefix_json(record.prefix), "final": 0}
    if record.prepared:
        return {"body": "prepared", "data": record.prepared, "final": 0}
    return {"body": "messages", "data": record.messages, "final": 0}


def _record_from_row(row: Any) -> StoredSeedRecord:
    record_id, key, body, data, final, json_size = row
    data = bytes(data)
    values: dict[str, Any] = {}
    if body == "literal_part":
        values["literal_part"] = LiteralPart(data, bool(final))
    elif body == "prefix":
        values["prefix"] = _prefix_from_json(data)
    elif body == "prepared":
        values["prepared"] = data
    else:
        values["messages"] = data
    record = SeedRecord(
        key=str(key), previous_id=str(int(record_id) - 1), id=str(int(record_id)), **values
    )
    return StoredSeedRecord(record, int(json_size))


def _prompts_text(prompts: tuple[RenderedPrompt, ...]) -> str:
    return json.dumps(
        [[p.prompt_id, p.version, p.scope_session_id, dict(p.scope_labels)] for p in prompts],
        ensure_ascii=False,
    )


def _prompts_from_text(text: str) -> tuple[RenderedPrompt, ...]:
    return tuple(
        RenderedPrompt(prompt_id, version, session_id, labels)
        for prompt_id, version, session_id, labels in json.loads(text)
    )


def _key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class SeedOperations(StatementPrimitives):
    """``core.seed_model.SeedTransaction`` over a ``SqlTransaction``'s
    primitives (mixed into it)."""

    @property
    def _seed_sql(self) -> SeedStatements:
        raise NotImplementedError

    @staticmethod
    def _operation(row: Any, run_id: str) -> SeedOperationRow | None:
        if row is None:
            return None
        agent_id, session_id, command_id, published = row
        return SeedOperationRow(
            PreparationOperation(str(agent_id), run_id, str(session_id), str(command_id)),
            None if published is None else str(published),
        )

    async def lock_seed_operation(
        self, run_id: str, record: PreparationOperation | None, now: Nanos
    ) -> SeedOperationRow | None:
        sql = self._seed_sql
        if record is not None:
            await self._run(
                sql.record_operation,
                run_id=run_id,
                agent_id=record.agent_id,
                session_id=record.session_id,
                command_id=record.command_id,
                created_at=now,
            )
        return self._operation(await self._one(sql.operation_for_update, run_id=run_id), run_id)

    async def seed_operation(self, run_id: str) -> SeedOperationRow | None:
        return self._operation(await self._one(self._seed_sql.operation, run_id=run_id), run_id)

    async def seed_attempt(
        self, run_id: str, attempt_id: str, operation: SeedOperationRow | None = None
    ) -> SeedAttemptRow | None:
        row = await self._one(self._seed_sql.attempt, run_id=run_id, attempt_id=attempt_id)
        if row is None:
            return None
        values = dict(zip((c.name for c in _ATTEMPT), row, strict=True))
        if operation is None:
            operation = await self.seed_operation(run_id)
            assert operation is not None  # an attempt exists only under its run's operation
        agent_id = operation.operation.agent_id
        session_id = operation.operation.session_id
        command_id = operation.operation.command_id
        kind = str(values["kind"])
        declaration = SeedDeclaration(
            agent_id=str(agent_id),
            run_id=run_id,
            session_id=str(session_id),
            command_id=str(command_id),
            attempt_id=attempt_id,
            kind=SeedKind(kind) if kind else None,
            source_run_id=str(values["source_run_id"]),
            source_end_id=str(values["source_end_id"]),
            exclude_reasoning=bool(values["exclude_reasoning"]),
            rendered_prompts=_prompts_from_text(str(values["rendered_prompts"])),
        )
        source_end = values["source_end"]
        return SeedAttemptRow(
            declaration=declaration,
            source_end=None if source_end is None else str(source_end),
            state=str(values["state"]),
            end_id=int(values["end_id"]),
            seed_end_id=int(values["seed_end_id"]),
            prepared_bytes=int(values["prepared_bytes"]),
            has_source=bool(values["has_source"]),
            literal_open=bool(values["literal_open"]),
            created_at=int(values["created_at"]),
        )

    async def insert_seed_attempt(self, attempt: SeedAttemptRow) -> None:
        d = attempt.declaration
        await self._run(
            self._seed_sql.insert_attempt,
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            kind=d.kind.value if d.kind is not None else "",
            source_run_id=d.source_run_id,
            source_end_id=d.source_end_id,
            exclude_reasoning=int(d.exclude_reasoning),
            rendered_prompts=_prompts_text(d.rendered_prompts),
            source_end=attempt.source_end,
            created_at=attempt.created_at,
            **self._mutable(attempt),
        )

    @staticmethod
    def _mutable(attempt: SeedAttemptRow) -> dict[str, Any]:
        return {
            "state": attempt.state,
            "end_id": attempt.end_id,
            "seed_end_id": attempt.seed_end_id,
            "prepared_bytes": attempt.prepared_bytes,
            "has_source": int(attempt.has_source),
            "literal_open": int(attempt.literal_open),
        }

    async def update_seed_attempt(self, attempt: SeedAttemptRow) -> None:
        await self._run(
            self._seed_sql.update_attempt,
            run_id=attempt.declaration.run_id,
            attempt_id=attempt.declaration.attempt_id,
            **self._mutable(attempt),
        )

    async def publish_seed(self, run_id: str, attempt_id: str) -> None:
        await self._run(self._seed_sql.publish, run_id=run_id, attempt_id=attempt_id)

    async def seed_record_by_key(
        self, run_id: str, attempt_id: str, key: str
    ) -> StoredSeedRecord | None:
        row = await self._one(
            self._seed_sql.record_by_key,
            run_id=run_id,
            attempt_id=attempt_id,
            key_digest=_key_digest(key),
        )
        return None if row is None else _record_from_row(row)

    async def insert_seed_record(
        self, run_id: str, attempt_id: str, stored: StoredSeedRecord
    ) -> None:
        record = stored.record
        await self._run(
            self._seed_sql.insert_record,
            run_id=run_id,
            attempt_id=attempt_id,
            key_digest=_key_digest(record.key),
            record_id=int(record.id),
            record_key=record.key,
            json_size=stored.json_size,
            **_record_columns(record),
        )

    async def seed_record_sizes(
        self, run_id: str, attempt_id: str, after: int, through: int, limit: int
    ) -> list[int]:
        rows = await self._all(
            self._seed_sql.record_sizes,
            run_id=run_id,
            attempt_id=attempt_id,
            after=after,
            through=through,
            limit=limit,
        )
        return [int(row[0]) for row in rows]

    async def seed_records(
        self, run_id: str, attempt_id: str, after: int, through: int
    ) -> list[StoredSeedRecord]:
        rows = await self._all(
            self._seed_sql.records,
            run_id=run_id,
            attempt_id=attempt_id,
            after=after,
            through=through,
        )
        return [_record_from_row(row) for row in rows]

    async def delete_session_seeds(self, session_id: str) -> None:
        sql = self._seed_sql
        # The runs' seed locks first: an append holding one commits before the
        # deletes below run, so they see (and delete) its record too.
        await self._all(sql.lock_session_operations, session_id=session_id)
        for statement in (
            sql.delete_session_records,
            sql.delete_session_attempts,
            sql.delete_session_operations,
        ):
            await self._run(statement, session_id=session_id)

    async def expired_seed_attempts(
        self, created_before: Nanos, limit: int
    ) -> list[tuple[str, str]]:
        rows = await self._all(self._seed_sql.expired, created_before=created_before, limit=limit)
        return [(str(row[0]), str(row[1])) for row in rows]

    async def delete_seed_attempt(self, run_id: str, attempt_id: str) -> None:
        sql = self._seed_sql
        await self._run(sql.delete_attempt_records, run_id=run_id, attempt_id=attempt_id)
        await self._run(sql.delete_attempt, run_id=run_id, attempt_id=attempt_id)
        await self._run(sql.delete_idle_operation, run_id=run_id)

    async def synchronous_run(self, run_id: str) -> str | None:
        row = await self._one(self._seed_sql.synchronous_run, run_id=run_id)
        return None if row is None else str(row[0])

    async def insert_synchronous_run(self, run_id: str, seed_end_id: str) -> None:
        await self._run(
            self._seed_sql.insert_synchronous_run, run_id=run_id, seed_end_id=seed_end_id
        )

    async def delete_run_seeds(self, run_id: str) -> None:
        """A deleted sessionless run's seed and start kind (retention, §9.10.2)."""
        sql = self._seed_sql
        for statement in (
            sql.delete_run_records,
            sql.delete_run_attempts,
            sql.delete_run_operation,
            sql.delete_synchronous_run,
        ):
            await self._run(statement, run_id=run_id)
