"""Rules every request's text obeys, on both backends alike (D8), as pure functions.

* Every id and key (session, run, agent, turn, parent and predecessor run,
  event key, suspension id, memory agent and run, context key, idempotency
  key) is UTF-8 without U+0000 and at most ``MAX_ID_BYTES`` bytes: every
  composite index stays far below PostgreSQL's 2,704-byte entry limit, and data
  can move between SQLite and PostgreSQL.
* Other text stored as text (record and memory event types, cancellation
  reasons, label keys and values) has no U+0000, which PostgreSQL text cannot
  hold.
* Caller JSON nested deeper than the parser can follow is "exceeded max depth",
  like lifecycle payloads.

Violations are ``ValidationError`` (INVALID_ARGUMENT) naming the field. These
checks run before any transaction, so a rejected command writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from runstore.contract.errors import ReadArgumentError, ValidationError
from runstore.server.core.model import RecordDraft, RunStart
from runstore.server.core.validation import MAX_NANOS, MIN_NANOS

MAX_ID_BYTES: Final = 1024
"""Longest id or key, in bytes of UTF-8."""

_NUL: Final = "\x00"


def check_text(value: str, field: str) -> None:
    """Text stored as text: no U+0000."""
    if _NUL in value:
        raise ValidationError(f"{field} must not contain U+0000", field=field)


def check_id(value: str, field: str) -> None:
    """An id or key: no U+0000 and at most ``MAX_ID_BYTES`` bytes of UTF-8."""
    check_text(value, field)
    # Four bytes per character at most: short ids need no encoding.
    if len(value) * 4 > MAX_ID_BYTES and len(value.encode("utf-8")) > MAX_ID_BYTES:
        raise ValidationError(f"{field} is longer than {MAX_ID_BYTES} bytes", field=field)


def check_ids(**fields: str) -> None:
    """``check_id`` for each field name and value, in the given order."""
    for field, value in fields.items():
        check_id(value, field)


def check_labels(labels: Mapping[str, str], field: str) -> None:
    for key, value in labels.items():
        # The field's name is made only for the error.
        if _NUL in key:
            check_text(key, f"{field}.key")
        if _NUL in value:
            check_text(value, f"{field}.value")


_RECORD_IDS: Final = ("event_key", "run_id", "agent_id", "session_id", "turn_id")
"""A record's ids and keys, in the order they are checked."""


def check_record(record: RecordDraft | None, field: str) -> None:
    """The ids and text of a record a command carries (absent: nothing to check)."""
    if record is None:
        return
    for name in _RECORD_IDS:
        value: str = getattr(record, name)
        # What check_id asks, without making the field's name unless it fails.
        if _NUL in value or len(value) * 4 > MAX_ID_BYTES:
            check_id(value, f"{field}.{name}")
    if _NUL in record.type:
        check_text(record.type, f"{field}.type")


def check_run_start(run: RunStart, **records: RecordDraft | None) -> None:
    """A start command: the RunStart's ids and labels, then each record's."""
    check_ids(
        **{
            "run.run_id": run.run_id,
            "run.agent_id": run.agent_id,
            "run.session_id": run.session_id,
            "run.parent_run_id": run.parent_run_id,
            "run.predecessor_run_id": run.predecessor_run_id,
            "run.seed_end_id": run.seed_end_id,
        }
    )
    check_labels(run.labels, "run.labels")
    for field, record in records.items():
        check_record(record, field)


def check_page_key(key: tuple[int, str] | None) -> None:
    """A listing's page token holds a time and an id: a forged one must be a
    time of the Timestamp range and an id of this rule, like the rows it names."""
    if key is None:
        return
    at, last_id = key
    if not MIN_NANOS <= at <= MAX_NANOS or _NUL in last_id or len(last_id.encode()) > MAX_ID_BYTES:
        raise ReadArgumentError("invalid page_token", field="page_token")


def decode_json(raw: bytes, field: str, not_json: str = "") -> Any:
    """Caller JSON, decoded. Not JSON (or not UTF-8) is ``not_json`` (default
    "<field> must be JSON"); nesting deeper than the parser follows is
    "exceeded max depth"; both name ``field``."""
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValidationError(f"{field}: json: exceeded max depth", field=field) from None
    except (UnicodeDecodeError, ValueError):
        raise ValidationError(not_json or f"{field} must be JSON", field=field) from None
