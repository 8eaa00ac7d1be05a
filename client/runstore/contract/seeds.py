"""Seeds and preparations (docs/contract.md §9.7): their values, shared by the
client and the server core, and the two size limits measured as goa-ai does.

goa-ai bounds a seed command and a seed page by the length of their Go
``encoding/json`` encoding (field names as keys, ``[]byte`` as base64, nil
slices and pointers as ``null``, HTML-safe string escapes, a raw message
compacted). ``command_size`` and ``page_size`` compute that length without
building the text, from the same spelling ``_gofmt.json_string`` gives
lifecycle payloads, so a command a Go worker may send is one runstore accepts
(docs/limits.md).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from runstore.contract._gofmt import json_string

EMPTY_SEED_END_ID: Final = "0"
"""The end of an attempt before its first record."""

MAX_SEED_COMMAND_BYTES: Final = 1_000_000
"""The longest seed declaration or append, in bytes of its Go JSON encoding."""

MAX_SEED_PAGE_BYTES: Final = MAX_SEED_COMMAND_BYTES + 8 + 2 * len("9223372036854775807") - 1
"""The longest seed page (records and cursor), likewise: 1,000,045."""

SEED_PAGE_RECORDS: Final = 512
"""The most records one seed page holds."""


class SeedKind(enum.StrEnum):
    """Where a seed's history comes from (§9.7.1): literal messages, the next
    turn of a saved run, or a continuation."""

    LITERAL = "literal"
    NEXT_TURN = "next_turn"
    CONTINUATION = "continuation"


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt already rendered into a literal, with the scope it resolved under."""

    prompt_id: str
    version: str
    scope_session_id: str = ""
    scope_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SeedDeclaration:
    """The owner and source of a run's initial history (§9.7.1). ``kind`` None
    is the wire's unspecified value, which every command refuses."""

    agent_id: str
    run_id: str
    session_id: str
    command_id: str
    attempt_id: str
    kind: SeedKind | None
    source_run_id: str = ""
    source_end_id: str = ""
    exclude_reasoning: bool = False
    rendered_prompts: tuple[RenderedPrompt, ...] = ()


@dataclass(frozen=True)
class HistoryPrefix:
    """A saved run's history through one of its record IDs."""

    run_id: str
    end_id: str
    exclude_system: bool = False
    exclude_reasoning: bool = False


@dataclass(frozen=True)
class RunSeed:
    """A run's initial history as stored: its declaration, the saved prefix it
    starts from (if any) and where it ends."""

    declaration: SeedDeclaration
    source: HistoryPrefix | None
    end_id: str
    """The last accepted history record, ``EMPTY_SEED_END_ID`` before the first."""


@dataclass(frozen=True)
class LiteralPart:
    """One chunk of a literal seed's bytes; ``final`` on the last."""

    data: bytes
    final: bool


@dataclass(frozen=True)
class SeedRecord:
    """One record; exactly one of ``messages``, ``literal_part``, ``prefix``
    and ``prepared`` is set (non-empty)."""

    key: str
    previous_id: str
    id: str = ""
    messages: bytes = b""
    literal_part: LiteralPart | None = None
    prefix: HistoryPrefix | None = None
    prepared: bytes = b""


@dataclass(frozen=True)
class SeedAppend:
    """``append_run_seed``'s command: one record of an attempt's seed."""

    run_id: str
    attempt_id: str
    record: SeedRecord


@dataclass(frozen=True)
class SeedPublication:
    """``publish_run_seed``'s command: the attempt's seed, through
    ``seed_end_id``, becomes the run's (§9.7)."""

    run_id: str
    attempt_id: str
    seed_end_id: str
    end_id: str
    prepared_bytes: int


@dataclass(frozen=True)
class PreparationOperation:
    """Names one preparation: the run and the command that prepares it."""

    agent_id: str
    run_id: str
    session_id: str
    command_id: str


@dataclass(frozen=True)
class RunPreparation:
    """An accepted body: its history (``seed``) and compiled start."""

    seed: RunSeed
    end_id: str
    prepared_bytes: int


@dataclass(frozen=True)
class SeedPage:
    """One page of seed or preparation records; ``next_cursor`` empty at the end."""

    records: tuple[SeedRecord, ...]
    next_cursor: str


# --- Sizes of the Go JSON encoding ----------------------------------------------


def _string(value: str) -> int:
    return len(json_string(value, go=True).encode("utf-8"))


def _bool(value: bool) -> int:
    return 4 if value else 5


def _bytes(value: bytes) -> int:
    """A ``[]byte``: base64 in quotes, or ``null`` when empty (nil)."""
    return 2 + 4 * ((len(value) + 2) // 3) if value else 4


def _object(members: Sequence[tuple[str, int]]) -> int:
    """An object of the given (key, value size) members, in order."""
    if not members:
        return 2
    return 1 + sum(_string(key) + 1 + size for key, size in members) + len(members) - 1 + 1


def _array(sizes: Sequence[int]) -> int:
    """A slice: ``null`` when empty (nil), else its elements in brackets."""
    return 2 + sum(sizes) + len(sizes) - 1 if sizes else 4


_RAW_TOKENS: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[ \t\r\n]+', re.DOTALL)
_HTML: Final = re.compile(rb"[<>&]|\xe2\x80[\xa8\xa9]")


def _raw(value: bytes) -> int:
    """A raw JSON message as Go writes it: compacted (whitespace between tokens
    dropped) with ``<``, ``>``, ``&``, U+2028 and U+2029 in strings escaped to
    six bytes; ``null`` when empty. ``value`` is valid JSON."""
    if not value.strip(b" \t\r\n"):
        return 4
    size = len(value)
    for token in _RAW_TOKENS.finditer(value):
        text = token.group()
        if text[0] == 0x22:  # a string: whitespace inside stays
            for escape in _HTML.finditer(text):
                size += 6 - len(escape.group())
        else:
            size -= len(text)
    return size


def _labels(labels: Mapping[str, str]) -> int:
    """A ``map[string]string``: keys sorted (Go sorts them), ``null`` when empty."""
    if not labels:
        return 4
    return _object([(key, _string(labels[key])) for key in sorted(labels)])


def _prompt(prompt: RenderedPrompt) -> int:
    scope = _object(
        [("SessionID", _string(prompt.scope_session_id)), ("Labels", _labels(prompt.scope_labels))]
    )
    return _object(
        [
            ("PromptID", _string(prompt.prompt_id)),
            ("Version", _string(prompt.version)),
            ("Scope", scope),
        ]
    )


def _prefix(prefix: HistoryPrefix | None) -> int:
    if prefix is None:
        return 4
    return _object(
        [
            ("RunID", _string(prefix.run_id)),
            ("EndID", _string(prefix.end_id)),
            ("ExcludeSystem", _bool(prefix.exclude_system)),
            ("ExcludeReasoning", _bool(prefix.exclude_reasoning)),
        ]
    )


def declaration_size(declaration: SeedDeclaration) -> int:
    """The Go JSON length of a ``SeedDeclaration``."""
    kind = declaration.kind.value if declaration.kind is not None else ""
    return _object(
        [
            ("AgentID", _string(declaration.agent_id)),
            ("RunID", _string(declaration.run_id)),
            ("SessionID", _string(declaration.session_id)),
            ("CommandID", _string(declaration.command_id)),
            ("AttemptID", _string(declaration.attempt_id)),
            ("Kind", _string(kind)),
            ("SourceRunID", _string(declaration.source_run_id)),
            ("SourceEndID", _string(declaration.source_end_id)),
            ("ExcludeReasoning", _bool(declaration.exclude_reasoning)),
            ("RenderedPrompts", _array([_prompt(p) for p in declaration.rendered_prompts])),
        ]
    )


def record_size(record: SeedRecord) -> int:
    """The Go JSON length of a ``SeedRecord`` (``literal_part`` omitted when absent)."""
    members = [
        ("ID", _string(record.id)),
        ("Key", _string(record.key)),
        ("PreviousID", _string(record.previous_id)),
        ("Messages", _raw(record.messages)),
    ]
    if record.literal_part is not None:
        part = record.literal_part
        members.append(
            ("literal_part", _object([("Data", _bytes(part.data)), ("Final", _bool(part.final))]))
        )
    members += [("Prefix", _prefix(record.prefix)), ("Prepared", _bytes(record.prepared))]
    return _object(members)


def append_size(command: SeedAppend) -> int:
    """The Go JSON length of a ``SeedAppend``."""
    return _object(
        [
            ("RunID", _string(command.run_id)),
            ("AttemptID", _string(command.attempt_id)),
            ("Record", record_size(command.record)),
        ]
    )


def page_size(record_sizes: Sequence[int], next_cursor: str) -> int:
    """The Go JSON length of a ``SeedPage`` of records of the given sizes."""
    return _object([("Records", _array(record_sizes)), ("NextCursor", _string(next_cursor))])
