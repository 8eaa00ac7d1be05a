"""Run records as JSON Lines, one object per record: what ``runstore export`` writes.

A line carries the record's fields and exactly one of ``payload`` (the payload
as JSON) or ``payload_base64``. ``payload`` is used only when the stored bytes
are UTF-8 JSON that a compact encoding reproduces exactly
(``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``), so every
line decodes back to the stored bytes; any other payload (binary, indented,
``\\u003c``-escaped, duplicate keys) goes as base64. See ``docs/export.md``.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any, Final

from runstore.client import RunRecord

_SEPARATORS: Final = (",", ":")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=_SEPARATORS, ensure_ascii=False).encode()


def _as_json(payload: bytes) -> tuple[bool, Any]:
    """``(True, value)`` when ``payload`` is exactly the compact JSON of ``value``."""
    try:
        value = json.loads(payload.decode(), parse_constant=_reject_constant)
        return _compact(value) == payload, value
    except (UnicodeError, ValueError):  # not UTF-8, not JSON, or a lone surrogate
        return False, None


def rfc3339_millis(moment: datetime) -> str:
    """``2026-12-01T10:00:00.123Z``: UTC, always three fraction digits."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record_object(record: RunRecord) -> dict[str, Any]:
    """One record as the JSON object of its line; ``--json`` listings print the same."""
    line: dict[str, Any] = {
        "id": record.id,
        "event_key": record.event_key,
        "run_id": record.run_id,
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "turn_id": record.turn_id,
        "type": record.type,
        "timestamp": rfc3339_millis(record.timestamp),
    }
    exact, value = _as_json(record.payload)
    if exact:
        line["payload"] = value
    else:
        line["payload_base64"] = base64.b64encode(record.payload).decode()
    return line


def record_line(record: RunRecord) -> str:
    """One record as one JSON line (no trailing newline)."""
    text = json.dumps(record_object(record), separators=_SEPARATORS, ensure_ascii=False)
    # Line and paragraph separators are legal in JSON strings but end a line for
    # many readers (``str.splitlines``, JavaScript): escape them, nothing else.
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def record_from_line(line: str) -> RunRecord:
    """The record a line describes: the reader's half of ``record_line``."""
    fields = json.loads(line)
    if ("payload" in fields) == ("payload_base64" in fields):
        raise ValueError("a line has exactly one of payload and payload_base64")
    payload = (
        _compact(fields["payload"])
        if "payload" in fields
        else base64.b64decode(fields["payload_base64"], validate=True)
    )
    return RunRecord(
        id=fields["id"],
        event_key=fields["event_key"],
        run_id=fields["run_id"],
        agent_id=fields["agent_id"],
        session_id=fields["session_id"],
        turn_id=fields["turn_id"],
        type=fields["type"],
        timestamp=datetime.fromisoformat(fields["timestamp"]),
        payload=payload,
    )
