"""Run starts (docs/contract.md §9.2, §10.2): root and child runs of a session,
sessionless one-shot runs and their children, continuations, and their
retries (§8).

Each command is of one generation (D1), told by its ``request_digest``: empty
is seed-era, 32 bytes is current. A current start binds its digest to the run
(§10.6), keeps a stopped run running with an intent record (§10.1), may
continue a child under another execution parent and claims its predecessor's
single successor slot (§10.2). Where both generations meet one run, the
run's own start decides (the table in §10.7).

A current start attaches its run's published seed (§9.7.9); a seed-era
start never looks at seeds.

Lock order: the session first, then the run's seed lock, then a parent run,
then the run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from runstore.contract import lifecycle
from runstore.contract.errors import (
    ContinuationMismatchError,
    CorruptStateError,
    ErrorContext,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunPurgedError,
    RunRecordOwnerMismatchError,
    RunSessionMismatchError,
    RunstoreError,
    SessionNotFoundError,
    SessionPurgedError,
    quote,
)
from runstore.contract.model import (
    DIGEST_BYTES,
    NO_RECORD,
    AppendResult,
    RunStartOutcome,
    RunStatus,
    SessionStatus,
)
from runstore.server.core import input_rules, validation
from runstore.server.core.checks import (
    append_new,
    check_record_owner,
    error_context,
    existing_session,
    missing_lifecycle_record,
    same_as_stored,
)
from runstore.server.core.model import (
    ChildRunStart,
    LifecycleKeys,
    OneShotChildRunStart,
    OneShotRunStart,
    RecordDraft,
    RootRunStart,
    RunChange,
    RunRecord,
    RunStart,
    RunStartResult,
    RunState,
    Session,
)
from runstore.server.core.ports import PURGED, Transaction
from runstore.server.core.section import Section
from runstore.server.core.seeds import check_start_seed


class Starts(Section):
    """The four engine starts of §9.2 over a ``Database``, in both generations."""

    async def start_root_run(self, cmd: RootRunStart) -> RunStartResult:
        """§9.2.1: a seed-era stopped start closes the run canceled; a current
        one stores the ``session_ended`` intent and leaves it running (§10.1)."""
        input_rules.check_run_start(
            cmd.run, started=cmd.started, canceled=cmd.canceled, cancellation=cmd.cancellation
        )
        run, digest = cmd.run, cmd.request_digest
        current = validation.check_request_digest(digest, run)
        started, ended = validation.check_root_run_start(
            run, cmd.started, cmd.canceled, current=current, cancellation=cmd.cancellation
        )
        if not run.predecessor_run_id and not current:
            new_run = self._new_run(run, RunStartOutcome.PROCEED, None, started, ended, digest)
            record_id = await self._db.start_if_new(new_run, started)
            if record_id is not None:
                started_result = AppendResult(str(record_id), True, SessionStatus.ACTIVE)
                return RunStartResult(RunStartOutcome.PROCEED, RunStatus.RUNNING, started_result)

        async def tx_fn(tx: Transaction) -> RunStartResult:
            session = await _lock_session_for_start(tx, run)
            await self._attach_seed(tx, run, current, session)
            predecessor = await _check_continuation(tx, run, None, current)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                return await _replay_session_start(
                    tx, stored, run, None, started, ended, digest, predecessor
                )
            await _check_not_purged(tx, run)
            if session is None:
                raise SessionNotFoundError(run_id=run.run_id, session_id=run.session_id)
            return await self._create_session_run(
                tx, run, session, None, started, ended, digest, predecessor
            )

        return await self._db.write(tx_fn)

    async def start_child_run(self, cmd: ChildRunStart) -> RunStartResult:
        """§9.2.2: the link on the parent and the child's start in one
        transaction; a seed-era first start without predecessor first tries
        the common case's one write (``fast_paths.CHILD_START``)."""
        input_rules.check_run_start(
            cmd.run,
            parent_linked=cmd.parent_linked,
            started=cmd.started,
            canceled=cmd.canceled,
            cancellation=cmd.cancellation,
        )
        run, digest = cmd.run, cmd.request_digest
        current = validation.check_request_digest(digest, run)
        link, started, ended = validation.check_child_run_start(
            run,
            cmd.parent_linked,
            cmd.started,
            cmd.canceled,
            current=current,
            cancellation=cmd.cancellation,
        )
        if not run.predecessor_run_id and not current:
            new_run = self._new_run(run, RunStartOutcome.PROCEED, link, started, ended, digest)
            ids = await self._db.start_child_if_new(new_run, link, started)
            if ids is not None:
                link_id, started_id = ids
                return RunStartResult(
                    RunStartOutcome.PROCEED,
                    RunStatus.RUNNING,
                    AppendResult(str(started_id), True, SessionStatus.ACTIVE),
                    parent_record=AppendResult(str(link_id), True, SessionStatus.ACTIVE),
                )

        async def tx_fn(tx: Transaction) -> RunStartResult:
            session = await _lock_session_for_start(tx, run)
            await self._attach_seed(tx, run, current, session)
            predecessor = await _check_continuation(tx, run, link, current)
            if current:
                # A closed child proves its own stored link (§10.6), so the
                # proposed link is checked against the parent only on the
                # paths that write or re-append it.
                await tx.run(link.run_id, for_update=True)
                stored = await tx.run(run.run_id, for_update=True)
                if stored is not None:
                    return await _replay_session_start(
                        tx, stored, run, link, started, ended, digest, predecessor
                    )
                parent, stored_link = await _check_parent_link(tx, link)
            else:
                parent, stored_link = await _check_parent_link(tx, link)
                stored = await tx.run(run.run_id, for_update=True)
                if stored is not None:
                    return await _replay_session_start(
                        tx, stored, run, link, started, ended, digest, predecessor
                    )
            await _check_not_purged(tx, run)
            if session is None:
                raise SessionNotFoundError(run_id=run.run_id, session_id=run.session_id)
            if parent.session_id != run.session_id:
                raise RunSessionMismatchError(run_id=run.run_id, session_id=run.session_id)
            if parent.status.is_terminal:
                raise RunNotActiveError(run_id=parent.run_id, session_id=parent.session_id)
            _check_link_is_new(stored_link, link)
            return await self._create_session_run(
                tx, run, session, link, started, ended, digest, predecessor
            )

        return await self._db.write(tx_fn)

    async def start_one_shot_run(self, cmd: OneShotRunStart) -> RunStartResult:
        """§9.2.3: a sessionless run; no session is created or joined. A
        seed-era start first tries the common case's one write
        (``fast_paths.ONE_SHOT_START``)."""
        input_rules.check_run_start(cmd.run, started=cmd.started)
        run, digest = cmd.run, cmd.request_digest
        current = validation.check_request_digest(digest, run)
        started = validation.check_one_shot_run_start(run, cmd.started)
        if not current:
            new_run = self._new_run(run, RunStartOutcome.PROCEED, None, started, None, digest)
            record_id = await self._db.start_if_new(new_run, started)
            if record_id is not None:
                started_result = AppendResult(str(record_id), True, None)
                return RunStartResult(RunStartOutcome.PROCEED, RunStatus.RUNNING, started_result)

        async def tx_fn(tx: Transaction) -> RunStartResult:
            await self._attach_seed(tx, run, current, None)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                await _check_engine_run(tx, stored)
                if _bound_and_closed(stored, digest, current):
                    return await _closed_start(tx, stored, run, None, started, None)
                _check_sessionless_retry(stored, run, None, started)
                return RunStartResult(
                    RunStartOutcome.PROCEED, stored.status, await _replay_record(tx, started, None)
                )
            await _check_not_purged(tx, run)
            new_run = self._new_run(run, RunStartOutcome.PROCEED, None, started, None, digest)
            await tx.insert_run(new_run)
            return RunStartResult(
                RunStartOutcome.PROCEED, RunStatus.RUNNING, await append_new(tx, started, None)
            )

        return await self._db.write(tx_fn)

    async def start_one_shot_child_run(self, cmd: OneShotChildRunStart) -> RunStartResult:
        """§9.2.4: a sessionless child of a running sessionless parent. A
        seed-era start first tries the common case's one write
        (``fast_paths.ONE_SHOT_CHILD_START``)."""
        input_rules.check_run_start(cmd.run, parent_linked=cmd.parent_linked, started=cmd.started)
        run, digest = cmd.run, cmd.request_digest
        current = validation.check_request_digest(digest, run)
        link, started = validation.check_one_shot_child_run_start(
            run, cmd.parent_linked, cmd.started
        )
        if not current:
            new_run = self._new_run(run, RunStartOutcome.PROCEED, link, started, None, digest)
            ids = await self._db.start_child_if_new(new_run, link, started)
            if ids is not None:
                link_id, started_id = ids
                return RunStartResult(
                    RunStartOutcome.PROCEED,
                    RunStatus.RUNNING,
                    AppendResult(str(started_id), True, None),
                    parent_record=AppendResult(str(link_id), True, None),
                )

        async def tx_fn(tx: Transaction) -> RunStartResult:
            await self._attach_seed(tx, run, current, None)
            parent = await tx.run(run.parent_run_id, for_update=True)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                await _check_engine_run(tx, stored)
                if _bound_and_closed(stored, digest, current):
                    return await _closed_start(tx, stored, run, link, started, None)
                _check_sessionless_retry(stored, run, link, started)
                parent_record = await _replay_record(tx, link, None)
                return RunStartResult(
                    RunStartOutcome.PROCEED,
                    stored.status,
                    await _replay_record(tx, started, None),
                    parent_record=parent_record,
                )
            await _check_not_purged(tx, run)
            if parent is None:
                raise RunNotFoundError(run_id=run.parent_run_id)
            if parent.session_id:
                raise RunSessionMismatchError(run_id=run.run_id, session_id=parent.session_id)
            if parent.status.is_terminal:
                raise RunNotActiveError(run_id=parent.run_id)
            if link.agent_id != parent.agent_id:
                raise RunRecordOwnerMismatchError(
                    run_id=link.run_id, event_key=link.event_key, field="parent_linked.agent_id"
                )
            _, stored_link = await _check_parent_link(tx, link, parent)
            _check_link_is_new(stored_link, link)
            await tx.insert_run(
                self._new_run(run, RunStartOutcome.PROCEED, link, started, None, digest)
            )
            parent_record = await append_new(tx, link, None)
            return RunStartResult(
                RunStartOutcome.PROCEED,
                RunStatus.RUNNING,
                await append_new(tx, started, None),
                parent_record=parent_record,
            )

        return await self._db.write(tx_fn)

    async def _attach_seed(
        self, tx: Transaction, run: RunStart, current: bool, session: Session | None
    ) -> None:
        """§9.7.9: a current start, first or retry, attaches its run's exact
        published seed, under the run's seed lock (which orders it against
        BeginRunSeed of the ID). A seed-era start attaches none (D1).
        ``session``: the run's session as this transaction found and locked
        it, if it did (its existence is then not read again)."""
        if current:
            locked = await tx.lock_seed_operation(run.run_id, None, self._clock())
            alive = run.session_id if session is not None else ""
            await check_start_seed(tx, run, run.seed_end_id, locked, alive=alive)

    def _new_run(
        self,
        run: RunStart,
        outcome: RunStartOutcome,
        link: RecordDraft | None,
        started: RecordDraft,
        ended: RecordDraft | None,
        digest: bytes,
    ) -> RunState:
        """§9.2.1 step 10: RunMeta and lifecycle keys of a first start.

        A stopped start's record fills the terminal slot in the seed era (the
        run is closed canceled) and the cancellation slot in the current
        generation (the run stays running, §10.1)."""
        stop = outcome is RunStartOutcome.STOP
        current = bool(digest)
        ended_key = ended.event_key if stop and ended is not None else ""
        assert run.started_at is not None
        return RunState(
            run_id=run.run_id,
            agent_id=run.agent_id,
            session_id=run.session_id,
            parent_run_id=run.parent_run_id,
            started_at=run.started_at,
            labels=dict(run.labels),
            start_outcome=outcome,
            status=RunStatus.CANCELED if stop and not current else RunStatus.RUNNING,
            cancellation_reason=lifecycle.REASON_SESSION_ENDED if stop else "",
            updated_at=self._clock(),
            keys=LifecycleKeys(
                start=started.event_key,
                parent_link=link.event_key if link is not None else "",
                cancellation=ended_key if current else "",
                terminal="" if current else ended_key,
            ),
            request_digest=digest,
            seed_end_id=run.seed_end_id,
        )

    async def _create_session_run(
        self,
        tx: Transaction,
        run: RunStart,
        session: Session,
        link: RecordDraft | None,
        started: RecordDraft,
        ended: RecordDraft,
        digest: bytes,
        predecessor: RunState | None,
    ) -> RunStartResult:
        """§9.2.1 steps 7–10: decide the outcome once and write the first state.

        A current continuation takes its predecessor's single successor slot
        first (step 9), so that a second successor is refused before anything
        is written. Write order is link (on the parent), run_started, then the
        ended-session record, so the three are contiguous in session order (§6.3).
        """
        outcome = (
            RunStartOutcome.PROCEED
            if session.status is SessionStatus.ACTIVE
            else RunStartOutcome.STOP
        )
        stop = outcome is RunStartOutcome.STOP
        if predecessor is not None and digest:
            if predecessor.successor_run_id:
                raise _successor_taken(run, predecessor)
            await tx.change_run(
                predecessor.run_id,
                RunChange(successor_run_id=run.run_id, updated_at=self._clock()),
            )
        parent_record = await append_new(tx, link, session.status) if link else NO_RECORD
        new_run = self._new_run(run, outcome, link, started, ended, digest)
        await tx.insert_run(new_run)
        started_result = await append_new(tx, started, session.status)
        ended_result = await append_new(tx, ended, session.status) if stop else NO_RECORD
        return _session_start_result(
            outcome, new_run.status, started_result, ended_result, parent_record, bool(digest)
        )


def _session_start_result(
    outcome: RunStartOutcome,
    status: RunStatus,
    started: AppendResult,
    ended: AppendResult,
    parent_record: AppendResult,
    current: bool,
) -> RunStartResult:
    """The ended-session record is ``canceled`` in the seed era and
    ``cancellation`` in the current generation (§3.11)."""
    if current:
        return RunStartResult(
            outcome, status, started, parent_record=parent_record, cancellation=ended
        )
    return RunStartResult(outcome, status, started, canceled=ended, parent_record=parent_record)


def _successor_taken(run: RunStart, predecessor: RunState) -> RunConflictError:
    """§10.2 [N]: the predecessor already has another successor."""
    return RunConflictError(
        run_id=run.run_id,
        session_id=run.session_id,
        details={
            "predecessor_run_id": predecessor.run_id,
            "successor_run_id": predecessor.successor_run_id,
        },
    )


async def _check_engine_run(tx: Transaction, stored: RunState) -> None:
    """§9.2.5: a run StartSynchronousRun created never takes an engine start,
    of either generation, not even one identical to its synchronous start."""
    if await tx.synchronous_run(stored.run_id) is not None:
        raise RunConflictError(run_id=stored.run_id, session_id=stored.session_id)


async def _check_not_purged(tx: Transaction, run: RunStart) -> None:
    """§9.10.2: a first start of a run ID retention deleted is refused, so a
    delayed retry of a purged run's start never re-creates it."""
    if await tx.run_purged(run.run_id):
        raise RunPurgedError(run_id=run.run_id, session_id=run.session_id)


async def _lock_session_for_start(tx: Transaction, run: RunStart) -> Session | None:
    """§9.2.1 step 2, and the lock that orders starts against EndSession (§7.3)."""
    found = await tx.session(run.session_id, for_update=True)
    if found is PURGED:
        raise SessionPurgedError(run_id=run.run_id, session_id=run.session_id)
    assert found is None or isinstance(found, Session)
    return found


async def _live_session_status(tx: Transaction, run: RunState) -> SessionStatus | None:
    """The owning session's status seen in this transaction (§3.9); None when
    sessionless. A tombstoned or missing session fails (§9.3 step 2)."""
    if not run.session_id:
        return None
    return existing_session(await tx.session(run.session_id), run.session_id).status


async def _same_record(tx: Transaction, record: RecordDraft) -> RunRecord | None:
    """``same_as_stored`` with the record read from the transaction."""
    return same_as_stored(await tx.record_by_key(record.run_id, record.event_key), record)


def _check_link_is_new(stored_link: RunRecord | None, link: RecordDraft) -> None:
    """A new child's link must not be stored yet: an identical link without its
    child run means the store lost data."""
    if stored_link is not None:
        raise CorruptStateError("stored parent link has no child run", **error_context(link))


async def _replay_record(
    tx: Transaction, record: RecordDraft, status: SessionStatus | None
) -> AppendResult:
    """§8 rule 3: a retry re-appends each record of the stored outcome; each
    must already be stored exactly."""
    stored = await _same_record(tx, record)
    if stored is None:
        raise missing_lifecycle_record(record)
    return AppendResult(str(stored.id), False, status)


def _same_run_identity(stored: RunState, run: RunStart) -> bool:
    """§8 rule 1: the immutable identity of a start (predecessor excluded: it is
    only in the run_started payload, §3.5)."""
    return (
        stored.run_id == run.run_id
        and stored.agent_id == run.agent_id
        and stored.session_id == run.session_id
        and stored.parent_run_id == run.parent_run_id
        and stored.started_at == run.started_at
        and dict(stored.labels) == dict(run.labels)
        and stored.seed_end_id == run.seed_end_id
    )


async def _replay_session_start(
    tx: Transaction,
    stored: RunState,
    run: RunStart,
    link: RecordDraft | None,
    started: RecordDraft,
    ended: RecordDraft,
    digest: bytes,
    predecessor: RunState | None,
) -> RunStartResult:
    """§9.2.1 retry path of either generation."""
    await _check_engine_run(tx, stored)
    if not digest:
        return await _replay_seed_era_start(tx, stored, run, link, started, ended)
    if predecessor is not None and predecessor.successor_run_id != run.run_id:
        raise _successor_taken(run, predecessor)
    _check_bound_digest(stored, digest)
    if stored.status.is_terminal:
        return await _closed_start(tx, stored, run, link, started, ended)
    keys = stored.keys
    stop = stored.start_outcome is RunStartOutcome.STOP
    if (
        not _same_run_identity(stored, run)
        or started.event_key != keys.start
        or (link is not None and link.event_key != keys.parent_link)
        or (stop and ended.event_key != keys.cancellation)
    ):
        raise RunConflictError(run_id=run.run_id, session_id=run.session_id)
    if link is not None:
        await _check_parent_link(tx, link)
    status = await _live_session_status(tx, stored)
    parent_record = await _replay_record(tx, link, status) if link is not None else NO_RECORD
    started_result = await _replay_record(tx, started, status)
    ended_result = await _replay_record(tx, ended, status) if stop else NO_RECORD
    return _session_start_result(
        stored.start_outcome, stored.status, started_result, ended_result, parent_record, True
    )


async def _replay_seed_era_start(
    tx: Transaction,
    stored: RunState,
    run: RunStart,
    link: RecordDraft | None,
    started: RecordDraft,
    canceled: RecordDraft,
) -> RunStartResult:
    """§9.2.1 retry path [S]: identity, slot keys, then the stored outcome's
    records in order. Current session and run status do not matter. A run a
    current start created is bound to its digest, which this start lacks."""
    keys = stored.keys
    stop = stored.start_outcome is RunStartOutcome.STOP
    if (
        stored.current
        or not _same_run_identity(stored, run)
        or started.event_key != keys.start
        or (link is not None and link.event_key != keys.parent_link)
        or (stop and canceled.event_key != keys.terminal)
    ):
        raise RunConflictError(run_id=run.run_id, session_id=run.session_id)
    status = await _live_session_status(tx, stored)
    parent_record = await _replay_record(tx, link, status) if link is not None else NO_RECORD
    started_result = await _replay_record(tx, started, status)
    canceled_result = await _replay_record(tx, canceled, status) if stop else NO_RECORD
    return RunStartResult(
        stored.start_outcome, stored.status, started_result, canceled_result, parent_record
    )


def _check_bound_digest(stored: RunState, digest: bytes) -> None:
    """§10.6: a current start of an existing run presents the digest its first
    start bound. A seed-era run bound none (D1: a conflict, not corruption); a
    stored digest that is not one is corrupt."""
    context: ErrorContext = {"run_id": stored.run_id, "session_id": stored.session_id}
    if not stored.request_digest:
        raise RunConflictError(**context)
    if len(stored.request_digest) != DIGEST_BYTES or not any(stored.request_digest):
        raise CorruptStateError("stored run has no accepted request digest", **context)
    if stored.request_digest != digest:
        raise RunConflictError(**context)


def _bound_and_closed(stored: RunState, digest: bytes, current: bool) -> bool:
    """A sessionless retry's generation check (§10.6); True when the closed-start
    replay answers it. A seed-era start never reaches a current run."""
    if not current:
        if stored.current:
            raise RunConflictError(run_id=stored.run_id)
        return False
    _check_bound_digest(stored, digest)
    return stored.status.is_terminal


async def _closed_start(
    tx: Transaction,
    meta: RunState,
    run: RunStart,
    link: RecordDraft | None,
    started: RecordDraft,
    ended: RecordDraft | None,
) -> RunStartResult:
    """§10.6: a closed run's own stored proof selects its original records for
    a start with the bound digest, whatever ``started_at`` it proposes. Writes
    nothing; missing or corrupt proof is DATA_LOSS, never a reason to write."""
    context: ErrorContext = {"run_id": meta.run_id, "session_id": meta.session_id}
    status = await _live_session_status(tx, meta)
    original = await _stored_lifecycle_record(tx, meta.run_id, meta.keys.start, context)
    _proof("stored run start", lambda: validation.check_stored_run_start(original, meta), context)
    proposed = dataclasses.replace(run, started_at=original.timestamp)
    if not _same_run_identity(meta, proposed) or not _same_but_time(original, started):
        raise RunConflictError(**context)
    parent_record = NO_RECORD
    if link is not None:
        parent = await tx.run(meta.parent_run_id)
        if parent is None:
            raise RunNotFoundError(run_id=meta.parent_run_id, session_id=meta.session_id)
        stored_link = await _stored_lifecycle_record(
            tx, meta.parent_run_id, meta.keys.parent_link, context
        )
        _proof(
            "stored child link",
            lambda: validation.check_stored_child_link(stored_link, parent, meta),
            context,
        )
        if not _same_but_time(stored_link, link):
            raise RunConflictError(**context)
        parent_record = AppendResult(str(stored_link.id), False, status)
    elif meta.keys.parent_link:
        raise RunConflictError(**context)
    closing = await _stored_lifecycle_record(tx, meta.run_id, meta.keys.terminal, context)
    closing_draft = validation.draft_of(closing)
    if meta.status is RunStatus.SUSPENDED:
        if meta.checkpoint is None or meta.keys.suspension != meta.keys.terminal:
            raise CorruptStateError("stored suspended run has no checkpoint", **context)
        checkpoint = meta.checkpoint
        _proof(
            "stored run closing record",
            lambda: validation.check_suspension(meta.run_id, checkpoint, closing_draft, meta),
            context,
        )
    else:
        _proof(
            "stored run closing record",
            lambda: validation.check_terminal(meta.run_id, meta.status, closing_draft, meta),
            context,
        )
    ended_result = NO_RECORD
    if meta.start_outcome is RunStartOutcome.STOP:
        intent = await _stored_lifecycle_record(tx, meta.run_id, meta.keys.cancellation, context)
        if (
            ended is None
            or not meta.session_id
            or meta.status not in (RunStatus.CANCELED, RunStatus.FAILED)
        ):
            raise RunConflictError(**context)
        _proof(
            "stored stopped-start intent",
            lambda: validation.check_stored_intent(intent, meta),
            context,
        )
        if intent.timestamp != meta.started_at or not _same_but_time(intent, ended):
            raise RunConflictError(**context)
        ended_result = AppendResult(str(intent.id), False, status)
    started_result = AppendResult(str(original.id), False, status)
    return RunStartResult(
        meta.start_outcome,
        meta.status,
        started_result,
        parent_record=parent_record,
        cancellation=ended_result,
    )


async def _stored_lifecycle_record(
    tx: Transaction, run_id: str, key: str, context: ErrorContext
) -> RunRecord:
    """The record a lifecycle slot names; its absence is corruption, never
    permission to write it again (§10.6)."""
    record = await tx.record_by_key(run_id, key) if key else None
    if record is None:
        raise CorruptStateError(
            "stored run is missing a required lifecycle record",
            run_id=run_id,
            session_id=context.get("session_id", ""),
            event_key=key,
        )
    return record


def _proof(what: str, check: Callable[[], object], context: ErrorContext) -> None:
    """Runs a check of stored state; a failure means the store's own data
    breaks the contract (DATA_LOSS), not that the command is wrong."""
    try:
        check()
    except RunstoreError as exc:
        raise CorruptStateError(f"{what}: {exc.message}", **context) from None


def _same_but_time(stored: RunRecord, proposed: RecordDraft) -> bool:
    """§10.6: every field of a record equal but its timestamp, which a new
    execution proposes afresh."""
    return stored.same_as(dataclasses.replace(proposed, timestamp=stored.timestamp))


def _check_sessionless_retry(
    stored: RunState, run: RunStart, link: RecordDraft | None, started: RecordDraft
) -> None:
    """§9.2.3 step 3 / §9.2.4 step 3: identity, outcome and slot keys."""
    if (
        not _same_run_identity(stored, run)
        or stored.start_outcome is not RunStartOutcome.PROCEED
        or started.event_key != stored.keys.start
        or (link is not None and link.event_key != stored.keys.parent_link)
    ):
        raise RunConflictError(run_id=run.run_id)


async def _check_continuation(
    tx: Transaction, run: RunStart, link: RecordDraft | None, current: bool
) -> RunState | None:
    """§10.2: the predecessor is suspended and has the successor's session and
    agent; a seed-era successor also its parent run, a current one its
    topology and, as a child, the parent tool call of its stored link.
    Checked on first starts and retries alike. Returns the predecessor (None
    without one), locked for a current start, which may take its successor slot."""
    pred_id = run.predecessor_run_id
    if not pred_id:
        return None
    pred = await tx.run(pred_id, for_update=current)
    if pred is None:
        raise RunNotFoundError(
            f"continuation predecessor {quote(pred_id)}: run not found",
            run_id=run.run_id,
            details={"predecessor_run_id": pred_id},
        )
    context: ErrorContext = {"run_id": run.run_id, "session_id": run.session_id}
    details = {"predecessor_run_id": pred_id}
    mismatch: str | None = None
    both_children = bool(pred.parent_run_id and run.parent_run_id)
    if pred.status is not RunStatus.SUSPENDED:
        mismatch = f'has status {quote(pred.status)}, want "suspended"'
    elif pred.session_id != run.session_id:
        mismatch = (
            f"session id {quote(pred.session_id)} does not match successor {quote(run.session_id)}"
        )
    elif pred.agent_id != run.agent_id:
        mismatch = f"agent id {quote(pred.agent_id)} does not match successor {quote(run.agent_id)}"
    elif pred.parent_run_id != run.parent_run_id and not (current and both_children):
        mismatch = (
            f"parent run id {quote(pred.parent_run_id)} "
            f"does not match successor {quote(run.parent_run_id)}"
        )
    if mismatch is not None:
        raise ContinuationMismatchError(
            f"continuation predecessor {quote(pred_id)} {mismatch}", **context, details=details
        )
    if current and both_children:
        assert link is not None
        previous_parent = await tx.run(pred.parent_run_id)
        if previous_parent is None:
            raise RunNotFoundError(run_id=pred.parent_run_id, details=details)
        previous = await _stored_lifecycle_record(
            tx, pred.parent_run_id, pred.keys.parent_link, {"run_id": pred_id}
        )
        _proof(
            "continuation predecessor child link",
            lambda: validation.check_stored_child_link(previous, previous_parent, pred),
            {"run_id": pred_id, "session_id": pred.session_id},
        )
        validation.check_continuation_link(previous, link, pred_id)
    return pred


async def _check_parent_link(
    tx: Transaction, link: RecordDraft, parent: RunState | None = None
) -> tuple[RunState, RunRecord | None]:
    """PLC (§9): the parent exists, owns the link, its session is alive, and
    the link's key holds no different record. Returns the parent and the link
    if it is already stored."""
    target = await tx.record_target(link.run_id, link.event_key, for_update=parent is None)
    parent = target.run
    if parent is None:
        raise RunNotFoundError(**error_context(link), field="parent_linked.run_id")
    check_record_owner(link, parent, "parent_linked")
    if parent.session_id:
        existing_session(target.session, parent.session_id)
    return parent, same_as_stored(target.existing, link)
