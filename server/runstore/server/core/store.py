"""The runtime store contract, written once over any ``Database`` (§4–§11).

Each public method is one contract method. It runs the pure validation of
``validation`` first (nothing is written when a command is malformed), then one
transaction in which every check observes the same state as the writes (§7).
Check order follows the contract: the first failing check decides the error.

Lock order, for backends with row locks: a session before its runs, a parent
run before its child. ``Transaction.run(..., for_update=True)`` locks the run's
session first, so every writer acquires locks in the same order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

from runstore.contract import lifecycle
from runstore.contract.errors import (
    ContinuationMismatchError,
    CorruptStateError,
    ErrorContext,
    EventConflictError,
    InvalidTranscriptPositionError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunPurgedError,
    RunRecordOwnerMismatchError,
    RunSessionMismatchError,
    RunstoreError,
    RunSuspensionConflictError,
    RunSuspensionNotFoundError,
    RunTerminalConflictError,
    SessionActiveError,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionNotFoundError,
    SessionPurgedError,
    quote,
)
from runstore.contract.model import (
    NO_RECORD,
    TERMINAL_COMMAND_STATUSES,
    AppendResult,
    Checkpoint,
    ListPage,
    RunFilter,
    RunRepairOutcome,
    RunRepairResult,
    RunStartOutcome,
    RunStatus,
    SessionFilter,
    SessionStatus,
)
from runstore.server.config import DEFAULTS
from runstore.server.core import batch, input_rules, paging, validation
from runstore.server.core.listing import Listing, Row, run_listing, session_listing
from runstore.server.core.model import (
    ChildRunStart,
    LifecycleKeys,
    Nanos,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    RecordDraft,
    RootRunStart,
    RunCancellation,
    RunChange,
    RunEnding,
    RunFinish,
    RunRecord,
    RunStart,
    RunStartResult,
    RunState,
    RunSuspension,
    RunTerminal,
    Session,
)
from runstore.server.core.ports import (
    PURGED,
    Database,
    RecordTarget,
    SessionLookup,
    Transaction,
)

T = TypeVar("T")

DEFAULT_PAGE_LIMIT: Final = DEFAULTS.page_limit
"""Largest page ListRunRecords / ListSessionRunRecords return (D3)."""

DEFAULT_PAGE_BYTES: Final = DEFAULTS.page_bytes
"""Payload budget of one list page, so a page always fits a gRPC message."""


@dataclass(frozen=True, slots=True)
class PageLimits:
    """Server-side caps on list pages; callers always follow next_cursor (Q11)."""

    records: int = DEFAULT_PAGE_LIMIT
    """At most this many records per ListRunRecords/ListSessionRunRecords page."""
    payload_bytes: int = DEFAULT_PAGE_BYTES
    """Stop a page before it exceeds this many payload bytes (one record always fits)."""


class RuntimeStore:
    """The contract's rules over a ``Database``.

    Args:
        db: Runs the transactions.
        clock: Wall clock for ``updated_at`` (UTC nanoseconds).
        limits: Page caps.
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], Nanos] = time.time_ns,
        limits: PageLimits = PageLimits(),
    ) -> None:
        self._db = db
        self._clock = clock
        self._limits = limits

    # --- Session administration (§9.1) -------------------------------------

    async def create_session(self, session_id: str, created_at: Nanos | None) -> Session:
        """§9.1.1: idempotent while active; the first created_at is kept (Q19)."""
        input_rules.check_ids(session_id=session_id)
        validation.check_session_command(session_id, created_at, "created_at")
        assert created_at is not None

        async def tx_fn(tx: Transaction) -> Session:
            found = await tx.session(session_id, for_update=True)
            if found is PURGED:
                raise SessionPurgedError(session_id=session_id)
            if isinstance(found, Session):
                if found.status is SessionStatus.ENDED:
                    raise SessionEndedError(session_id=session_id)
                return found
            session = Session(session_id, SessionStatus.ACTIVE, created_at)
            await tx.insert_session(session)
            return session

        return await self._db.write(tx_fn)

    async def load_session(self, session_id: str) -> Session:
        """§9.1.2."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> Session:
            return _existing_session(await tx.session(session_id), session_id)

        return await self._db.read(tx_fn)

    async def load_session_status(self, session_id: str) -> SessionStatus:
        """§9.1.3: the empty ID (a sessionless run) is not found."""
        return (await self.load_session(session_id)).status

    async def end_session(self, session_id: str, ended_at: Nanos | None) -> Session:
        """§9.1.4: the first ended_at wins; runs are not touched."""
        input_rules.check_ids(session_id=session_id)
        validation.check_session_command(session_id, ended_at, "ended_at")
        assert ended_at is not None

        async def tx_fn(tx: Transaction) -> Session:
            session = _existing_session(await tx.session(session_id, for_update=True), session_id)
            if session.status is SessionStatus.ENDED:
                return session
            await tx.end_session(session_id, ended_at)
            return Session(session_id, SessionStatus.ENDED, session.created_at, ended_at)

        return await self._db.write(tx_fn)

    async def purge_session(self, session_id: str) -> None:
        """§9.1.5: ended and quiescent sessions only; leaves a tombstone."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> None:
            found = await tx.session(session_id, for_update=True)
            if found is PURGED:
                return
            session = _existing_session(found, session_id)
            if session.status is SessionStatus.ACTIVE:
                raise SessionActiveError(session_id=session_id)
            if await tx.session_has_running_runs(session_id):
                raise SessionHasActiveRunsError(session_id=session_id)
            await tx.purge_session(session_id, self._clock())

        await self._db.write(tx_fn)

    async def purge_ended_sessions(
        self, ended_before: Nanos | None, limit: int
    ) -> tuple[list[str], bool]:
        """Retention: purges up to ``limit`` ended, quiescent sessions ended before
        ``ended_before``, oldest first; returns those this call purged and whether
        more matched.

        Candidates are read first, then each is purged in its own transaction
        exactly as ``purge_session`` does, re-checked under the session's lock:
        a session that gained a running run, or that another replica purged
        meanwhile, is skipped, so concurrent purgers report each session once
        and touch nothing else.
        """
        batch = validation.check_purge_batch(ended_before, "ended_before", limit)
        assert ended_before is not None

        async def candidates(tx: Transaction) -> list[str]:
            return await tx.purgeable_sessions(ended_before, batch + 1)

        found = await self._db.read(candidates)

        def purge_one(session_id: str) -> Callable[[Transaction], Coroutine[Any, Any, bool]]:
            async def tx_fn(tx: Transaction) -> bool:
                session = await tx.session(session_id, for_update=True)
                if not isinstance(session, Session) or session.status is not SessionStatus.ENDED:
                    return False  # purged by another caller meanwhile (or reopened: never)
                if session.ended_at is None or session.ended_at >= ended_before:
                    return False
                if await tx.session_has_running_runs(session_id):
                    return False
                await tx.purge_session(session_id, self._clock())
                return True

            return tx_fn

        done = await _in_parallel([purge_one(session_id) for session_id in found[:batch]], self._db)
        purged = [session_id for session_id, ok in zip(found[:batch], done, strict=True) if ok]
        return purged, len(found) > batch

    async def purge_sessionless_runs(
        self, finished_before: Nanos | None, limit: int
    ) -> tuple[list[str], bool]:
        """Retention: deletes up to ``limit`` finished sessionless root runs
        finished before ``finished_before``, oldest first, each with its
        one-shot children (at any depth) and every record, and leaves a run
        tombstone for each (§9.10.2). Returns the IDs this call deleted (a root
        before its children) and whether more roots may match.

        Each root's family goes in one transaction, re-checked under the locks
        of the root, then of its children: a family with a run still running
        (or suspended), or one that finished at or after the cut-off, is
        skipped whole, never partly deleted; a root another caller deleted
        first is skipped and not reported. Skipped roots are stepped over
        (keyset), so they never stop the roots after them.
        """
        batch = validation.check_purge_batch(finished_before, "finished_before", limit)
        assert finished_before is not None
        budget = batch * _ROOTS_EXAMINED_PER_PURGE
        families: list[list[str]] = []
        after: tuple[Nanos, str] | None = None

        def purged() -> list[str]:
            return [run_id for family in families for run_id in family]

        while len(families) < batch and budget > 0:
            wanted = min(batch - len(families), budget)

            async def candidates(
                tx: Transaction, after: tuple[Nanos, str] | None = after, wanted: int = wanted
            ) -> list[tuple[str, Nanos]]:
                return await tx.purgeable_sessionless_runs(finished_before, after, wanted + 1)

            found = await self._db.read(candidates)
            page = found[:wanted]
            budget -= len(page)
            if page:
                after = (page[-1][1], page[-1][0])
            deleted = await _in_parallel(
                [self._purge_family(run_id, finished_before) for run_id, _ in page], self._db
            )
            families.extend(family for family in deleted if family)
            if len(found) <= wanted:
                return purged(), False
        return purged(), True

    def _purge_family(
        self, root_id: str, finished_before: Nanos
    ) -> Callable[[Transaction], Coroutine[Any, Any, list[str]]]:
        def qualifies(run: RunFinish | None) -> bool:
            return (
                run is not None
                and not run.session_id
                and run.status in _FINISHED
                and run.finished_at is not None
                and run.finished_at < finished_before
            )

        async def tx_fn(tx: Transaction) -> list[str]:
            root = await tx.lock_run_ending(root_id)
            if root is None or root.parent_run_id or not qualifies(root):
                return []  # deleted by another caller meanwhile, or never a candidate
            family, frontier = [root_id], [root_id]
            while frontier:
                children = await tx.lock_child_run_endings(frontier.pop())
                if not all(qualifies(child) for child in children):
                    return []
                family.extend(child.run_id for child in children)
                frontier.extend(child.run_id for child in children)
            purged_at = self._clock()
            for run_id in family:
                await tx.purge_sessionless_run(run_id, purged_at)
            return family

        return tx_fn

    async def list_runs_by_session(
        self, session_id: str, statuses: Collection[RunStatus] | None = None
    ) -> list[RunState]:
        """§9.1.6: ordered by started_at, then run_id (Q10). ``statuses=None``
        lists every run; an empty collection matches nothing."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> list[RunState]:
            _existing_session(await tx.session(session_id), session_id)
            runs = await tx.runs_by_session(session_id)
            return runs if statuses is None else [run for run in runs if run.status in statuses]

        return await self._db.read(tx_fn)

    # --- Listings (§9.8) ----------------------------------------------------

    async def list_sessions(
        self, query: SessionFilter[Nanos], page_size: int, page_token: str
    ) -> ListPage[Session]:
        """§9.8.1: live sessions by created_at, then ID; keyset pages."""
        listing = session_listing(query, page_size, page_token)
        input_rules.check_page_key(listing.after)

        async def tx_fn(tx: Transaction) -> list[Session]:
            return await tx.list_sessions(listing.query, listing.after, listing.size + 1)

        return await self._listed(listing, tx_fn)

    async def list_runs(
        self, query: RunFilter[Nanos], page_size: int, page_token: str
    ) -> ListPage[RunState]:
        """§9.8.2: runs by started_at, then run ID; keyset pages."""
        input_rules.check_ids(session_id=query.session_id, agent_id=query.agent_id)
        listing = run_listing(query, page_size, page_token)
        input_rules.check_page_key(listing.after)

        async def tx_fn(tx: Transaction) -> list[RunState]:
            return await tx.list_runs(listing.query, listing.after, listing.size + 1)

        return await self._listed(listing, tx_fn)

    async def _listed(
        self,
        listing: Listing[Any, Row],
        fetch: Callable[[Transaction], Coroutine[Any, Any, list[Row]]],
    ) -> ListPage[Row]:
        """One page read in one snapshot, with one row more than the page."""
        if listing.matches_nothing:
            return ListPage([])
        return listing.page(await self._db.read(fetch))

    # --- Starts (§9.2) -------------------------------------------------------

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
                _check_sessionless_retry(stored, run, None, started)
                return RunStartResult(
                    RunStartOutcome.PROCEED, await _replay_record(tx, started, None)
                )
            await _check_not_purged(tx, run)
            await tx.insert_run(self._new_run(run, RunStartOutcome.PROCEED, None, started, None))
            return RunStartResult(RunStartOutcome.PROCEED, await _append(tx, started, None))

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
            parent_record = await _append(tx, link, None)
            return RunStartResult(
                RunStartOutcome.PROCEED,
                await _append(tx, started, None),
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
        parent_record = await _append(tx, link, session.status) if link else NO_RECORD
        await tx.insert_run(self._new_run(run, outcome, link, started, canceled))
        started_result = await _append(tx, started, session.status)
        canceled_result = await _append(tx, canceled, session.status) if stop else NO_RECORD
        return RunStartResult(outcome, started_result, canceled_result, parent_record)

    # --- Records (§9.3) ------------------------------------------------------

    async def append_run_record(self, record: RecordDraft | None) -> AppendResult:
        """§9.3: exact retries succeed even after the run stopped.

        The common case (``appendable``) is one write of the database's
        (``Database.append_if_writable``); everything else, and the common case
        when that write lost a race, goes through the rules one by one.
        """
        input_rules.check_record(record, "record")
        record = validation.check_ordinary_record(record)
        record_id = await self._db.append_if_writable(record)
        if record_id is not None:
            status = SessionStatus.ACTIVE if record.session_id else None
            return AppendResult(str(record_id), True, status)

        async def tx_fn(tx: Transaction) -> AppendResult:
            target = await tx.record_target(record.run_id, record.event_key, for_update=True)
            stored, status = _append_rules(target, record, "record")
            if stored is not None:
                return AppendResult(str(stored.id), False, status)
            return await _append(tx, record, status)

        return await self._db.write(tx_fn)

    async def append_run_records(self, records: Sequence[RecordDraft | None]) -> list[AppendResult]:
        """§9.3.1: AppendRunRecord for each record in order, in one transaction
        that writes all the new records (one multi-row insert) or nothing.

        The common case (every record new and ``appendable``) is one write of
        the database's (``Database.append_records_if_writable``). Otherwise,
        and when that write lost a race, one lock of the run and one read of
        its state and of every key decide the whole batch with the single
        append's rules (``_append_rules``); a record repeating an earlier
        record of the batch is that record's exact retry, as it would be
        appended one after the other.
        """
        drafts = batch.check_record_batch(records)
        if batch.one_owner_distinct_keys(drafts):
            ids = await self._db.append_records_if_writable(drafts)
            if ids is not None:
                status = SessionStatus.ACTIVE if drafts[0].session_id else None
                return [AppendResult(str(record_id), True, status) for record_id in ids]
        run_id = drafts[0].run_id

        async def tx_fn(tx: Transaction) -> list[AppendResult]:
            # "" is no record's key (V1): this locks and reads the run and its session.
            state = await tx.record_target(run_id, "", for_update=True)
            stored = await tx.records_by_keys(run_id, list({r.event_key: r for r in drafts}))
            results, new, repeats = _batch_results(state, stored, drafts)
            if new:
                ids = await tx.append_records([drafts[index] for index in new])
                for index, record_id in zip(new, ids, strict=True):
                    results[index] = replace(results[index], id=str(record_id))
                for index, first in repeats.items():
                    results[index] = replace(results[index], id=results[first].id)
            return results

        return await self._db.write(tx_fn)

    # --- Lifecycle changes (§9.4) --------------------------------------------

    async def record_run_cancellation(self, cmd: RunCancellation) -> AppendResult:
        """§9.4.1: the first reason is permanent; the status does not change."""
        input_rules.check_ids(run_id=cmd.run_id)
        input_rules.check_text(cmd.reason, "reason")
        input_rules.check_record(cmd.record, "record")

        async def tx_fn(tx: Transaction) -> AppendResult:
            run, status, existing = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            record = validation.check_cancellation(cmd.run_id, cmd.reason, cmd.record, run)
            if run.cancellation_reason and run.cancellation_reason != cmd.reason:
                raise RunCancellationConflictError(**_context(record))
            stored = _same(existing, record)
            if not run.keys.cancellation and run.status.is_terminal:
                raise RunNotActiveError(**_context(record))
            if run.keys.cancellation and run.keys.cancellation != record.event_key:
                raise RunCancellationConflictError(**_context(record))
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
            return await _append(tx, record, status)

        return await self._db.write(tx_fn)

    async def record_run_suspension(self, cmd: RunSuspension) -> AppendResult:
        """§9.4.2: checkpoint, run_suspended and status suspended together."""
        _check_suspension_text(cmd)

        async def tx_fn(tx: Transaction) -> AppendResult:
            run, status, existing = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            checkpoint, record = validation.check_suspension(
                cmd.run_id, cmd.suspension, cmd.record, run
            )
            return await self._suspend(tx, run, status, checkpoint, record, existing)

        return await self._db.write(tx_fn)

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
            raise RunTerminalConflictError(**_context(record))
        if run.checkpoint is not None and run.checkpoint != checkpoint:
            raise RunSuspensionConflictError(**_context(record))
        stored = _same(existing, record)
        if run.keys.suspension and run.keys.suspension != record.event_key:
            raise RunSuspensionConflictError(**_context(record))
        return await _close_run(
            tx,
            run,
            status,
            record,
            stored,
            RunChange(
                status=RunStatus.SUSPENDED,
                updated_at=self._clock(),
                suspension_key=record.event_key,
                terminal_key=record.event_key,
                checkpoint=checkpoint,
            ),
        )

    async def record_run_terminal(self, cmd: RunTerminal) -> AppendResult:
        """§9.4.3: run_completed and the terminal status together."""
        input_rules.check_ids(run_id=cmd.run_id)
        input_rules.check_record(cmd.record, "record")
        ending = run_ending(cmd, self._clock())
        if ending is not None:
            record_id = await self._db.end_if_running(ending)
            if record_id is not None:
                status = SessionStatus.ACTIVE if ending.record.session_id else None
                return AppendResult(str(record_id), True, status)

        async def tx_fn(tx: Transaction) -> AppendResult:
            run, status, existing = await _load_mutable_run(tx, cmd.run_id, cmd.record)
            terminal, record = validation.check_terminal(cmd.run_id, cmd.status, cmd.record, run)
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
            raise RunTerminalConflictError(**_context(record))
        stored = _same(existing, record)
        if run.keys.terminal and run.keys.terminal != record.event_key:
            raise RunTerminalConflictError(**_context(record))
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
            ),
        )

    # --- Repairs (§9.5) ------------------------------------------------------

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

    # --- Reads (§9.6) --------------------------------------------------------

    async def load_run(self, run_id: str) -> RunState:
        """§9.6.1."""
        input_rules.check_ids(run_id=run_id)

        async def tx_fn(tx: Transaction) -> RunState:
            run = await tx.run(run_id)
            if run is None:
                raise RunNotFoundError(run_id=run_id)
            return run

        return await self._db.read(tx_fn)

    async def load_run_suspension(self, run_id: str) -> Checkpoint:
        """§9.6.2: the exact stored checkpoint."""
        run = await self.load_run(run_id)
        if run.checkpoint is None:
            raise RunSuspensionNotFoundError(run_id=run_id, session_id=run.session_id)
        return run.checkpoint

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page:
        """§9.6.3, §6.4: the cursor counts records already read (= last ID)."""
        input_rules.check_ids(run_id=run_id)
        paging.check_limit(limit)
        after = paging.parse_cursor(cursor)
        page_size = min(limit, self._limits.records)
        budget = self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> Page:
            if await tx.run(run_id) is None:
                raise RunNotFoundError(run_id=run_id)
            rows = await tx.run_records(run_id, after, page_size + 1, budget)
            return paging.cut_page([(record.id, record) for record in rows], page_size, budget)

        return await self._db.read(tx_fn)

    async def list_session_run_records(self, session_id: str, cursor: str, limit: int) -> Page:
        """§9.6.4, D3: commit order across the session's runs."""
        input_rules.check_ids(session_id=session_id)
        paging.check_limit(limit)
        after = paging.parse_cursor(cursor)
        page_size = min(limit, self._limits.records)
        budget = self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> Page:
            _existing_session(await tx.session(session_id), session_id)
            rows = await tx.session_records(session_id, after, page_size + 1, budget)
            return paging.cut_page(rows, page_size, budget)

        return await self._db.read(tx_fn)

    async def run_records_after(self, run_id: str, after: int) -> tuple[RunState, paging.Cut]:
        """The run and its next full page after position ``after`` (a Watch read)."""
        page_size, budget = self._limits.records, self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> tuple[RunState, paging.Cut]:
            run = await tx.run(run_id)
            if run is None:
                raise RunNotFoundError(run_id=run_id)
            rows = await tx.run_records(run_id, after, page_size + 1, budget)
            cut = paging.cut_rows([(record.id, record) for record in rows], page_size, budget)
            return run, cut

        return await self._db.read(tx_fn)

    async def session_records_after(self, session_id: str, after: int) -> paging.Cut:
        """A session's next full page after position ``after`` (a Watch read)."""
        page_size, budget = self._limits.records, self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> paging.Cut:
            _existing_session(await tx.session(session_id), session_id)
            rows = await tx.session_records(session_id, after, page_size + 1, budget)
            return paging.cut_rows(rows, page_size, budget)

        return await self._db.read(tx_fn)

    async def list_run_transcript_records(
        self, run_id: str, through_record_id: str, after_record_id: str, limit: int
    ) -> Page:
        """§9.6.5: transcript records through a fixed end; stable pages."""
        input_rules.check_ids(run_id=run_id)
        if not through_record_id or limit <= 0:
            raise InvalidTranscriptPositionError(
                run_id=run_id, field="limit" if through_record_id else "through_record_id"
            )
        page_size = min(limit, paging.TRANSCRIPT_PAGE_RECORDS)
        budget = paging.TRANSCRIPT_PAGE_BYTES

        async def tx_fn(tx: Transaction) -> Page:
            if await tx.run(run_id) is None:
                raise RunNotFoundError(run_id=run_id)
            through, after = await _transcript_range(tx, run_id, through_record_id, after_record_id)
            rows = await tx.transcript_records(run_id, after, through, page_size + 1, budget)
            return paging.cut_transcript_page(rows, page_size)

        return await self._db.read(tx_fn)


# --- Rules used inside transactions -----------------------------------------

_FINISHED: Final = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED})
"""The statuses sessionless retention deletes (suspended runs can be continued)."""

PURGE_PARALLEL: Final = 8
"""Retention transactions (one session, one run family each) in flight at once
per call: SQLite commits them in one group commit, PostgreSQL on several pool
connections. Different sessions (families) share no row, so they never wait
for each other."""

_ROOTS_EXAMINED_PER_PURGE: Final = 4
"""A retention call examines at most this many candidate roots per root it may
purge, so skipped families cost a bounded amount of work per call."""


async def _in_parallel(
    transactions: list[Callable[[Transaction], Coroutine[Any, Any, T]]], db: Database
) -> list[T]:
    """Each function in a write transaction of its own, ``PURGE_PARALLEL`` at a
    time; results in the order given. On a failure every other transaction
    still ends (committed or not) before the first error is raised, so none
    outlives the call."""
    gate = asyncio.Semaphore(PURGE_PARALLEL)

    async def one(fn: Callable[[Transaction], Coroutine[Any, Any, T]]) -> T:
        async with gate:
            return await db.write(fn)

    results = await asyncio.gather(*(one(fn) for fn in transactions), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [result for result in results if not isinstance(result, BaseException)]


async def _check_not_purged(tx: Transaction, run: RunStart) -> None:
    """§9.10.2: a first start of a run ID retention deleted is refused, so a
    delayed retry of a purged run's start never re-creates it."""
    if await tx.run_purged(run.run_id):
        raise RunPurgedError(run_id=run.run_id, session_id=run.session_id)


def _check_suspension_text(cmd: RunSuspension) -> None:
    input_rules.check_ids(run_id=cmd.run_id)
    if cmd.suspension is not None:
        input_rules.check_id(cmd.suspension.id, "suspension.id")
    input_rules.check_record(cmd.record, "record")


def _context(record: RecordDraft) -> ErrorContext:
    return {"run_id": record.run_id, "session_id": record.session_id, "event_key": record.event_key}


def _existing_session(found: SessionLookup, session_id: str) -> Session:
    """§10.4: a tombstone is SESSION_PURGED, distinct from never existing."""
    if found is PURGED:
        raise SessionPurgedError(session_id=session_id)
    if found is None:
        raise SessionNotFoundError(session_id=session_id)
    assert isinstance(found, Session)
    return found


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
    return _existing_session(await tx.session(run.session_id), run.session_id).status


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


def appendable(target: RecordTarget, record: RecordDraft) -> bool:
    """The common case of AppendRunRecord (§9.3), in which ``record`` is new
    and written with no further question. The one list of the preconditions
    ``Database.append_if_writable`` implements (and that
    ``tests/core/test_fast_path_equivalence.py`` holds it and
    ``append_run_record``'s full rules to):

    1. the run exists and is running (not suspended or terminal);
    2. the record's agent and session are the run's;
    3. a run in a session: the session exists, is not a tombstone, is active;
    4. no record of the run has the record's event key.

    When it does not hold the full rules decide: replay, or which error.
    """
    run, session = target.run, target.session
    return (
        run is not None
        and run.status is RunStatus.RUNNING
        and (record.agent_id, record.session_id) == (run.agent_id, run.session_id)
        and (
            not run.session_id
            or (isinstance(session, Session) and session.status is SessionStatus.ACTIVE)
        )
        and target.existing is None
    )


def startable(
    session: SessionLookup, stored: RunState | None, run: RunStart, purged: bool = False
) -> bool:
    """The common case of StartRootRun (§9.2.1), in which the run and its
    ``run_started`` record are written with no further question. The one list
    of the preconditions ``Database.start_if_new`` implements (and that
    ``tests/core/test_lifecycle_fast_paths.py`` holds it and
    ``start_root_run``'s full rules to), for a start that passed validation:

    1. the run has no predecessor (a continuation checks it first, §10.2);
    2. the session exists and is active (so it is no tombstone);
    3. no run has the run's ID (no retry, no conflict);
    4. no run tombstone has it (``purged``: retention deleted such a run, §9.10.2).
    """
    return (
        not run.predecessor_run_id
        and isinstance(session, Session)
        and session.status is SessionStatus.ACTIVE
        and stored is None
        and not purged
    )


def run_ending(cmd: RunTerminal, updated_at: Nanos) -> RunEnding | None:
    """What ``Database.end_if_running`` needs of a RecordRunTerminal: the
    command checked as far as it can be without the stored run, by the very
    ``validation.check_terminal`` the full rules run, against the run the
    record describes (its agent, session and labels; a canceled one's
    reason). None when that fails: the full rules then say why."""
    record = cmd.record
    if record is None or cmd.status not in TERMINAL_COMMAND_STATUSES:
        return None
    try:
        payload = lifecycle.decode_run_completed(record.payload)
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
        status, record = validation.check_terminal(cmd.run_id, cmd.status, record, described)
    except (lifecycle.PayloadError, RunstoreError):
        return None
    reasons: tuple[str, str] | None = None
    if status is RunStatus.CANCELED:
        reason = payload.cancellation_reason or ""
        reasons = (reason, "" if reason == lifecycle.REASON_ENGINE_CANCELED else reason)
    return RunEnding(record, status, updated_at, payload.labels, reasons)


def endable(target: RecordTarget, ending: RunEnding) -> bool:
    """The common case of RecordRunTerminal (§9.4.3), in which the terminal
    record is new and written with the status change, no further question.
    The one list of the preconditions ``Database.end_if_running`` implements
    (and that ``tests/core/test_lifecycle_fast_paths.py`` holds it and
    ``record_run_terminal``'s full rules to), for a command ``run_ending``
    accepted:

    1. the run exists, is running (not suspended or terminal) and has no
       terminal key;
    2. the record's agent and session are the run's;
    3. the run's labels are the record's, and a canceled record's reason is
       the run's (the engine's default when the run has none);
    4. a run in a session: the session exists, is active;
    5. no record of the run has the record's event key.
    """
    run, session, record = target.run, target.session, ending.record
    return (
        run is not None
        and run.status is RunStatus.RUNNING
        and not run.keys.terminal
        and (record.agent_id, record.session_id) == (run.agent_id, run.session_id)
        and dict(run.labels) == dict(ending.labels)
        and (ending.reasons is None or run.cancellation_reason in ending.reasons)
        and (
            not run.session_id
            or (isinstance(session, Session) and session.status is SessionStatus.ACTIVE)
        )
        and target.existing is None
    )


def _append_rules(
    target: RecordTarget, record: RecordDraft, field: str
) -> tuple[RunRecord | None, SessionStatus | None]:
    """AppendRunRecord's steps 2–5 (§9.3) on the state read under the run's
    lock: the stored record when ``record`` is its exact retry (else None, and
    it is to be inserted), and the session status to report. ``field`` names
    the record in an owner mismatch."""
    run = target.run
    if run is None:
        raise RunNotFoundError(run_id=record.run_id, event_key=record.event_key)
    _check_record_owner(record, run, field)
    status = _existing_session(target.session, run.session_id).status if run.session_id else None
    stored = _same(target.existing, record)
    if stored is None and run.status.is_terminal:
        raise RunNotActiveError(run_id=run.run_id, session_id=run.session_id)
    return stored, status


def _batch_results(
    state: RecordTarget, stored: Mapping[str, RunRecord], drafts: Sequence[RecordDraft]
) -> tuple[list[AppendResult], list[int], dict[int, int]]:
    """§9.3.1: each record through ``_append_rules`` in order, as if the new
    records before it were already stored. The first failing record's error
    fails the batch, naming the record.

    Returns a result per record, the indexes of the records to insert (their
    results still without an ID), and for each record that repeats one of
    those, the index of the record it repeats (its ID is that one's)."""
    results: list[AppendResult] = []
    new: list[int] = []
    repeats: dict[int, int] = {}
    pending: dict[str, tuple[RunRecord, int]] = {}
    """The records to insert by key, as they will be stored (ID not yet known)."""
    for index, record in enumerate(drafts):
        field = batch.record_field(index)
        earlier, first = pending.get(record.event_key, (stored.get(record.event_key), -1))
        try:
            existing, status = _append_rules(replace(state, existing=earlier), record, field)
        except RunstoreError as error:
            error.field = error.field or field
            raise
        if existing is None:
            pending[record.event_key] = (RunRecord.from_draft(record, 0), index)
            new.append(index)
        elif first >= 0:
            repeats[index] = first
        results.append(AppendResult(str(existing.id) if existing else "", existing is None, status))
    return results, new, repeats


def _check_record_owner(record: RecordDraft, run: RunState, field: str) -> None:
    """A record's agent and session are its run's (§3.7)."""
    if record.agent_id != run.agent_id or record.session_id != run.session_id:
        raise RunRecordOwnerMismatchError(**_context(record), field=field)


def _same(stored: RunRecord | None, record: RecordDraft) -> RunRecord | None:
    """§6.1: the stored record under this key if it is the same record, None if
    the key is free; a different record under the key is an event conflict."""
    if stored is None:
        return None
    if not stored.same_as(record):
        raise EventConflictError(**_context(record))
    return stored


async def _same_record(tx: Transaction, record: RecordDraft) -> RunRecord | None:
    """``_same`` with the record read from the transaction."""
    return _same(await tx.record_by_key(record.run_id, record.event_key), record)


def _missing_lifecycle_record(record: RecordDraft) -> CorruptStateError:
    return CorruptStateError(
        "stored run is missing a required lifecycle record", **_context(record)
    )


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
        raise _missing_lifecycle_record(record)
    result = await _append(tx, record, status)
    await tx.change_run(run.run_id, change)
    return result


async def _append(
    tx: Transaction, record: RecordDraft, status: SessionStatus | None
) -> AppendResult:
    """Inserts a record the caller has checked is new."""
    return AppendResult(str(await tx.append_record(record)), True, status)


def _check_link_is_new(stored_link: RunRecord | None, link: RecordDraft) -> None:
    """A new child's link must not be stored yet: an identical link without its
    child run means the store lost data."""
    if stored_link is not None:
        raise CorruptStateError("stored parent link has no child run", **_context(link))


async def _replay_record(
    tx: Transaction, record: RecordDraft, status: SessionStatus | None
) -> AppendResult:
    """§8 rule 3: a retry re-appends each record of the stored outcome; each
    must already be stored exactly."""
    stored = await _same_record(tx, record)
    if stored is None:
        raise _missing_lifecycle_record(record)
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
        raise RunNotFoundError(**_context(link), field="parent_linked.run_id")
    _check_record_owner(link, parent, "parent_linked")
    if parent.session_id:
        _existing_session(target.session, parent.session_id)
    return parent, _same(target.existing, link)


async def _transcript_range(
    tx: Transaction, run_id: str, through_record_id: str, after_record_id: str
) -> tuple[int, int]:
    """§9.6.5 step 4: the end is any record of the run; the start, if given, is
    a transcript record at or before the end."""

    def invalid(field: str) -> InvalidTranscriptPositionError:
        return InvalidTranscriptPositionError(
            f"invalid transcript position: run {quote(run_id)}", run_id=run_id, field=field
        )

    through = paging.parse_record_id(through_record_id)
    if through is None or await tx.record_by_id(run_id, through) is None:
        raise invalid("through_record_id")
    if not after_record_id:
        return through, 0
    after = paging.parse_record_id(after_record_id)
    if after is None or after > through:
        raise invalid("after_record_id")
    start = await tx.record_by_id(run_id, after)
    if start is None or start.type not in lifecycle.TRANSCRIPT_TYPES:
        raise invalid("after_record_id")
    return through, after
