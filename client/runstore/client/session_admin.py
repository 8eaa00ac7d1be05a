"""``RemoteSessionAdmin``: the host's ``SessionAdmin`` over gRPC (asyncio):
sessions created, ended and purged, retention's purges, and the listings of
sessions and runs page by page (§9.8)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from runstore.client import arguments, convert
from runstore.client.calls import Client
from runstore.client.model import (
    PurgeResult,
    RunMeta,
    RunPage,
    RunStatus,
    Session,
    SessionPage,
    SessionStatus,
)
from runstore.contract.model import Item, ListPage
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc


class RemoteSessionAdmin(Client):
    """The host's ``SessionAdmin`` over gRPC; same options as ``RemoteStore``."""

    def __init__(self, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self.stub = sa_grpc.SessionAdminStub(self.channel)

    async def create_session(self, session_id: str, created_at: datetime) -> Session:
        arguments.text("session_id", session_id)
        arguments.moment("created_at", created_at)
        request = sa.CreateSessionRequest(
            session_id=session_id, created_at=convert.timestamp(created_at)
        )
        return convert.from_session((await self._call(self.stub.CreateSession, request)).session)

    async def load_session(self, session_id: str) -> Session:
        arguments.text("session_id", session_id)
        request = sa.LoadSessionRequest(session_id=session_id)
        return convert.from_session((await self._call(self.stub.LoadSession, request)).session)

    async def end_session(self, session_id: str, ended_at: datetime) -> Session:
        arguments.text("session_id", session_id)
        arguments.moment("ended_at", ended_at)
        request = sa.EndSessionRequest(session_id=session_id, ended_at=convert.timestamp(ended_at))
        return convert.from_session((await self._call(self.stub.EndSession, request)).session)

    async def purge_session(self, session_id: str) -> None:
        arguments.text("session_id", session_id)
        await self._call(self.stub.PurgeSession, sa.PurgeSessionRequest(session_id=session_id))

    async def purge_ended_sessions(self, ended_before: datetime, limit: int = 0) -> PurgeResult:
        """Purges up to ``limit`` (0: 100) ended sessions without running runs that
        ended before ``ended_before``; call again while ``more``. A retried call
        that had purged some reports only what its last attempt purged."""
        arguments.moment("ended_before", ended_before)
        arguments.count("limit", limit)
        request = sa.PurgeEndedSessionsRequest(limit=limit)
        request.ended_before.CopyFrom(convert.timestamp(ended_before))
        response = await self._call(self.stub.PurgeEndedSessions, request)
        return PurgeResult(tuple(response.purged_session_ids), response.more)

    async def purge_sessionless_runs(
        self, finished_before: datetime, limit: int = 0
    ) -> PurgeResult:
        """Deletes up to ``limit`` (0: 100) finished sessionless runs finished
        before ``finished_before``, each with its one-shot children, leaving
        run tombstones; call again while ``more`` (and something was purged)."""
        arguments.moment("finished_before", finished_before)
        arguments.count("limit", limit)
        request = sa.PurgeSessionlessRunsRequest(limit=limit)
        request.finished_before.CopyFrom(convert.timestamp(finished_before))
        response = await self._call(self.stub.PurgeSessionlessRuns, request)
        return PurgeResult(tuple(response.purged_run_ids), response.more)

    async def list_runs_by_session(
        self, session_id: str, statuses: Collection[RunStatus] = ()
    ) -> list[RunMeta]:
        arguments.text("session_id", session_id)
        request = sa.ListRunsBySessionRequest(
            session_id=session_id,
            statuses=[convert.RUN_STATUS_TO_WIRE[status] for status in statuses],
        )
        response = await self._call(self.stub.ListRunsBySession, request)
        return [convert.from_run_meta(run) for run in response.runs]

    async def list_sessions(
        self,
        *,
        statuses: Collection[SessionStatus] = (),
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
        session_id: str = "",
        session_id_prefix: str = "",
        newest_first: bool = False,
        count_statuses: bool = False,
    ) -> SessionPage:
        """One page of sessions by ``created_at``, then ID (§9.8.1).

        ``created_after`` is inclusive, ``created_before`` exclusive; an empty
        ``statuses`` keeps every status. Pass ``next_page_token`` back as
        ``page_token`` with the same filters for the next page.
        ``count_statuses`` fills the page's ``status_counts`` (§9.8).
        """
        request = sa.ListSessionsRequest(
            statuses=[convert.SESSION_STATUS_TO_WIRE[status] for status in statuses],
            page_size=page_size,
            page_token=page_token,
            session_id=session_id,
            session_id_prefix=session_id_prefix,
            order=sa.LIST_ORDER_NEWEST_FIRST if newest_first else sa.LIST_ORDER_UNSPECIFIED,
            count_statuses=count_statuses,
        )
        if created_after is not None:
            request.created_after.CopyFrom(convert.timestamp(created_after))
        if created_before is not None:
            request.created_before.CopyFrom(convert.timestamp(created_before))
        return convert.from_session_page(await self._call(self.stub.ListSessions, request))

    async def list_runs(
        self,
        *,
        session_id: str = "",
        agent_id: str = "",
        statuses: Collection[RunStatus] = (),
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        sessionless_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
        run_id: str = "",
        run_id_prefix: str = "",
        agent_id_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        root_only: bool = False,
        newest_first: bool = False,
        count_statuses: bool = False,
        parent_run_id: str = "",
    ) -> RunPage:
        """One page of runs by ``started_at``, then run ID (§9.8.2); filters as
        in ``list_sessions``, ``sessionless_only`` for one-shot runs,
        ``labels`` (every pair, exactly), ``root_only`` and ``parent_run_id``
        (the children of one run)."""
        request = sa.ListRunsRequest(
            session_id=session_id,
            agent_id=agent_id,
            statuses=[convert.RUN_STATUS_TO_WIRE[status] for status in statuses],
            sessionless_only=sessionless_only,
            page_size=page_size,
            page_token=page_token,
            run_id=run_id,
            run_id_prefix=run_id_prefix,
            agent_id_prefix=agent_id_prefix,
            labels=dict(labels or {}),
            root_only=root_only,
            order=sa.LIST_ORDER_NEWEST_FIRST if newest_first else sa.LIST_ORDER_UNSPECIFIED,
            count_statuses=count_statuses,
            parent_run_id=parent_run_id,
        )
        if started_after is not None:
            request.started_after.CopyFrom(convert.timestamp(started_after))
        if started_before is not None:
            request.started_before.CopyFrom(convert.timestamp(started_before))
        return convert.from_run_page(await self._call(self.stub.ListRuns, request))

    def iter_sessions(self, **filters: Any) -> AsyncIterator[Session]:
        """Every session ``list_sessions(**filters)`` lists, page after page."""
        return _every(lambda token: self.list_sessions(**filters, page_token=token))

    def iter_runs(self, **filters: Any) -> AsyncIterator[RunMeta]:
        """Every run ``list_runs(**filters)`` lists, page after page."""
        return _every(lambda token: self.list_runs(**filters, page_token=token))


async def _every(fetch: Callable[[str], Awaitable[ListPage[Item]]]) -> AsyncIterator[Item]:
    """The items of every page, following ``next_page_token`` to the end."""
    token = ""
    while True:
        page = await fetch(token)
        for item in page.items:
            yield item
        token = page.next_page_token
        if not token:
            return
