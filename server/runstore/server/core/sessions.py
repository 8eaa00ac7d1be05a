"""Session administration (docs/contract.md §9.1): create, load, end and
purge one session, and list its runs."""

from __future__ import annotations

from collections.abc import Collection

from runstore.contract.errors import (
    SessionActiveError,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionPurgedError,
)
from runstore.contract.model import RunStatus, SessionStatus
from runstore.server.core import input_rules, validation
from runstore.server.core.checks import existing_session
from runstore.server.core.model import Nanos, RunState, Session
from runstore.server.core.ports import PURGED, Transaction
from runstore.server.core.section import Section


class Sessions(Section):
    """The session commands of §9.1 over a ``Database``."""

    async def create_session(self, session_id: str, created_at: Nanos | None) -> Session:
        """§9.1.1: idempotent while active; the first created_at is kept (Q19)."""
        input_rules.check_ids(session_id=session_id)
        validation.check_session_command(session_id, created_at, "created_at")
        assert created_at is not None

        async def tx_fn(tx: Transaction) -> Session:
            found = await tx.session(session_id, for_update=True)
            if found is PURGED:
                raise SessionPurgedError(session_id=session_id)
            if isinstance(found, Session):
                if found.status is SessionStatus.ENDED:
                    raise SessionEndedError(session_id=session_id)
                return found
            session = Session(session_id, SessionStatus.ACTIVE, created_at)
            await tx.insert_session(session)
            return session

        return await self._db.write(tx_fn)

    async def load_session(self, session_id: str) -> Session:
        """§9.1.2."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> Session:
            return existing_session(await tx.session(session_id), session_id)

        return await self._db.read(tx_fn)

    async def load_session_status(self, session_id: str) -> SessionStatus:
        """§9.1.3: the empty ID (a sessionless run) is not found."""
        return (await self.load_session(session_id)).status

    async def end_session(self, session_id: str, ended_at: Nanos | None) -> Session:
        """§9.1.4: the first ended_at wins; runs are not touched."""
        input_rules.check_ids(session_id=session_id)
        validation.check_session_command(session_id, ended_at, "ended_at")
        assert ended_at is not None

        async def tx_fn(tx: Transaction) -> Session:
            session = existing_session(await tx.session(session_id, for_update=True), session_id)
            if session.status is SessionStatus.ENDED:
                return session
            await tx.end_session(session_id, ended_at)
            return Session(session_id, SessionStatus.ENDED, session.created_at, ended_at)

        return await self._db.write(tx_fn)

    async def purge_session(self, session_id: str) -> None:
        """§9.1.5: ended and quiescent sessions only; leaves a tombstone."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> None:
            found = await tx.session(session_id, for_update=True)
            if found is PURGED:
                return
            session = existing_session(found, session_id)
            if session.status is SessionStatus.ACTIVE:
                raise SessionActiveError(session_id=session_id)
            if await tx.session_has_running_runs(session_id):
                raise SessionHasActiveRunsError(session_id=session_id)
            await tx.purge_session(session_id, self._clock())

        await self._db.write(tx_fn)

    async def list_runs_by_session(
        self, session_id: str, statuses: Collection[RunStatus] | None = None
    ) -> list[RunState]:
        """§9.1.6: ordered by started_at, then run_id (Q10). ``statuses=None``
        lists every run; an empty collection matches nothing."""
        input_rules.check_ids(session_id=session_id)

        async def tx_fn(tx: Transaction) -> list[RunState]:
            existing_session(await tx.session(session_id), session_id)
            runs = await tx.runs_by_session(session_id)
            return runs if statuses is None else [run for run in runs if run.status in statuses]

        return await self._db.read(tx_fn)
