"""``runstore.v1.SessionAdmin``: host-owned session administration (§9.1, D6)."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from runstore.server import convert
from runstore.server.core.store import RuntimeStore
from runstore.server.error_status import maps_errors
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class SessionAdminServicer(sa_grpc.SessionAdminServicer):
    def __init__(self, store: RuntimeStore) -> None:
        self._store = store

    @maps_errors
    async def CreateSession(
        self, request: sa.CreateSessionRequest, context: Context
    ) -> sa.CreateSessionResponse:
        created_at = convert.nanos_from_wire(request, "created_at", "created_at")
        session = await self._store.create_session(request.session_id, created_at)
        return sa.CreateSessionResponse(session=convert.session_to_wire(session))

    @maps_errors
    async def LoadSession(
        self, request: sa.LoadSessionRequest, context: Context
    ) -> sa.LoadSessionResponse:
        session = await self._store.load_session(request.session_id)
        return sa.LoadSessionResponse(session=convert.session_to_wire(session))

    @maps_errors
    async def EndSession(
        self, request: sa.EndSessionRequest, context: Context
    ) -> sa.EndSessionResponse:
        ended_at = convert.nanos_from_wire(request, "ended_at", "ended_at")
        session = await self._store.end_session(request.session_id, ended_at)
        return sa.EndSessionResponse(session=convert.session_to_wire(session))

    @maps_errors
    async def PurgeSession(
        self, request: sa.PurgeSessionRequest, context: Context
    ) -> sa.PurgeSessionResponse:
        await self._store.purge_session(request.session_id)
        return sa.PurgeSessionResponse()

    @maps_errors
    async def PurgeEndedSessions(
        self, request: sa.PurgeEndedSessionsRequest, context: Context
    ) -> sa.PurgeEndedSessionsResponse:
        ended_before = convert.nanos_from_wire(request, "ended_before", "ended_before")
        purged, more = await self._store.purge_ended_sessions(ended_before, request.limit)
        return sa.PurgeEndedSessionsResponse(purged_session_ids=purged, more=more)

    @maps_errors
    async def PurgeSessionlessRuns(
        self, request: sa.PurgeSessionlessRunsRequest, context: Context
    ) -> sa.PurgeSessionlessRunsResponse:
        finished_before = convert.nanos_from_wire(request, "finished_before", "finished_before")
        purged, more = await self._store.purge_sessionless_runs(finished_before, request.limit)
        return sa.PurgeSessionlessRunsResponse(purged_run_ids=purged, more=more)

    @maps_errors
    async def ListRunsBySession(
        self, request: sa.ListRunsBySessionRequest, context: Context
    ) -> sa.ListRunsBySessionResponse:
        runs = await self._store.list_runs_by_session(
            request.session_id, convert.run_statuses_from_wire(request.statuses)
        )
        return sa.ListRunsBySessionResponse(runs=[convert.run_to_wire(run) for run in runs])

    @maps_errors
    async def ListSessions(
        self, request: sa.ListSessionsRequest, context: Context
    ) -> sa.ListSessionsResponse:
        page = await self._store.list_sessions(
            convert.session_filter_from_wire(request),
            request.page_size,
            request.page_token,
            request.count_statuses,
        )
        return sa.ListSessionsResponse(
            sessions=[convert.session_to_wire(session) for session in page.items],
            next_page_token=page.next_page_token,
            status_counts=convert.session_counts_to_wire(page.status_counts),
        )

    @maps_errors
    async def ListRuns(self, request: sa.ListRunsRequest, context: Context) -> sa.ListRunsResponse:
        page = await self._store.list_runs(
            convert.run_filter_from_wire(request),
            request.page_size,
            request.page_token,
            request.count_statuses,
        )
        return sa.ListRunsResponse(
            runs=[convert.run_to_wire(run) for run in page.items],
            next_page_token=page.next_page_token,
            status_counts=convert.run_counts_to_wire(page.status_counts),
        )
