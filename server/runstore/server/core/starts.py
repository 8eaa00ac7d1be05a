"""Run starts (docs/contract.md §9.2, §10.2): root and child runs of a session,
sessionless one-shot runs and their children, continuations, and their
retries (§8).

Lock order: the session first, then a parent run, then the run."""

from __future__ import annotations

from runstore.contract import lifecycle
from runstore.contract.errors import (
    ContinuationMismatchError,
    CorruptStateError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunPurgedError,
    RunRecordOwnerMismatchError,
    RunSessionMismatchError,
    SessionNotFoundError,
    SessionPurgedError,
    quote,
)
from runstore.contract.model import (
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
    RunRecord,
    RunStart,
    RunStartResult,
    RunState,
    Session,
)
from runstore.server.core.ports import PURGED, Transaction
from runstore.server.core.section import Section


class Starts(Section):
    """The four starts of §9.2 over a ``Database``."""

    async def start_root_run(self, cmd: RootRunStart) -> RunStartResult:
        """§9.2.1 [S]: an ended session stores run_started + canceled run_completed."""
        input_rules.check_run_start(cmd.run, started=cmd.started, canceled=cmd.canceled)
        run = cmd.run
        started, canceled = validation.check_root_run_start(run, cmd.started, cmd.canceled)
        if not run.predecessor_run_id:
            new_run = self._new_run(run, RunStartOutcome.PROCEED, None, started, None)
            record_id = await self._db.start_if_new(new_run, started)
            if record_id is not None:
                started_result = AppendResult(str(record_id), True, SessionStatus.ACTIVE)
                return RunStartResult(RunStartOutcome.PROCEED, started_result)

        async def tx_fn(tx: Transaction) -> RunStartResult:
            session = await _lock_session_for_start(tx, run)
            if run.predecessor_run_id:
                await _check_continuation(tx, run)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                return await _replay_session_start(tx, stored, run, None, started, canceled)
            await _check_not_purged(tx, run)
            if session is None:
                raise SessionNotFoundError(run_id=run.run_id, session_id=run.session_id)
            return await self._create_session_run(tx, run, session, None, started, canceled)

        return await self._db.write(tx_fn)

    async def start_child_run(self, cmd: ChildRunStart) -> RunStartResult:
        """§9.2.2 [S]: the link on the parent and the child's start in one transaction."""
        input_rules.check_run_start(
            cmd.run, parent_linked=cmd.parent_linked, started=cmd.started, canceled=cmd.canceled
        )
        run = cmd.run
        link, started, canceled = validation.check_child_run_start(
            run, cmd.parent_linked, cmd.started, cmd.canceled
        )

        async def tx_fn(tx: Transaction) -> RunStartResult:
            session = await _lock_session_for_start(tx, run)
            if run.predecessor_run_id:
                await _check_continuation(tx, run)
            parent, stored_link = await _check_parent_link(tx, link)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                return await _replay_session_start(tx, stored, run, link, started, canceled)
            await _check_not_purged(tx, run)
            if session is None:
                raise SessionNotFoundError(run_id=run.run_id, session_id=run.session_id)
            if parent.session_id != run.session_id:
                raise RunSessionMismatchError(run_id=run.run_id, session_id=run.session_id)
            if parent.status.is_terminal:
                raise RunNotActiveError(run_id=parent.run_id, session_id=parent.session_id)
            _check_link_is_new(stored_link, link)
            return await self._create_session_run(tx, run, session, link, started, canceled)

        return await self._db.write(tx_fn)

    async def start_one_shot_run(self, cmd: OneShotRunStart) -> RunStartResult:
        """§9.2.3: a sessionless run; no session is created or joined."""
        input_rules.check_run_start(cmd.run, started=cmd.started)
        run = cmd.run
        started = validation.check_one_shot_run_start(run, cmd.started)

        async def tx_fn(tx: Transaction) -> RunStartResult:
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                # §9.2.5: a synchronous run never takes an engine start.
                if await tx.synchronous_run(run.run_id) is not None:
                    raise RunConflictError(run_id=run.run_id)
                _check_sessionless_retry(stored, run, None, started)
                return RunStartResult(
                    RunStartOutcome.PROCEED, await _replay_record(tx, started, None)
                )
            await _check_not_purged(tx, run)
            await tx.insert_run(self._new_run(run, RunStartOutcome.PROCEED, None, started, None))
            return RunStartResult(RunStartOutcome.PROCEED, await append_new(tx, started, None))

        return await self._db.write(tx_fn)

    async def start_one_shot_child_run(self, cmd: OneShotChildRunStart) -> RunStartResult:
        """§9.2.4: a sessionless child of a running sessionless parent."""
        input_rules.check_run_start(cmd.run, parent_linked=cmd.parent_linked, started=cmd.started)
        run = cmd.run
        link, started = validation.check_one_shot_child_run_start(
            run, cmd.parent_linked, cmd.started
        )

        async def tx_fn(tx: Transaction) -> RunStartResult:
            parent = await tx.run(run.parent_run_id, for_update=True)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                _check_sessionless_retry(stored, run, link, started)
                parent_record = await _replay_record(tx, link, None)
                return RunStartResult(
                    RunStartOutcome.PROCEED,
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
            await tx.insert_run(self._new_run(run, RunStartOutcome.PROCEED, link, started, None))
            parent_record = await append_new(tx, link, None)
            return RunStartResult(
                RunStartOutcome.PROCEED,
                await append_new(tx, started, None),
                parent_record=parent_record,
            )

        return await self._db.write(tx_fn)

    def _new_run(
        self,
        run: RunStart,
        outcome: RunStartOutcome,
        link: RecordDraft | None,
        started: RecordDraft,
        canceled: RecordDraft | None,
    ) -> RunState:
        """§9.2.1 step 10: RunMeta and lifecycle keys of a first start."""
        stop = outcome is RunStartOutcome.STOP
        assert run.started_at is not None
        return RunState(
            run_id=run.run_id,
            agent_id=run.agent_id,
            session_id=run.session_id,
            parent_run_id=run.parent_run_id,
            started_at=run.started_at,
            labels=dict(run.labels),
            start_outcome=outcome,
            status=RunStatus.CANCELED if stop else RunStatus.RUNNING,
            cancellation_reason=lifecycle.REASON_SESSION_ENDED if stop else "",
            updated_at=self._clock(),
            keys=LifecycleKeys(
                start=started.event_key,
                parent_link=link.event_key if link is not None else "",
                terminal=canceled.event_key if stop and canceled is not None else "",
            ),
        )

    async def _create_session_run(
        self,
        tx: Transaction,
        run: RunStart,
        session: Session,
        link: RecordDraft | None,
        started: RecordDraft,
        canceled: RecordDraft,
    ) -> RunStartResult:
        """§9.2.1 steps 7–10: decide the outcome once and write the first state.

        Write order is link (on the parent), run_started, then the ended-session
        record, so the three are contiguous in session order (§6.3).
        """
        outcome = (
            RunStartOutcome.PROCEED
            if session.status is SessionStatus.ACTIVE
            else RunStartOutcome.STOP
        )
        stop = outcome is RunStartOutcome.STOP
        parent_record = await append_new(tx, link, session.status) if link else NO_RECORD
        await tx.insert_run(self._new_run(run, outcome, link, started, canceled))
        started_result = await append_new(tx, started, session.status)
        canceled_result = await append_new(tx, canceled, session.status) if stop else NO_RECORD
        return RunStartResult(outcome, started_result, canceled_result, parent_record)


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
    )


async def _replay_session_start(
    tx: Transaction,
    stored: RunState,
    run: RunStart,
    link: RecordDraft | None,
    started: RecordDraft,
    canceled: RecordDraft,
) -> RunStartResult:
    """§9.2.1 retry path [S]: identity, slot keys, then the stored outcome's
    records in order. Current session and run status do not matter."""
    keys = stored.keys
    stop = stored.start_outcome is RunStartOutcome.STOP
    if (
        not _same_run_identity(stored, run)
        or started.event_key != keys.start
        or (link is not None and link.event_key != keys.parent_link)
        or (stop and canceled.event_key != keys.terminal)
    ):
        raise RunConflictError(run_id=run.run_id, session_id=run.session_id)
    status = await _live_session_status(tx, stored)
    parent_record = await _replay_record(tx, link, status) if link is not None else NO_RECORD
    started_result = await _replay_record(tx, started, status)
    canceled_result = await _replay_record(tx, canceled, status) if stop else NO_RECORD
    return RunStartResult(stored.start_outcome, started_result, canceled_result, parent_record)


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


async def _check_continuation(tx: Transaction, run: RunStart) -> None:
    """§10.2 [S]: the predecessor is suspended and has the successor's session,
    agent and parent. Checked on first starts and retries alike."""
    pred_id = run.predecessor_run_id
    pred = await tx.run(pred_id)
    if pred is None:
        raise RunNotFoundError(
            f"continuation predecessor {quote(pred_id)}: run not found",
            run_id=run.run_id,
            details={"predecessor_run_id": pred_id},
        )
    mismatch: str | None = None
    if pred.status is not RunStatus.SUSPENDED:
        mismatch = f'has status {quote(pred.status)}, want "suspended"'
    elif pred.session_id != run.session_id:
        mismatch = (
            f"session id {quote(pred.session_id)} does not match successor {quote(run.session_id)}"
        )
    elif pred.agent_id != run.agent_id:
        mismatch = f"agent id {quote(pred.agent_id)} does not match successor {quote(run.agent_id)}"
    elif pred.parent_run_id != run.parent_run_id:
        mismatch = (
            f"parent run id {quote(pred.parent_run_id)} "
            f"does not match successor {quote(run.parent_run_id)}"
        )
    if mismatch is not None:
        raise ContinuationMismatchError(
            f"continuation predecessor {quote(pred_id)} {mismatch}",
            run_id=run.run_id,
            session_id=run.session_id,
            details={"predecessor_run_id": pred_id},
        )


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
