"""Transcript messages, their JSON codec, run-log replay and validators (§13).

Transcript records (``transcript_messages_seeded`` / ``transcript_messages_appended``,
§13.2) carry a JSON array of messages. The store never looks inside them (Q15);
this package is the caller's side: typed messages and parts (§13.1), a strict codec
that preserves numbers byte for byte, replay of a run log into one message list
(§13.3) and the pure transcript validators (§13.4).

Modules along those jobs: ``model`` (messages, parts, errors), ``codec``, ``replay``
and ``validate``; every public name is importable from here.
"""

from __future__ import annotations

from runstore.client.transcript.replay import (
    REPLAY_PAGE_SIZE,
    RunLogReader,
    build_messages_from_run_log,
    replay_run_log_events,
)
from runstore.client.transcript.validate import (
    validate_bedrock,
    validate_planner_transcript,
)
from runstore.contract.transcript.codec import (
    decode_json,
    decode_messages,
    encode_json,
    encode_messages,
)
from runstore.contract.transcript.model import (
    DOCUMENT_FORMATS,
    IMAGE_FORMATS,
    LOCATION_KINDS,
    PART_KEYS,
    ROLES,
    CacheCheckpointPart,
    Citation,
    CitationLocation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    JsonDecimal,
    JSONObject,
    JSONValue,
    LocationKind,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    TranscriptError,
    TranscriptValidationError,
)

__all__ = [
    "DOCUMENT_FORMATS",
    "IMAGE_FORMATS",
    "LOCATION_KINDS",
    "PART_KEYS",
    "REPLAY_PAGE_SIZE",
    "ROLES",
    "CacheCheckpointPart",
    "Citation",
    "CitationLocation",
    "CitationsPart",
    "DocumentPart",
    "ImagePart",
    "JSONObject",
    "JSONValue",
    "JsonDecimal",
    "LocationKind",
    "Message",
    "Part",
    "RunLogReader",
    "TextPart",
    "ThinkingPart",
    "ToolResultPart",
    "ToolUsePart",
    "TranscriptError",
    "TranscriptValidationError",
    "build_messages_from_run_log",
    "decode_json",
    "decode_messages",
    "encode_json",
    "encode_messages",
    "replay_run_log_events",
    "validate_bedrock",
    "validate_planner_transcript",
]
