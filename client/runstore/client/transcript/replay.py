"""Rebuilding one message list from a run's transcript records (§13.3)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

from runstore.client.model import Page, RunRecord
from runstore.contract.lifecycle import TRANSCRIPT_TYPES
from runstore.contract.transcript.codec import decode_messages
from runstore.contract.transcript.model import Message, TranscriptError

REPLAY_PAGE_SIZE: Final = 512
"""Records per ListRunRecords call when rebuilding a transcript (§13.3)."""


def replay_run_log_events(records: Iterable[RunRecord | None]) -> tuple[list[Message], bool]:
    """Concatenates the messages of the transcript records in ``records`` (§13.3).

    Nulls and other record types are skipped. Returns the messages and whether at
    least one transcript record was seen (an empty transcript array still counts).

    Raises:
        TranscriptError: a transcript payload does not decode; names event key and run.
    """
    messages: list[Message] = []
    found = False
    for record in records:
        if record is None or record.type not in TRANSCRIPT_TYPES:
            continue
        try:
            messages.extend(decode_messages(record.payload))
        except TranscriptError as exc:
            raise TranscriptError(
                f"decode runlog event {record.event_key!r} for run {record.run_id!r}: {exc}"
            ) from exc
        found = True
    return messages, found


class RunLogReader(Protocol):
    """The one store read ``build_messages_from_run_log`` needs (ListRunRecords, §9.6.3)."""

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page: ...


def _check_page(run_id: str, cursor: str, page: Page, seen: set[str]) -> None:
    """Rejects a page no correct store returns (§6.4 rule 5, [N] client checks)."""

    def broken(reason: str) -> TranscriptError:
        return TranscriptError(
            f"broken store page for run {run_id!r} at cursor {cursor!r}: {reason}"
        )

    for index, record in enumerate(page.events):
        if record is None:
            raise broken(f"record {index} is null")
        if record.run_id != run_id:
            raise broken(f"record {index} belongs to run {record.run_id!r}")
        if not record.id:
            raise broken(f"record {index} has no ID")
        if record.id in seen:
            raise broken(f"record ID {record.id!r} repeats")
        seen.add(record.id)
    if not page.next_cursor:
        return
    if not page.events:
        raise broken(f"next cursor {page.next_cursor!r} comes with an empty page")
    if page.next_cursor == cursor:
        raise broken("next cursor repeats the request cursor")
    if page.next_cursor != page.events[-1].id:
        raise broken(
            f"next cursor {page.next_cursor!r} is not the last returned record ID "
            f"{page.events[-1].id!r}"
        )


async def build_messages_from_run_log(store: RunLogReader, run_id: str) -> list[Message]:
    """Rebuilds a run's transcript from its run log (§13.3, CORE).

    Pages ListRunRecords from the empty cursor, ``REPLAY_PAGE_SIZE`` records at a
    time, until the next cursor is empty, checking every page as the [N] client does,
    and replays the transcript records in order. Published seeds ([N] SeedEndID and
    prefix replay) are not consulted: only the run's own records count.

    Raises:
        TranscriptError: no store or run ID; a broken page; an undecodable transcript
            record; or no transcript record at all.
    """
    if store is None:
        raise TranscriptError("runlog store is required")
    if not run_id:
        raise TranscriptError("run id is required")
    messages: list[Message] = []
    found = False
    seen: set[str] = set()
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor, REPLAY_PAGE_SIZE)
        _check_page(run_id, cursor, page, seen)
        delta, page_found = replay_run_log_events(page.events)
        messages.extend(delta)
        found = found or page_found
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    if not found:
        raise TranscriptError(f"runlog for run {run_id!r} has no transcript message events")
    return messages
