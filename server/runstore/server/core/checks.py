"""Checks of stored state that several sections of the runtime store share:
a session that exists (not a tombstone), a record's owner, the record
already under an event key (§6.1), and the insert of a record found new."""

from __future__ import annotations

from runstore.contract.errors import (
    CorruptStateError,
    ErrorContext,
    EventConflictError,
    RunRecordOwnerMismatchError,
    SessionNotFoundError,
    SessionPurgedError,
)
from runstore.contract.model import AppendResult, SessionStatus
from runstore.server.core.model import RecordDraft, RunRecord, RunState, Session
from runstore.server.core.ports import PURGED, SessionLookup, Transaction


def error_context(record: RecordDraft) -> ErrorContext:
    """The IDs an error about ``record`` names."""
    return {"run_id": record.run_id, "session_id": record.session_id, "event_key": record.event_key}


def existing_session(found: SessionLookup, session_id: str) -> Session:
    """§10.4: a tombstone is SESSION_PURGED, distinct from never existing."""
    if found is PURGED:
        raise SessionPurgedError(session_id=session_id)
    if found is None:
        raise SessionNotFoundError(session_id=session_id)
    assert isinstance(found, Session)
    return found


def check_record_owner(record: RecordDraft, run: RunState, field: str) -> None:
    """A record's agent and session are its run's (§3.7)."""
    if record.agent_id != run.agent_id or record.session_id != run.session_id:
        raise RunRecordOwnerMismatchError(**error_context(record), field=field)


def same_as_stored(stored: RunRecord | None, record: RecordDraft) -> RunRecord | None:
    """§6.1: the stored record under this key if it is the same record, None if
    the key is free; a different record under the key is an event conflict."""
    if stored is None:
        return None
    if not stored.same_as(record):
        raise EventConflictError(**error_context(record))
    return stored


def missing_lifecycle_record(record: RecordDraft) -> CorruptStateError:
    return CorruptStateError(
        "stored run is missing a required lifecycle record", **error_context(record)
    )


async def append_new(
    tx: Transaction, record: RecordDraft, status: SessionStatus | None
) -> AppendResult:
    """Inserts a record the caller has checked is new."""
    return AppendResult(str(await tx.append_record(record)), True, status)
