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
from runstore.contract.seeds import SeedRecord

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


def _bytes_field(line: dict[str, Any], name: str, data: bytes) -> None:
    """``name`` as JSON when the bytes are exactly its compact JSON, else
    ``name_base64`` (the rule of a record's payload)."""
    exact, value = _as_json(data)
    if exact:
        line[name] = value
    else:
        line[f"{name}_base64"] = base64.b64encode(data).decode()


def seed_record_object(run_id: str, record: SeedRecord) -> dict[str, Any]:
    """One record of a run's seed (docs/export.md#seeds): its ID, key and
    previous ID, then its body: ``messages``, ``literal_part``, ``prefix`` or
    ``prepared`` (bytes as a payload's are: JSON, or ``*_base64``)."""
    line: dict[str, Any] = {
        "seed_of": run_id,
        "id": record.id,
        "key": record.key,
        "previous_id": record.previous_id,
    }
    if record.literal_part is not None:
        part: dict[str, Any] = {"final": record.literal_part.final}
        _bytes_field(part, "data", record.literal_part.data)
        line["literal_part"] = part
    elif record.prefix is not None:
        line["prefix"] = {
            "run_id": record.prefix.run_id,
            "end_id": record.prefix.end_id,
            "exclude_system": record.prefix.exclude_system,
            "exclude_reasoning": record.prefix.exclude_reasoning,
        }
    elif record.prepared:
        _bytes_field(line, "prepared", record.prepared)
    else:
        _bytes_field(line, "messages", record.messages)
    return line


def json_line(value: dict[str, Any]) -> str:
    """A JSON object as one line: compact, UTF-8, U+2028/U+2029 escaped."""
    # Line and paragraph separators are legal in JSON strings but end a line for
    # many readers (``str.splitlines``, JavaScript): escape them, nothing else.
    text = json.dumps(value, separators=_SEPARATORS, ensure_ascii=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def record_line(record: RunRecord) -> str:
    """One record as one JSON line (no trailing newline)."""
    return json_line(record_object(record))


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
