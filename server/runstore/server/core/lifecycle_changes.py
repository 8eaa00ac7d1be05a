"""Lifecycle changes and their repairs (docs/contract.md §9.4, §9.5): a run's
cancellation, suspension and terminal record, each written with the run's new
state in one transaction, and the repairs that never overwrite an ending.

Each command's common case is first tried as one write of the database's
(``core.fast_paths``: ``CANCEL``, ``SUSPEND``, ``END``); the full rules run
when it writes nothing."""

from __future__ import annotations

from runstore.contract import lifecycle
from runstore.contract.errors import (
    RunCancellationConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunstoreError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    SessionPurgedError,
)
from runstore.contract.model import (
    TERMINAL_COMMAND_STATUSES,
    AppendResult,
    Checkpoint,
    RunFailureSummary,
    RunRepairOutcome,
    RunRepairResult,
    RunStartOutcome,
    RunStatus,
    SessionStatus,
)
from runstore.server.core import fast_paths, input_rules, validation
from runstore.server.core.checks import (
    append_new,
    error_context,
    missing_lifecycle_record,
    same_as_stored,
)
from runstore.server.core.model import (
    GuardedChange,
    Nanos,
    RecordDraft,
    RunCancellation,
    RunChange,
    RunEnding,
    RunRecord,
    RunState,
    RunSuspension,
    RunTerminal,
    Session,
)
from runstore.server.core.ports import PURGED, Transaction
from runstore.server.core.section import Section


class LifecycleChanges(Section):
    """The lifecycle commands of §9.4 and the repairs of §9.5."""

    async def record_run_cancellation(self, cmd: RunCancellation) -> AppendResult:
        """§9.4.1: the first reason is permanent; the status does not change."""
        input_rules.check_ids(run_id=cmd.run_id)
        input_rules.check_text(cmd.reason, "reason")
        input_rules.check_record(cmd.record, "record")

        stored = await self._change_if_running(run_cancelling(cmd, self._clock()))
        if stored is not None:
            return stored

        async def tx_fn(tx: Transaction) -> AppendResult:
            run, status, existing = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            record = validation.check_cancellation(cmd.run_id, cmd.reason, cmd.record, run)
            if run.cancellation_reason and run.cancellation_reason != cmd.reason:
                raise RunCancellationConflictError(**error_context(record))
            stored = same_as_stored(existing, record)
            if not run.keys.cancellation and run.status.is_terminal:
                raise RunNotActiveError(**error_context(record))
            if run.keys.cancellation and run.keys.cancellation != record.event_key:
                raise RunCancellationConflictError(**error_context(record))
            if stored is not None:
                return AppendResult(str(stored.id), False, status)
            if not run.cancellation_reason:
                await tx.change_run(
                    run.run_id,
                    RunChange(
                        cancellation_reason=cmd.reason,
                        updated_at=self._clock(),
                        cancellation_key=record.event_key,
                    ),
                )
            return await append_new(tx, record, status)

        return await self._db.write(tx_fn)

    async def record_run_suspension(self, cmd: RunSuspension) -> AppendResult:
        """§9.4.2: checkpoint, run_suspended and status suspended together."""
        _check_suspension_text(cmd)
        stored = await self._change_if_running(run_suspending(cmd, self._clock()))
        if stored is not None:
            return stored

        async def tx_fn(tx: Transaction) -> AppendResult:
            run, status, existing = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            checkpoint, record = validation.check_suspension(
                cmd.run_id, cmd.suspension, cmd.record, run
            )
            return await self._suspend(tx, run, status, checkpoint, record, existing)

        return await self._db.write(tx_fn)

    async def _change_if_running(self, change: GuardedChange | None) -> AppendResult | None:
        """The common case's one write (``Database.change_if_running``) for a
        command ``run_cancelling`` or ``run_suspending`` accepted; None when
        there is none or it wrote nothing: the full rules then decide."""
        if change is None:
            return None
        record_id = await self._db.change_if_running(change)
        if record_id is None:
            return None
        status = SessionStatus.ACTIVE if change.record.session_id else None
        return AppendResult(str(record_id), True, status)

    async def _suspend(
        self,
        tx: Transaction,
        run: RunState,
        status: SessionStatus | None,
        checkpoint: Checkpoint,
        record: RecordDraft,
        existing: RunRecord | None,
    ) -> AppendResult:
        """§9.4.2 steps 3–7."""
        if run.status.is_terminal and run.status is not RunStatus.SUSPENDED:
            raise RunTerminalConflictError(**error_context(record))
        if run.checkpoint is not None and run.checkpoint != checkpoint:
            raise RunSuspensionConflictError(**error_context(record))
        stored = same_as_stored(existing, record)
        if run.keys.suspension and run.keys.suspension != record.event_key:
            raise RunSuspensionConflictError(**error_context(record))
        return await _close_run(
            tx,
            run,
            status,
            record,
            stored,
            _suspension_change(record, checkpoint, self._clock()),
        )

    async def record_run_terminal(self, cmd: RunTerminal) -> AppendResult:
        """§9.4.3: run_completed and the terminal status together."""
        input_rules.check_ids(run_id=cmd.run_id)
        input_rules.check_record(cmd.record, "record")
        payload = terminal_payload(cmd)
        ending = run_ending(cmd, self._clock(), payload) if payload is not None else None
        if ending is not None:
            record_id = await self._db.end_if_running(ending)
            if record_id is not None:
                status = SessionStatus.ACTIVE if ending.record.session_id else None
                return AppendResult(str(record_id), True, status)

        async def tx_fn(tx: Transaction) -> AppendResult:
            run, status, existing = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            terminal, record = validation.check_terminal(
                cmd.run_id, cmd.status, cmd.record, run, payload
            )
            return await self._terminate(tx, run, status, terminal, record, existing)

        return await self._db.write(tx_fn)

    async def _terminate(
        self,
        tx: Transaction,
        run: RunState,
        status: SessionStatus | None,
        terminal: RunStatus,
        record: RecordDraft,
        existing: RunRecord | None,
    ) -> AppendResult:
        """§9.4.3 steps 3–6."""
        if run.status.is_terminal and run.status is not terminal:
            raise RunTerminalConflictError(**error_context(record))
        stored = same_as_stored(existing, record)
        if run.keys.terminal and run.keys.terminal != record.event_key:
            raise RunTerminalConflictError(**error_context(record))
        return await _close_run(
            tx,
            run,
            status,
            record,
            stored,
            RunChange(
                status=terminal,
                updated_at=self._clock(),
                terminal_key=record.event_key,
                finished_at=record.timestamp,
                failure=(
                    failure_summary(validation.terminal_record(record)[1])
                    if terminal is RunStatus.FAILED
                    else None
                ),
            ),
        )

    async def repair_run_terminal(self, cmd: RunTerminal) -> RunRepairResult:
        """§9.5.1: never overwrites a stored ending and never fails because one exists."""
        input_rules.check_ids(run_id=cmd.run_id)
        input_rules.check_record(cmd.record, "record")

        async def tx_fn(tx: Transaction) -> RunRepairResult:
            run, status, stored = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            terminal, record = validation.check_terminal(cmd.run_id, cmd.status, cmd.record, run)
            if run.status.is_terminal:
                if (
                    run.status is terminal
                    and run.keys.terminal == record.event_key
                    and stored is not None
                    and stored.same_as(record)
                ):
                    return RunRepairResult(
                        RunRepairOutcome.ALREADY_STORED,
                        run.status,
                        AppendResult(str(stored.id), False, status),
                    )
                return RunRepairResult(RunRepairOutcome.DIFFERENT_TERMINAL, run.status)
            result = await self._terminate(tx, run, status, terminal, record, stored)
            return RunRepairResult(RunRepairOutcome.STORED, terminal, result)

        return await self._db.write(tx_fn)

    async def repair_run_suspension(self, cmd: RunSuspension) -> RunRepairResult:
        """§9.5.2: suspends only a still-running run."""
        _check_suspension_text(cmd)

        async def tx_fn(tx: Transaction) -> RunRepairResult:
            run, status, stored = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            checkpoint, record = validation.check_suspension(
                cmd.run_id, cmd.suspension, cmd.record, run
            )
            if run.status.is_terminal:
                if (
                    run.status is RunStatus.SUSPENDED
                    and run.keys.suspension == record.event_key
                    and stored is not None
                    and stored.same_as(record)
                    and run.checkpoint == checkpoint
                ):
                    return RunRepairResult(
                        RunRepairOutcome.ALREADY_STORED,
                        run.status,
                        AppendResult(str(stored.id), False, status),
                    )
                return RunRepairResult(RunRepairOutcome.DIFFERENT_TERMINAL, run.status)
            result = await self._suspend(tx, run, status, checkpoint, record, stored)
            return RunRepairResult(RunRepairOutcome.STORED, RunStatus.SUSPENDED, result)

        return await self._db.write(tx_fn)


def terminal_payload(cmd: RunTerminal) -> lifecycle.RunCompletedPayload | None:
    """The payload of a RecordRunTerminal's record, decoded once for both the
    fast path and the full rules (``validation.terminal_record``); None when
    the record fails those checks: the full rules then say why, in their order."""
    if cmd.record is None or cmd.status not in TERMINAL_COMMAND_STATUSES:
        return None
    try:
        return validation.terminal_record(cmd.record)[1]
    except RunstoreError:
        return None


def run_ending(
    cmd: RunTerminal, updated_at: Nanos, payload: lifecycle.RunCompletedPayload | None = None
) -> RunEnding | None:
    """What ``Database.end_if_running`` needs of a RecordRunTerminal: the
    command checked as far as it can be without the stored run, by the very
    ``validation.check_terminal`` the full rules run, against the run the
    record describes (its agent, session and labels; a canceled one's
    reason). None when that fails: the full rules then say why. ``payload``
    is ``terminal_payload(cmd)`` when the caller has it already."""
    record = cmd.record
    if payload is None:
        payload = terminal_payload(cmd)
    if record is None or payload is None:
        return None
    try:
        described = RunState(
            cmd.run_id,
            record.agent_id,
            record.session_id,
            "",
            0,
            payload.labels,
            RunStartOutcome.PROCEED,
            RunStatus.RUNNING,
            payload.cancellation_reason or "",
            0,
        )
        status, record = validation.check_terminal(
            cmd.run_id, cmd.status, record, described, payload
        )
    except RunstoreError:
        return None
    reasons: tuple[str, str] | None = None
    if status is RunStatus.CANCELED:
        reason = payload.cancellation_reason or ""
        reasons = (reason, "" if reason == lifecycle.REASON_ENGINE_CANCELED else reason)
    return RunEnding(record, status, updated_at, payload.labels, reasons, failure_summary(payload))


def _described_run(run_id: str, record: RecordDraft) -> RunState:
    """The running run a lifecycle record describes: its agent and session,
    started and proceeding. Validation against it is every check of a command
    that does not need the stored run; a fast path's preconditions are the rest."""
    return RunState(
        run_id,
        record.agent_id,
        record.session_id,
        "",
        0,
        {},
        RunStartOutcome.PROCEED,
        RunStatus.RUNNING,
        "",
        0,
    )


def run_cancelling(cmd: RunCancellation, updated_at: Nanos) -> GuardedChange | None:
    """What ``Database.change_if_running`` needs of a RecordRunCancellation
    (``fast_paths.CANCEL``): the command checked by the very
    ``validation.check_cancellation`` the full rules run, against the run its
    record describes, and the change the full rules make of a run without a
    cancellation. None when that check fails: the full rules then say why."""
    if cmd.record is None:
        return None
    try:
        record = validation.check_cancellation(
            cmd.run_id, cmd.reason, cmd.record, _described_run(cmd.run_id, cmd.record)
        )
    except RunstoreError:
        return None
    change = RunChange(
        cancellation_reason=cmd.reason, updated_at=updated_at, cancellation_key=record.event_key
    )
    return GuardedChange(fast_paths.CANCEL, record, change)


def run_suspending(cmd: RunSuspension, updated_at: Nanos) -> GuardedChange | None:
    """What ``Database.change_if_running`` needs of a RecordRunSuspension
    (``fast_paths.SUSPEND``): the command checked by the very
    ``validation.check_suspension`` the full rules run, against the run its
    record describes, and the change ``LifecycleChanges._suspend`` makes. None
    when that check fails: the full rules then say why."""
    if cmd.record is None:
        return None
    try:
        checkpoint, record = validation.check_suspension(
            cmd.run_id, cmd.suspension, cmd.record, _described_run(cmd.run_id, cmd.record)
        )
    except RunstoreError:
        return None
    return GuardedChange(
        fast_paths.SUSPEND, record, _suspension_change(record, checkpoint, updated_at)
    )


def _suspension_change(record: RecordDraft, checkpoint: Checkpoint, updated_at: Nanos) -> RunChange:
    """§9.4.2 step 7: the run suspended with its checkpoint under the record's key."""
    return RunChange(
        status=RunStatus.SUSPENDED,
        updated_at=updated_at,
        suspension_key=record.event_key,
        terminal_key=record.event_key,
        checkpoint=checkpoint,
    )


def failure_summary(payload: lifecycle.RunCompletedPayload) -> RunFailureSummary | None:
    """What a failed ending stores on its run for triage (``RunMeta.failure``)."""
    failure = payload.failure
    if failure is None:
        return None
    return RunFailureSummary(failure.message, failure.kind, failure.code, failure.retryable)


async def _close_run(
    tx: Transaction,
    run: RunState,
    status: SessionStatus | None,
    record: RecordDraft,
    stored: RunRecord | None,
    change: RunChange,
) -> AppendResult:
    """The last steps shared by suspension and termination (§9.4.2, §9.4.3): an
    exact retry returns the stored record; a closed run without it is corrupt;
    otherwise the record and the run's new state are written together."""
    if stored is not None:
        return AppendResult(str(stored.id), False, status)
    if run.status.is_terminal:
        raise missing_lifecycle_record(record)
    result = await append_new(tx, record, status)
    await tx.change_run(run.run_id, change)
    return result


async def _load_mutable_run(
    tx: Transaction, run_id: str, record: RecordDraft | None
) -> tuple[RunState, SessionStatus | None, RunRecord | None]:
    """§9.4 preamble: the run exists and its session is not a tombstone. Also
    returns the session's status and the record already under the command
    record's key (read now, compared only after validation)."""
    target = await tx.record_target(run_id, record.event_key if record else "", for_update=True)
    run = target.run
    if run is None:
        raise RunNotFoundError(run_id=run_id)
    if not run.session_id:
        return run, None, target.existing
    if target.session is PURGED:
        raise SessionPurgedError(run_id=run_id, session_id=run.session_id)
    status = target.session.status if isinstance(target.session, Session) else None
    return run, status, target.existing


def _check_suspension_text(cmd: RunSuspension) -> None:
    input_rules.check_ids(run_id=cmd.run_id)
    if cmd.suspension is not None:
        input_rules.check_id(cmd.suspension.id, "suspension.id")
    input_rules.check_record(cmd.record, "record")
