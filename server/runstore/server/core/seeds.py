"""Seeds and preparations (docs/contract.md §9.7): a run's initial history and
compiled start, uploaded under the destination run ID before the run starts.

Every mutation of a run's seeds is one transaction that first locks the run's
``seed_operations`` row (``Transaction.lock_seed_operation``), so uploads,
publications and settlements of one run from any number of replicas take
turns, and each sees the others' commits: one publication wins, record IDs
stay dense. Exact retries return the original result; anything else that
differs from what was accepted is SEED_CONFLICT.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from runstore.contract import _json
from runstore.contract.errors import (
    InvalidTranscriptPositionError,
    PreparationAbandonedError,
    RunConflictError,
    RunNotFoundError,
    RunRecordOwnerMismatchError,
    SeedConflictError,
    SeedNotFoundError,
    ValidationError,
    quote,
)
from runstore.contract.model import RunStatus
from runstore.contract.seeds import (
    MAX_SEED_COMMAND_BYTES,
    MAX_SEED_PAGE_BYTES,
    SEED_PAGE_RECORDS,
    HistoryPrefix,
    PreparationOperation,
    RunPreparation,
    RunSeed,
    SeedAppend,
    SeedDeclaration,
    SeedKind,
    SeedPage,
    SeedPublication,
    append_size,
    declaration_size,
    page_size,
    record_size,
)
from runstore.server.core import input_rules, paging
from runstore.server.core.checks import existing_session
from runstore.server.core.model import Nanos, RunStart
from runstore.server.core.ports import Transaction
from runstore.server.core.section import Section
from runstore.server.core.seed_model import (
    ABANDONED,
    OPEN,
    PUBLISHED,
    SeedAttemptRow,
    SeedOperationRow,
    StoredSeedRecord,
)

_JSON: Final = _json.decoder(
    parse_int=str,
    parse_float=str,
    duplicate_key=None,
    constant=lambda name: ValueError(name),
)


# --- Pure validation (nothing is written when it fails) ----------------------------


def _invalid(message: str, field: str) -> ValidationError:
    return ValidationError(message, field=field)


def validate_declaration(d: SeedDeclaration, field: str = "declaration") -> None:
    """§9.7.1 step 1."""
    input_rules.check_ids(
        **{
            f"{field}.agent_id": d.agent_id,
            f"{field}.run_id": d.run_id,
            f"{field}.session_id": d.session_id,
            f"{field}.command_id": d.command_id,
            f"{field}.attempt_id": d.attempt_id,
            f"{field}.source_run_id": d.source_run_id,
            f"{field}.source_end_id": d.source_end_id,
        }
    )
    for name in ("agent_id", "run_id", "command_id", "attempt_id"):
        if not getattr(d, name):
            raise _invalid(
                "preparation agent, run, command and attempt IDs are required", f"{field}.{name}"
            )
    for index, prompt in enumerate(d.rendered_prompts):
        at = f"{field}.rendered_prompts[{index}]"
        input_rules.check_text(prompt.prompt_id, f"{at}.prompt_id")
        input_rules.check_text(prompt.version, f"{at}.version")
        input_rules.check_text(prompt.scope_session_id, f"{at}.scope.session_id")
        input_rules.check_labels(prompt.scope_labels, f"{at}.scope.labels")
    if d.kind is SeedKind.LITERAL:
        if d.source_run_id or d.source_end_id or d.exclude_reasoning:
            bad = next(
                name
                for name in ("source_run_id", "source_end_id", "exclude_reasoning")
                if getattr(d, name)
            )
            raise _invalid(
                "literal seed cannot declare a source or source transform", f"{field}.{bad}"
            )
    elif d.kind in (SeedKind.NEXT_TURN, SeedKind.CONTINUATION):
        if not d.session_id or not d.source_run_id or d.source_run_id == d.run_id:
            bad = "session_id" if not d.session_id else "source_run_id"
            raise _invalid(
                "referenced history requires a session and a distinct source run",
                f"{field}.{bad}",
            )
        if d.kind is SeedKind.NEXT_TURN and d.source_end_id:
            raise _invalid(
                "completed source position is assigned by the store", f"{field}.source_end_id"
            )
        if d.kind is SeedKind.CONTINUATION and (not d.source_end_id or d.exclude_reasoning):
            bad = "source_end_id" if not d.source_end_id else "exclude_reasoning"
            raise _invalid(
                "continuation requires its exact saved position and preserves reasoning",
                f"{field}.{bad}",
            )
    else:
        raise _invalid('invalid seed kind ""', f"{field}.kind")
    size = declaration_size(d)
    if size > MAX_SEED_COMMAND_BYTES:
        raise _invalid(f"seed command size {size} exceeds {MAX_SEED_COMMAND_BYTES} bytes", field)


def validate_append(command: SeedAppend) -> None:
    """§9.7.2 step 1."""
    record = command.record
    input_rules.check_ids(
        run_id=command.run_id,
        attempt_id=command.attempt_id,
        **{"record.key": record.key, "record.previous_id": record.previous_id},
    )
    required = (
        ("run_id", command.run_id),
        ("attempt_id", command.attempt_id),
        ("record.key", record.key),
        ("record.previous_id", record.previous_id),
    )
    for name, value in required:
        if not value:
            raise _invalid(
                "preparation append requires run, attempt, key and previous position, "
                "with no assigned ID",
                name,
            )
    if record.id:
        raise _invalid(
            "preparation append requires run, attempt, key and previous position, "
            "with no assigned ID",
            "record.id",
        )
    if record.literal_part is not None and not record.literal_part.data:
        raise _invalid("literal part requires nonempty data", "record.literal_part.data")
    if record.prefix is not None:
        input_rules.check_ids(
            **{
                "record.prefix.run_id": record.prefix.run_id,
                "record.prefix.end_id": record.prefix.end_id,
            }
        )
    variants = sum(
        (
            bool(record.messages),
            record.literal_part is not None,
            record.prefix is not None,
            bool(record.prepared),
        )
    )
    if variants != 1:
        raise _invalid(
            "preparation record requires exactly one complete literal, literal fragment, "
            "history prefix or compiled-start part",
            "record",
        )
    if record.messages and not _valid_json(record.messages):
        raise _invalid("seed literal is not valid JSON", "record.messages")
    size = append_size(command)
    if size > MAX_SEED_COMMAND_BYTES:
        raise _invalid(f"seed command size {size} exceeds {MAX_SEED_COMMAND_BYTES} bytes", "record")


def _valid_json(data: bytes) -> bool:
    """One JSON value, strictly (UTF-8, no NaN or Infinity, nothing after it)."""
    try:
        _JSON.decode(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return True


def validate_operation(operation: PreparationOperation, field: str = "operation") -> None:
    """§9.7.4: agent, run and command IDs are required."""
    input_rules.check_ids(
        **{
            f"{field}.agent_id": operation.agent_id,
            f"{field}.run_id": operation.run_id,
            f"{field}.session_id": operation.session_id,
            f"{field}.command_id": operation.command_id,
        }
    )
    for name in ("agent_id", "run_id", "command_id"):
        if not getattr(operation, name):
            raise _invalid("preparation agent, run and command IDs are required", f"{field}.{name}")


def _operation_of(d: SeedDeclaration) -> PreparationOperation:
    return PreparationOperation(d.agent_id, d.run_id, d.session_id, d.command_id)


def _seed_of(attempt: SeedAttemptRow) -> RunSeed:
    d = attempt.declaration
    source = None
    if attempt.source_end is not None:
        source = HistoryPrefix(
            run_id=d.source_run_id,
            end_id=attempt.source_end,
            exclude_system=d.kind is SeedKind.NEXT_TURN,
            exclude_reasoning=d.exclude_reasoning,
        )
    return RunSeed(declaration=d, source=source, end_id=str(attempt.seed_end_id))


def _preparation_of(attempt: SeedAttemptRow) -> RunPreparation:
    return RunPreparation(
        seed=_seed_of(attempt), end_id=str(attempt.end_id), prepared_bytes=attempt.prepared_bytes
    )


async def _owner_alive(tx: Transaction, session_id: str, *, for_update: bool = False) -> None:
    """A sessionful seed's session exists and is not purged (ended is fine)."""
    if session_id:
        existing_session(await tx.session(session_id, for_update=for_update), session_id)


def _position(text: str, low: int, high: int, run_id: str) -> int:
    """``after_id``: empty (``low``) or a canonical decimal in (low, high]."""
    if not text:
        return low
    value = paging.parse_record_id(text)
    if value is None or str(value) != text or not low < value <= high:
        raise InvalidTranscriptPositionError(run_id=run_id, field="after_id")
    return value


class Seeds(Section):
    """The seed and preparation methods of §9.7 over a ``Database``."""

    async def begin_run_seed(self, declaration: SeedDeclaration) -> RunSeed:
        """§9.7.1."""
        validate_declaration(declaration)
        d = declaration
        now = self._clock()

        async def tx_fn(tx: Transaction) -> RunSeed:
            await _owner_alive(tx, d.session_id, for_update=True)
            operation = _operation_of(d)
            recorded = await tx.lock_seed_operation(d.run_id, operation, now)
            assert recorded is not None
            if recorded.operation != operation:
                raise SeedConflictError(run_id=d.run_id, session_id=d.session_id)
            existing = await tx.seed_attempt(d.run_id, d.attempt_id, recorded)
            if existing is not None:
                if existing.state == ABANDONED:
                    raise PreparationAbandonedError(run_id=d.run_id, session_id=d.session_id)
                if existing.declaration != d:
                    raise SeedConflictError(run_id=d.run_id, session_id=d.session_id)
                return _seed_of(existing)
            if recorded.published_attempt_id is not None:
                raise SeedConflictError(run_id=d.run_id, session_id=d.session_id)
            if await tx.run(d.run_id) is not None or await tx.run_purged(d.run_id):
                raise RunConflictError(run_id=d.run_id, session_id=d.session_id)
            source_end = await _source_end(tx, d)
            attempt = SeedAttemptRow(
                declaration=d,
                source_end=source_end,
                state=OPEN,
                end_id=0,
                seed_end_id=0,
                prepared_bytes=0,
                has_source=False,
                literal_open=False,
                created_at=now,
            )
            await tx.insert_seed_attempt(attempt)
            return _seed_of(attempt)

        return await self._db.write(tx_fn)

    async def append_run_seed(self, command: SeedAppend) -> str:
        """§9.7.2: the record's ID."""
        validate_append(command)
        run_id, attempt_id = command.run_id, command.attempt_id

        async def tx_fn(tx: Transaction) -> str:
            attempt = await _live_attempt(tx, run_id, attempt_id, self._clock())
            record = command.record
            stored = await tx.seed_record_by_key(run_id, attempt_id, record.key)
            if stored is not None:
                if stored.record != replace(record, id=stored.record.id):
                    raise SeedConflictError(run_id=run_id)
                return stored.record.id
            if (
                attempt.state == PUBLISHED
                or record.previous_id != str(attempt.end_id)
                or (attempt.literal_open and record.literal_part is None)
                or (attempt.prepared_bytes > 0 and not record.prepared)
                or (
                    record.prefix is not None
                    and (attempt.has_source or record.prefix != _seed_of(attempt).source)
                )
            ):
                raise SeedConflictError(run_id=run_id)
            record_id = attempt.end_id + 1
            accepted = replace(record, id=str(record_id))
            size = record_size(accepted)
            page = page_size([size], accepted.id)
            if page > MAX_SEED_PAGE_BYTES:
                raise _invalid(
                    f"seed page size {page} exceeds {MAX_SEED_PAGE_BYTES} bytes", "record"
                )
            await tx.insert_seed_record(run_id, attempt_id, StoredSeedRecord(accepted, size))
            await tx.update_seed_attempt(
                replace(
                    attempt,
                    end_id=record_id,
                    seed_end_id=attempt.seed_end_id if record.prepared else record_id,
                    prepared_bytes=attempt.prepared_bytes + len(record.prepared),
                    has_source=attempt.has_source or record.prefix is not None,
                    literal_open=record.literal_part is not None and not record.literal_part.final,
                )
            )
            return accepted.id

        return await self._db.write(tx_fn)

    async def publish_run_seed(self, publication: SeedPublication) -> None:
        """§9.7.3."""
        p = publication
        input_rules.check_ids(
            run_id=p.run_id,
            attempt_id=p.attempt_id,
            seed_end_id=p.seed_end_id,
            end_id=p.end_id,
        )

        async def tx_fn(tx: Transaction) -> None:
            attempt = await _live_attempt(tx, p.run_id, p.attempt_id, self._clock())
            if (
                p.seed_end_id != str(attempt.seed_end_id)
                or p.end_id != str(attempt.end_id)
                or p.prepared_bytes <= 0
                or p.prepared_bytes != attempt.prepared_bytes
                or (attempt.source_end is not None and not attempt.has_source)
                or attempt.literal_open
            ):
                raise SeedConflictError(run_id=p.run_id)
            recorded = await tx.seed_operation(p.run_id)
            assert recorded is not None
            if recorded.published_attempt_id is not None:
                if recorded.published_attempt_id != p.attempt_id:
                    raise SeedConflictError(run_id=p.run_id)
                return
            await tx.update_seed_attempt(replace(attempt, state=PUBLISHED))
            await tx.publish_seed(p.run_id, p.attempt_id)

        await self._db.write(tx_fn)

    async def find_run_preparation(self, operation: PreparationOperation) -> RunPreparation | None:
        """§9.7.4: the accepted preparation, or None."""
        validate_operation(operation)

        async def tx_fn(tx: Transaction) -> RunPreparation | None:
            return await _accepted(tx, operation)

        return await self._db.read(tx_fn)

    async def settle_run_preparation(
        self, operation: PreparationOperation, attempt_id: str
    ) -> RunPreparation | None:
        """§9.7.5: the accepted preparation, or None with the attempt abandoned."""
        validate_operation(operation)
        input_rules.check_id(attempt_id, "attempt_id")
        if not attempt_id:
            raise _invalid("preparation attempt ID is required", "attempt_id")
        now = self._clock()
        run_id = operation.run_id

        async def tx_fn(tx: Transaction) -> RunPreparation | None:
            await _owner_alive(tx, operation.session_id, for_update=True)
            recorded = await tx.lock_seed_operation(run_id, operation, now)
            assert recorded is not None
            if recorded.operation != operation:
                raise SeedConflictError(run_id=run_id, session_id=operation.session_id)
            if recorded.published_attempt_id is not None:
                published = await tx.seed_attempt(run_id, recorded.published_attempt_id, recorded)
                assert published is not None
                return _preparation_of(published)
            attempt = await tx.seed_attempt(run_id, attempt_id, recorded)
            if attempt is None:
                unseen = SeedDeclaration(
                    agent_id=operation.agent_id,
                    run_id=run_id,
                    session_id=operation.session_id,
                    command_id=operation.command_id,
                    attempt_id=attempt_id,
                    kind=None,
                )
                await tx.insert_seed_attempt(
                    SeedAttemptRow(unseen, None, ABANDONED, 0, 0, 0, False, False, now)
                )
            elif attempt.state != ABANDONED:
                await tx.update_seed_attempt(replace(attempt, state=ABANDONED))
            return None

        return await self._db.write(tx_fn)

    async def load_run_seed(self, run_id: str, end_id: str) -> RunSeed:
        """§9.7.6."""
        input_rules.check_ids(run_id=run_id, end_id=end_id)

        async def tx_fn(tx: Transaction) -> RunSeed:
            return _seed_of(
                await _published_seed(tx, run_id, end_id, await tx.seed_operation(run_id))
            )

        return await self._db.read(tx_fn)

    async def list_run_seed_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage:
        """§9.7.7: the history part of a published seed."""
        input_rules.check_ids(run_id=run_id, end_id=end_id, after_id=after_id)
        if limit <= 0:
            raise InvalidTranscriptPositionError(run_id=run_id, field="limit")

        async def tx_fn(tx: Transaction) -> SeedPage:
            attempt = await _published_seed(tx, run_id, end_id, await tx.seed_operation(run_id))
            after = _position(after_id, 0, attempt.seed_end_id, run_id)
            return await _page(tx, attempt, after, attempt.seed_end_id, limit)

        return await self._db.read(tx_fn)

    async def list_run_preparation_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage:
        """§9.7.8: the compiled-start part of an accepted body."""
        input_rules.check_ids(run_id=run_id, end_id=end_id, after_id=after_id)
        if limit <= 0:
            raise InvalidTranscriptPositionError(run_id=run_id, field="limit")

        async def tx_fn(tx: Transaction) -> SeedPage:
            attempt = await _published(tx, run_id)
            if end_id != str(attempt.end_id):
                raise SeedConflictError(run_id=run_id)
            after = _position(after_id, attempt.seed_end_id, attempt.end_id, run_id)
            return await _page(tx, attempt, after, attempt.end_id, limit)

        return await self._db.read(tx_fn)

    async def expire_seed_attempts(self, created_before: Nanos, limit: int) -> tuple[int, bool]:
        """Deletes open and abandoned attempts begun before ``created_before``
        (docs/configuration.md ``--seed-attempt-ttl``), at most ``limit``, each
        re-checked under its run's operation lock. Returns how many, and
        whether more may remain."""

        async def find(tx: Transaction) -> list[tuple[str, str]]:
            return await tx.expired_seed_attempts(created_before, limit)

        # A read first: a pass with nothing to expire writes nothing.
        hints = await self._db.read(find)
        if not hints:
            return 0, False

        async def tx_fn(tx: Transaction) -> tuple[int, bool]:
            expired = 0
            for run_id, attempt_id in hints:
                await tx.lock_seed_operation(run_id, None, created_before)
                attempt = await tx.seed_attempt(run_id, attempt_id)
                if attempt is None or attempt.state == PUBLISHED:
                    continue
                if attempt.created_at >= created_before:
                    continue
                await tx.delete_seed_attempt(run_id, attempt_id)
                expired += 1
            return expired, len(hints) == limit

        return await self._db.write(tx_fn)


async def _live_attempt(
    tx: Transaction, run_id: str, attempt_id: str, now: Nanos
) -> SeedAttemptRow:
    """The attempt, its run's operation locked: it exists (SEED_NOT_FOUND), its
    session is alive, and it is not abandoned."""
    if await tx.lock_seed_operation(run_id, None, now) is None:
        raise SeedNotFoundError(run_id=run_id)
    attempt = await tx.seed_attempt(run_id, attempt_id)
    if attempt is None:
        raise SeedNotFoundError(run_id=run_id)
    await _owner_alive(tx, attempt.declaration.session_id)
    if attempt.state == ABANDONED:
        raise PreparationAbandonedError(run_id=run_id, session_id=attempt.declaration.session_id)
    return attempt


async def _source_end(tx: Transaction, d: SeedDeclaration) -> str | None:
    """§9.7.1 step 6: the source's end record, or None for a literal."""
    if d.kind is SeedKind.LITERAL:
        return None
    source = await tx.run(d.source_run_id)
    if source is None:
        raise RunNotFoundError(run_id=d.source_run_id, session_id=d.session_id)
    if source.session_id != d.session_id or source.agent_id != d.agent_id:
        raise RunRecordOwnerMismatchError(run_id=d.source_run_id, session_id=d.session_id)
    expected = RunStatus.SUSPENDED if d.kind is SeedKind.CONTINUATION else RunStatus.COMPLETED
    if source.status is not expected:
        raise _invalid(
            f"history source {quote(d.source_run_id)} has status {quote(source.status.value)}, "
            f"want {quote(expected.value)}",
            "declaration.source_run_id",
        )
    if d.kind is SeedKind.NEXT_TURN:
        terminal = await tx.record_by_key(d.source_run_id, source.keys.terminal)
        if terminal is None:
            raise _invalid(
                f"completed history source {quote(d.source_run_id)} has no terminal record",
                "declaration.source_run_id",
            )
        return str(terminal.id)
    position = paging.parse_record_id(d.source_end_id)
    if (
        position is None
        or str(position) != d.source_end_id
        or await tx.record_by_id(d.source_run_id, position) is None
    ):
        raise InvalidTranscriptPositionError(
            run_id=d.source_run_id, session_id=d.session_id, field="declaration.source_end_id"
        )
    return d.source_end_id


async def _accepted(tx: Transaction, operation: PreparationOperation) -> RunPreparation | None:
    """§9.7.4's checks and value, in ``tx``."""
    await _owner_alive(tx, operation.session_id)
    recorded = await tx.seed_operation(operation.run_id)
    if recorded is None:
        return None
    if recorded.operation != operation:
        raise SeedConflictError(run_id=operation.run_id, session_id=operation.session_id)
    if recorded.published_attempt_id is None:
        return None
    attempt = await tx.seed_attempt(operation.run_id, recorded.published_attempt_id, recorded)
    assert attempt is not None
    return _preparation_of(attempt)


async def _published(tx: Transaction, run_id: str) -> SeedAttemptRow:
    """The run's accepted attempt: none is SEED_NOT_FOUND (as goa-ai's own
    store answers, also while an attempt is uploading); its session alive."""
    return await _published_of(tx, run_id, await tx.seed_operation(run_id))


async def _published_of(
    tx: Transaction, run_id: str, recorded: SeedOperationRow | None, *, alive: str = ""
) -> SeedAttemptRow:
    """``_published`` from the run's operation ``recorded`` the caller read.
    ``alive``: a session the caller found in this transaction (not read again)."""
    if recorded is None or recorded.published_attempt_id is None:
        raise SeedNotFoundError(run_id=run_id)
    attempt = await tx.seed_attempt(run_id, recorded.published_attempt_id, recorded)
    assert attempt is not None
    if not alive or attempt.declaration.session_id != alive:
        await _owner_alive(tx, attempt.declaration.session_id)
    return attempt


async def _published_seed(
    tx: Transaction,
    run_id: str,
    end_id: str,
    recorded: SeedOperationRow | None,
    *,
    alive: str = "",
) -> SeedAttemptRow:
    """§9.7.6: the accepted attempt whose history ends at ``end_id``, from
    the run's operation ``recorded`` (the caller holds its lock)."""
    attempt = await _published_of(tx, run_id, recorded, alive=alive)
    if end_id != str(attempt.seed_end_id):
        raise SeedConflictError(run_id=run_id, session_id=attempt.declaration.session_id)
    return attempt


async def _page(
    tx: Transaction, attempt: SeedAttemptRow, after: int, end: int, limit: int
) -> SeedPage:
    """Records after ``after`` through ``end``: at most min(limit, 512), and a
    page (its possible next cursor included) within ``MAX_SEED_PAGE_BYTES``."""
    d = attempt.declaration
    limit = min(limit, SEED_PAGE_RECORDS)
    sizes = await tx.seed_record_sizes(d.run_id, d.attempt_id, after, end, limit)
    taken: list[int] = []
    for index, size in enumerate(sizes):
        cursor = str(after + index + 1)
        if page_size([*taken, size], cursor) > MAX_SEED_PAGE_BYTES:
            if not taken:
                raise _invalid(f"seed page size exceeds {MAX_SEED_PAGE_BYTES} bytes", "after_id")
            break
        taken.append(size)
    records = await tx.seed_records(d.run_id, d.attempt_id, after, after + len(taken))
    last = after + len(taken)
    more = last < end
    return SeedPage(
        records=tuple(stored.record for stored in records),
        next_cursor=str(last) if more and taken else "",
    )


async def check_start_seed(
    tx: Transaction,
    run: RunStart,
    seed_end_id: str,
    locked: SeedOperationRow | None,
    *,
    alive: str = "",
) -> None:
    """§9.7.9: a current-generation start attaches its run's published seed:
    one exists (SEED_NOT_FOUND), ends at ``seed_end_id`` (SEED_CONFLICT), has the
    start's agent and session (RUN_RECORD_OWNER_MISMATCH), and is a
    continuation exactly when the start continues its source (SEED_CONFLICT).
    ``locked`` is what ``lock_seed_operation`` of the run returned; ``alive``
    a session the caller found, under its lock, in this transaction."""
    attempt = await _published_seed(tx, run.run_id, seed_end_id, locked, alive=alive)
    d = attempt.declaration
    if d.agent_id != run.agent_id or d.session_id != run.session_id:
        field = "run.agent_id" if d.agent_id != run.agent_id else "run.session_id"
        raise RunRecordOwnerMismatchError(run_id=run.run_id, session_id=run.session_id, field=field)
    continuation = d.kind is SeedKind.CONTINUATION
    if continuation != bool(run.predecessor_run_id) or (
        continuation and d.source_run_id != run.predecessor_run_id
    ):
        raise SeedConflictError(run_id=run.run_id, session_id=run.session_id)
