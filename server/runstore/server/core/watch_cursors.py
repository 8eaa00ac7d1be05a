"""What Watch reads (docs/contract.md §9.9): the next full page of a run's or a
session's records after a cursor position. The stream loop is ``watch``."""

from __future__ import annotations

from runstore.contract.errors import RunNotFoundError
from runstore.server.core import paging
from runstore.server.core.checks import existing_session
from runstore.server.core.model import RunState
from runstore.server.core.ports import Transaction
from runstore.server.core.section import Section


class WatchCursors(Section):
    """The reads behind a Watch stream."""

    async def run_records_after(self, run_id: str, after: int) -> tuple[RunState, paging.Cut]:
        """The run and its next full page after position ``after`` (a Watch read)."""
        page_size, budget = self._limits.records, self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> tuple[RunState, paging.Cut]:
            run = await tx.run(run_id)
            if run is None:
                raise RunNotFoundError(run_id=run_id)
            rows = await tx.run_records(run_id, after, page_size + 1, budget)
            cut = paging.cut_rows([(record.id, record) for record in rows], page_size, budget)
            return run, cut

        return await self._db.read(tx_fn)

    async def session_records_after(self, session_id: str, after: int) -> paging.Cut:
        """A session's next full page after position ``after`` (a Watch read)."""
        page_size, budget = self._limits.records, self._limits.payload_bytes

        async def tx_fn(tx: Transaction) -> paging.Cut:
            existing_session(await tx.session(session_id), session_id)
            rows = await tx.session_records(session_id, after, page_size + 1, budget)
            return paging.cut_rows(rows, page_size, budget)

        return await self._db.read(tx_fn)
