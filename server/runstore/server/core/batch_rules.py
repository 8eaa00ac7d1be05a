"""AppendRunRecords' own input rules (docs/contract.md §9.3.1), as pure functions.

A batch is AppendRunRecord applied to each record in order inside one
transaction; everything about one record is the single append's rules
(``input_rules.check_record``, ``validation.check_ordinary_record``, and in
the transaction ``store``'s). What is the batch's own is checked here, before
any transaction: its size, and that all its records belong to one run (one
run's lock and one read of its state decide the whole batch, so batches never
take locks in two orders).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from runstore.contract.errors import ValidationError, quote
from runstore.server.core import input_rules, validation
from runstore.server.core.model import RecordDraft

MAX_BATCH_RECORDS: Final = 128
"""Most records of one AppendRunRecords request."""

MAX_BATCH_PAYLOAD_BYTES: Final = 4 * 1024 * 1024
"""Most payload bytes of one AppendRunRecords request, all records together:
a batch never holds the writer (or a PostgreSQL connection) for long, and its
records fit one page of ListRunRecords at the default ``--page-bytes``."""


_RECORD_FIELDS: Final = tuple(f"records[{index}]" for index in range(MAX_BATCH_RECORDS))
"""Made once: every record of every batch is checked under its name."""


def record_field(index: int) -> str:
    """How errors name the record at ``index`` of a batch."""
    return _RECORD_FIELDS[index] if index < MAX_BATCH_RECORDS else f"records[{index}]"


def check_record_batch(records: Sequence[RecordDraft | None]) -> list[RecordDraft]:
    """The batch's size, then each record in order: as AppendRunRecord checks
    it (ids and text, V1, V2) under its own field name, and in the first
    record's run. The first failure is the error."""
    if not records:
        raise ValidationError("at least one run record is required", field="records")
    if len(records) > MAX_BATCH_RECORDS:
        raise ValidationError(
            f"a batch holds at most {MAX_BATCH_RECORDS} records, not {len(records)}",
            field="records",
        )
    payload_bytes = sum(len(record.payload) for record in records if record is not None)
    if payload_bytes > MAX_BATCH_PAYLOAD_BYTES:
        raise ValidationError(
            f"a batch holds at most {MAX_BATCH_PAYLOAD_BYTES} payload bytes, not {payload_bytes}",
            field="records",
        )
    checked: list[RecordDraft] = []
    for index, record in enumerate(records):
        field = record_field(index)
        input_rules.check_record(record, field)
        draft = validation.check_ordinary_record(record, field)
        if checked and draft.run_id != checked[0].run_id:
            raise ValidationError(
                f"every record of a batch must belong to run {quote(checked[0].run_id)}, "
                f"not {quote(draft.run_id)}",
                field=f"{field}.run_id",
                run_id=draft.run_id,
                session_id=draft.session_id,
                event_key=draft.event_key,
            )
        checked.append(draft)
    return checked


def one_owner_distinct_keys(records: Sequence[RecordDraft]) -> bool:
    """Whether a checked batch has the shape of its one-statement common case
    (``Database.append_records_if_writable``): every record has the first's
    agent and session, and no key repeats. Other batches take the full rules."""
    first = records[0]
    return len({record.event_key for record in records}) == len(records) and all(
        (record.agent_id, record.session_id) == (first.agent_id, first.session_id)
        for record in records
    )
