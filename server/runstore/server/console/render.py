"""Values as the console shows them: times, payloads as formatted JSON, transcripts.

Everything here returns plain strings and data; the templates escape all of it
(autoescape), so a payload is always text, never markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from runstore.contract.lifecycle import TRANSCRIPT_TYPES
from runstore.contract.transcript.codec import decode_messages
from runstore.contract.transcript.model import (
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    TranscriptError,
)
from runstore.server.core.model import Nanos, RunRecord

COLLAPSED_BYTES: Final = 2048
"""A formatted payload longer than this starts collapsed."""
COLLAPSED_LINES: Final = 24
"""...and so does one of more lines than this."""
SHOWN_BYTES: Final = 256 * 1024
"""At most this much of one payload is put in a page; the rest is cut, and said so."""


def timestamp(nanos: Nanos | None) -> str:
    """ISO 8601 in UTC with milliseconds; "" for no time."""
    if nanos is None:
        return ""
    moment = datetime.fromtimestamp(nanos / 1e9, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{(nanos // 1_000_000) % 1000:03d}Z"


def iso(nanos: Nanos | None) -> str:
    """``timestamp`` as a ``<time datetime>`` value (the page shows it in local
    time when the reader asks for that, console.js)."""
    return timestamp(nanos).replace(" ", "T")


def duration(nanos: Nanos | None) -> str:
    """A span as a person reads it: ``850 ms``, ``12.3 s``, ``4m 05s``, ``2h 03m``,
    ``3d 04h``; "" for none."""
    if nanos is None or nanos < 0:
        return ""
    millis = nanos // 1_000_000
    if millis < 1000:
        return f"{millis} ms"
    if millis < 60_000:
        return f"{millis / 1000:.1f} s"
    seconds = millis // 1000
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def parse_time(text: str) -> Nanos | None:
    """``YYYY-MM-DDTHH:MM[:SS]`` (a datetime-local input, read as UTC) or a date,
    as nanoseconds; None for "" and for anything else."""
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def json_object(payload: bytes) -> dict[str, Any]:
    """``payload`` as a JSON object, {} when it is not one."""
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Shown:
    """A payload as text: formatted JSON when it is JSON, else its UTF-8."""

    text: str
    size: int
    """The payload's size in bytes."""
    cut: bool
    """Only the first ``SHOWN_BYTES`` are in ``text``."""
    collapsed: bool

    def as_json(self) -> dict[str, Any]:
        return {"text": self.text, "size": self.size, "cut": self.cut, "collapsed": self.collapsed}


def formatted(payload: bytes) -> Shown:
    size = len(payload)
    head = payload[:SHOWN_BYTES]
    text: str
    try:
        text = json.dumps(json.loads(head), indent=2, ensure_ascii=False, sort_keys=False)
    except (ValueError, UnicodeDecodeError, RecursionError):
        text = head.decode("utf-8", "replace")
    cut = size > SHOWN_BYTES
    collapsed = len(text) > COLLAPSED_BYTES or text.count("\n") >= COLLAPSED_LINES
    return Shown(text, size, cut, collapsed)


def record_json(position: int, record: RunRecord) -> dict[str, Any]:
    """A record as the live view receives it (the JS builds its row with textContent)."""
    return {
        "position": position,
        "id": str(record.id),
        "run_id": record.run_id,
        "agent_id": record.agent_id,
        "turn_id": record.turn_id,
        "type": record.type,
        "event_key": record.event_key,
        "timestamp": timestamp(record.timestamp),
        "payload": formatted(record.payload).as_json(),
    }


# --- Transcript: tool calls paired with their results (§13.1) -------------------------


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    input: str
    record_id: str
    result: str | None = None
    is_error: bool = False
    result_record_id: str = ""


@dataclass(slots=True)
class Turn:
    """One transcript message: its role, its text and its tool calls or results."""

    role: str
    record_id: str
    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    orphan_results: list[tuple[str, str, bool]] = field(default_factory=list)
    """(tool_use_id, content, is_error) whose call is not on this page."""


@dataclass(slots=True)
class Transcript:
    turns: list[Turn]
    errors: list[str]
    """Transcript records that do not decode, with why."""


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def transcript(records: Iterable[RunRecord]) -> Transcript:
    """The page's transcript records, oldest first, as turns whose tool calls
    carry their results (a result is matched to its call by ``tool_use_id``)."""
    turns: list[Turn] = []
    errors: list[str] = []
    calls: dict[str, ToolCall] = {}
    for record in records:
        if record.type not in TRANSCRIPT_TYPES:
            continue
        try:
            messages: list[Message] = decode_messages(record.payload)
        except TranscriptError as exc:
            errors.append(f"record {record.id}: {exc}")
            continue
        for message in messages:
            turn = Turn(message.role, str(record.id))
            for part in message.parts:
                if isinstance(part, TextPart | ThinkingPart) and part.text:
                    turn.texts.append(part.text)
                elif isinstance(part, ToolUsePart):
                    call = ToolCall(part.id, part.name, _json_text(part.input), str(record.id))
                    calls[part.id] = call
                    turn.calls.append(call)
                elif isinstance(part, ToolResultPart):
                    content = _json_text(part.content)
                    matched = calls.get(part.tool_use_id)
                    if matched is not None and matched.result is None:
                        matched.result = content
                        matched.is_error = part.is_error
                        matched.result_record_id = str(record.id)
                    else:
                        turn.orphan_results.append((part.tool_use_id, content, part.is_error))
            if turn.texts or turn.calls or turn.orphan_results:
                turns.append(turn)
    return Transcript(turns, errors)
