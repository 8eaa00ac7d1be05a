"""Reads (docs/contract.md §9.6): a run, its checkpoint, and pages of a run's,
a session's and a transcript's records, each read in one snapshot."""

from __future__ import annotations

from collections.abc import Sequence

from runstore.contract import lifecycle
from runstore.contract.errors import (
    InvalidTranscriptPositionError,
    RunNotFoundError,
    RunSuspensionNotFoundError,
    quote,
)
from runstore.contract.model import Checkpoint
from runstore.server.core import input_rules, paging
from runstore.server.core.checks import existing_session
from runstore.server.core.model import Page, RunState
from runstore.server.core.ports import Transaction
from runstore.server.core.section import Section


class Reads(Section):
    """The reads of §9.6 over a ``Database``."""

    async def load_run(self, run_id: str) -> RunState:
        """§9.6.1."""
        input_rules.check_ids(run_id=run_id)

        async def tx_fn(tx: Transaction) -> RunState:
            run = await tx.run(run_id)
            if run is None:
                raise RunNotFoundError(run_id=run_id)
            return run

        return await self._db.read(tx_fn)

    async def load_run_suspension(self, run_id: str) -> Checkpoint:
        """§9.6.2: the exact stored checkpoint."""
        run = await self.load_run(run_id)
        if run.checkpoint is None:
            raise RunSuspensionNotFoundError(run_id=run_id, session_id=run.session_id)
        return run.checkpoint

    async def list_run_records(
        self, run_id: str, cursor: str, limit: int, types: Sequence[str] = ()
    ) -> Page:
        """§9.6.3, §6.4: the cursor counts records already read (= last ID).

        With ``types``, only records of those types, from the next
        ``paging.TYPED_SCAN`` records at most: a page that found fewer than it
        could hold, while the run has records past that stretch, continues
        after the stretch (IDs are dense, so its end is ``after + TYPED_SCAN``).
        """
        input_rules.check_ids(run_id=run_id)
        paging.check_limit(limit)
        after = paging.parse_cursor(cursor)
        wanted = paging.record_types(types)
        page_size = min(limit, self._limits.records)
        budget = self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> Page:
            if await tx.run(run_id) is None:
                raise RunNotFoundError(run_id=run_id)
            if not wanted:
                rows = await tx.run_records(run_id, after, page_size + 1, budget)
                return paging.cut_page([(record.id, record) for record in rows], page_size, budget)
            through = min(after + paging.TYPED_SCAN, paging.MAX_POSITION)
            rows = await tx.typed_run_records(run_id, after, through, wanted, page_size + 1, budget)
            page = paging.cut_page([(record.id, record) for record in rows], page_size, budget)
            if page.next_cursor or through >= await tx.run_tail(run_id):
                return page
            return Page(page.events, str(through))

        return await self._db.read(tx_fn)

    async def list_session_run_records(self, session_id: str, cursor: str, limit: int) -> Page:
        """§9.6.4, D3: commit order across the session's runs."""
        input_rules.check_ids(session_id=session_id)
        paging.check_limit(limit)
        after = paging.parse_cursor(cursor)
        page_size = min(limit, self._limits.records)
        budget = self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> Page:
            existing_session(await tx.session(session_id), session_id)
            rows = await tx.session_records(session_id, after, page_size + 1, budget)
            return paging.cut_page(rows, page_size, budget)

        return await self._db.read(tx_fn)

    async def run_tail(self, run_id: str) -> int:
        """The ID of the run's newest record (0: none). Not a contract read: a
        reader (the console) opens a long history at its tail with it, then
        pages back from there with ``list_run_records``."""
        input_rules.check_ids(run_id=run_id)

        async def tx_fn(tx: Transaction) -> int:
            if await tx.run(run_id) is None:
                raise RunNotFoundError(run_id=run_id)
            return await tx.run_tail(run_id)

        return await self._db.read(tx_fn)

    async def session_tail(self, session_id: str) -> int:
        """The session position of its newest record (0: none); as ``run_tail``."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> int:
            existing_session(await tx.session(session_id), session_id)
            return await tx.session_tail(session_id)

        return await self._db.read(tx_fn)

    async def list_run_transcript_records(
        self, run_id: str, through_record_id: str, after_record_id: str, limit: int
    ) -> Page:
        """§9.6.5: transcript records through a fixed end; stable pages."""
        input_rules.check_ids(run_id=run_id)
        if not through_record_id or limit <= 0:
            raise InvalidTranscriptPositionError(
                run_id=run_id, field="limit" if through_record_id else "through_record_id"
            )
        page_size = min(limit, paging.TRANSCRIPT_PAGE_RECORDS)
        budget = paging.TRANSCRIPT_PAGE_BYTES

        async def tx_fn(tx: Transaction) -> Page:
            if await tx.run(run_id) is None:
                raise RunNotFoundError(run_id=run_id)
            through, after = await _transcript_range(tx, run_id, through_record_id, after_record_id)
            rows = await tx.transcript_records(run_id, after, through, page_size + 1, budget)
            return paging.cut_transcript_page(rows, page_size)

        return await self._db.read(tx_fn)


async def _transcript_range(
    tx: Transaction, run_id: str, through_record_id: str, after_record_id: str
) -> tuple[int, int]:
    """§9.6.5 step 4: the end is any record of the run; the start, if given, is
    a transcript record at or before the end."""

    def invalid(field: str) -> InvalidTranscriptPositionError:
        return InvalidTranscriptPositionError(
            f"invalid transcript position: run {quote(run_id)}", run_id=run_id, field=field
        )

    through = paging.parse_record_id(through_record_id)
    if through is None or await tx.record_by_id(run_id, through) is None:
        raise invalid("through_record_id")
    if not after_record_id:
        return through, 0
    after = paging.parse_record_id(after_record_id)
    if after is None or after > through:
        raise invalid("after_record_id")
    start = await tx.record_by_id(run_id, after)
    if start is None or start.type not in lifecycle.TRANSCRIPT_TYPES:
        raise invalid("after_record_id")
    return through, after
