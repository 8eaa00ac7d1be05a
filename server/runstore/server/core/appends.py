"""Record appends (docs/contract.md §9.3, §9.3.1): one record, or a batch of
one run's records in one transaction.

The common case is one write of the database's own (its fast path); the full
rules here decide everything else, and the common case when that write lost a
race."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from runstore.contract.errors import RunNotActiveError, RunNotFoundError, RunstoreError
from runstore.contract.model import AppendResult, SessionStatus
from runstore.server.core import batch_rules, input_rules, validation
from runstore.server.core.checks import (
    append_new,
    check_record_owner,
    existing_session,
    same_as_stored,
)
from runstore.server.core.model import RecordDraft, RunRecord
from runstore.server.core.ports import RecordTarget, Transaction
from runstore.server.core.section import Section


class Appends(Section):
    """AppendRunRecord and AppendRunRecords over a ``Database``."""

    async def append_run_record(self, record: RecordDraft | None) -> AppendResult:
        """§9.3: exact retries succeed even after the run stopped.

        The common case (a new key in a running run, its session active) is
        one write of the database's (``Database.append_if_writable``);
        everything else, and the common case when that write lost a race, goes
        through the rules one by one.
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
            return await append_new(tx, record, status)

        return await self._db.write(tx_fn)

    async def append_run_records(self, records: Sequence[RecordDraft | None]) -> list[AppendResult]:
        """§9.3.1: AppendRunRecord for each record in order, in one transaction
        that writes all the new records (one multi-row insert) or nothing.

        The common case (every record new, in a running run, its session
        active) is one write of the database's
        (``Database.append_records_if_writable``). Otherwise,
        and when that write lost a race, one lock of the run and one read of
        its state and of every key decide the whole batch with the single
        append's rules (``_append_rules``); a record repeating an earlier
        record of the batch is that record's exact retry, as it would be
        appended one after the other.
        """
        drafts = batch_rules.check_record_batch(records)
        if batch_rules.one_owner_distinct_keys(drafts):
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
    check_record_owner(record, run, field)
    status = existing_session(target.session, run.session_id).status if run.session_id else None
    stored = same_as_stored(target.existing, record)
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
        field = batch_rules.record_field(index)
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
