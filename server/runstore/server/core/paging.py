"""Read arguments and page shapes (§6.4, §9.6.5, D3), as pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from runstore.contract.errors import ReadArgumentError, ValidationError, quote
from runstore.server.config import DEFAULTS
from runstore.server.core.input_rules import check_id
from runstore.server.core.model import Page, RunRecord

TRANSCRIPT_PAGE_RECORDS: Final = 512
"""ListRunTranscriptRecords returns at most this many records per page (§9.6.5)."""

TRANSCRIPT_PAGE_BYTES: Final = 1_048_576
"""...and at most this many payload bytes, inclusive (§6.5)."""

DEFAULT_PAGE_LIMIT: Final = DEFAULTS.page_limit
"""Largest page ListRunRecords / ListSessionRunRecords return (D3)."""

DEFAULT_PAGE_BYTES: Final = DEFAULTS.page_bytes
"""Payload budget of one list page, so a page always fits a gRPC message."""

MAX_POSITION: Final = 2**63 - 1
"""The largest position a cursor names (a 64-bit signed integer)."""

TYPE_SLOTS: Final = 16
"""Record types one ListRunRecords may filter by (one statement shape holds
them all: fewer names fill the slots by repeating one)."""

TYPED_SCAN: Final = 10_000
"""Records a type-filtered ListRunRecords page examines at most: its work is
bounded whatever the run's length or the types' rarity (docs/contract.md §9.6.3)."""


@dataclass(frozen=True, slots=True)
class PageLimits:
    """Server-side caps on list pages; callers always follow next_cursor (Q11)."""

    records: int = DEFAULT_PAGE_LIMIT
    """At most this many records per ListRunRecords/ListSessionRunRecords page."""
    payload_bytes: int = DEFAULT_PAGE_BYTES
    """Stop a page before it exceeds this many payload bytes (one record always fits)."""


DEFAULT_PAGE_LIMITS: Final = PageLimits()


def check_limit(limit: int) -> None:
    """§6.4 rule 1: there is no default page size."""
    if limit <= 0:
        raise ReadArgumentError("limit must be greater than zero", field="limit")


def parse_cursor(cursor: str) -> int:
    """§6.4 rule 2 and D3: "" is the start; otherwise ASCII digits, value > 0.

    Returns how many records of the list to skip. Values beyond the largest
    position simply read past the end (an empty page).
    """
    if not cursor:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or int(cursor) == 0:
        raise ReadArgumentError(f"invalid cursor {quote(cursor)}", field="cursor")
    return min(int(cursor), MAX_POSITION)


def record_types(types: Sequence[str]) -> list[str]:
    """A type filter as the statement takes it: ``TYPE_SLOTS`` names ([] for no
    filter). Each must be a type a record can have (non-empty, an id's rules)."""
    if not types:
        return []
    if len(types) > TYPE_SLOTS:
        raise ReadArgumentError(
            f"types names {len(types)} record types; at most {TYPE_SLOTS}", field="types"
        )
    for name in types:
        if not name:
            raise ReadArgumentError("types must not hold an empty type", field="types")
        check_id(name, "types")
    return [*types, *[types[0]] * (TYPE_SLOTS - len(types))]


def parse_record_id(text: str) -> int | None:
    """A canonical record ID ("1", "2", ...; §6.2), or None if ``text`` is not one.

    Transcript positions compare IDs as exact strings upstream, so "01" names
    no record.
    """
    if not text or not (text.isascii() and text.isdigit()) or text[0] == "0":
        return None
    value = int(text)
    return value if value <= MAX_POSITION else None


def cut_transcript_page(rows: list[RunRecord], page_size: int) -> Page:
    """§9.6.5 step 6: stop at ``page_size`` records or before the record that
    would push the payload total past 1 MiB; a single record larger than
    that fails the page when the walk reaches it."""
    events: list[RunRecord] = []
    budget = TRANSCRIPT_PAGE_BYTES
    for record in rows:
        if len(events) == page_size:
            return Page(events, str(events[-1].id))
        size = len(record.payload)
        if size > TRANSCRIPT_PAGE_BYTES:
            raise ValidationError(
                f"transcript record {quote(str(record.id))} payload size {size} exceeds "
                f"supported page size {TRANSCRIPT_PAGE_BYTES} bytes",
                run_id=record.run_id,
                event_key=record.event_key,
            )
        if size > budget:
            return Page(events, str(events[-1].id))
        events.append(record)
        budget -= size
    return Page(events)


@dataclass(frozen=True, slots=True)
class Cut:
    """A page with the position of its last record (0 when empty) and whether
    rows were left after it."""

    events: list[RunRecord]
    last_position: int
    more: bool


def page_length(sizes: Iterable[int], page_size: int, budget: int) -> int:
    """How many items, of the given sizes in bytes, make one page: at most
    ``page_size``, stopping before the item that would take the page past
    ``budget``. The first item always fits, so paging always moves on (and a
    page stays within the request limit: what was accepted is readable)."""
    count = 0
    for size in sizes:
        if count == page_size or (count and size > budget):
            break
        count += 1
        budget -= size
    return count


def cut_rows(rows: list[tuple[int, RunRecord]], page_size: int, budget: int) -> Cut:
    """Up to ``page_size`` rows within the payload budget (``page_length``)."""
    kept = page_length((len(record.payload) for _, record in rows), page_size, budget)
    return Cut(
        [record for _, record in rows[:kept]], rows[kept - 1][0] if kept else 0, kept < len(rows)
    )


def cut_page(rows: list[tuple[int, RunRecord]], page_size: int, budget: int) -> Page:
    """``cut_rows`` as a list page: ``next_cursor`` is the last position
    returned when more rows exist (§6.4)."""
    cut = cut_rows(rows, page_size, budget)
    return Page(cut.events, str(cut.last_position) if cut.more else "")
