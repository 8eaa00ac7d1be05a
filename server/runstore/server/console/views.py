"""The console's screens: Sessions, a session, Runs, a run. Each reads through
the store core (the methods the gRPC servicers call) and at most one page of
records per request; every URL names what it shows, so it can be shared."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from runstore.contract.errors import InvalidArgumentError, NotFoundError, ReadArgumentError
from runstore.contract.model import RunFilter, RunStatus, SessionFilter, SessionStatus
from runstore.server.console import reads, render
from runstore.server.console.pages import Console
from runstore.server.core.model import Nanos, Session

LIST_PAGE_SIZE: Final = 100
"""Sessions or runs one listing page shows."""

SEARCH_PAGE_SIZE: Final = 1000
"""Sessions one ID-prefix search examines per request (the listing's largest
page): the store has no prefix index, so a search walks the listing in pages."""


def _position(request: Request, name: str) -> int:
    text = request.query_params.get(name, "")
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()):
        raise ReadArgumentError(f"{name} must be a record position", field=name)
    return int(text)


def _time(request: Request, name: str) -> Nanos | None:
    text = request.query_params.get(name, "")
    moment = render.parse_time(text)
    if text.strip() and moment is None:
        raise ReadArgumentError(
            f"{name} must be a date and time (YYYY-MM-DDTHH:MM, UTC)", field=name
        )
    return moment


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if not value:
        raise ReadArgumentError(f"{name} is required", field=name)
    return value


async def sessions(console: Console, request: Request) -> Response:
    params = request.query_params
    status = params.get("status", "")
    if status and status not in set(SessionStatus):
        raise ReadArgumentError("status must be active or ended", field="status")
    query: SessionFilter[Nanos] = SessionFilter(
        statuses=frozenset({SessionStatus(status)}) if status else None,
        created_after=_time(request, "created_after"),
        created_before=_time(request, "created_before"),
    )
    search = params.get("q", "").strip()
    token = params.get("page_token", "")
    exact: Session | None = None
    if search:
        if not token:
            try:
                exact = await console.store.load_session(search)
            except (NotFoundError, InvalidArgumentError):
                exact = None
        page = await console.store.list_sessions(query, SEARCH_PAGE_SIZE, token)
        items = [s for s in page.items if s.id.startswith(search) and s != exact]
    else:
        page = await console.store.list_sessions(query, LIST_PAGE_SIZE, token)
        items = list(page.items)
    return console.page(
        request,
        "sessions.html",
        title="Sessions",
        sessions=items,
        exact=exact,
        next_token=page.next_page_token,
        status=status,
        statuses=[s.value for s in SessionStatus],
        created_after=params.get("created_after", ""),
        created_before=params.get("created_before", ""),
        search=search,
        searched=len(page.items) if search else 0,
        first_page=not token,
    )


async def session(console: Console, request: Request) -> Response:
    session_id = _required(request, "id")
    found = await console.store.load_session(session_id)
    runs = await console.store.list_runs_by_session(session_id)
    records = await reads.session_records(console.store, session_id, _position(request, "before"))
    return console.page(
        request,
        "session.html",
        title=f"Session {session_id}",
        session=found,
        tree=reads.run_tree(runs),
        run_count=len(runs),
        records=records,
        shown={position: render.formatted(r.payload) for position, r in records.records},
    )


async def runs(console: Console, request: Request) -> Response:
    params = request.query_params
    status = params.get("status", "")
    if status and status not in set(RunStatus):
        raise ReadArgumentError(
            f"status must be one of {', '.join(s.value for s in RunStatus)}", field="status"
        )
    agent = params.get("agent", "").strip()
    sessionless = params.get("sessionless", "") == "1"
    query: RunFilter[Nanos] = RunFilter(
        agent_id=agent,
        statuses=frozenset({RunStatus(status)}) if status else None,
        sessionless_only=sessionless,
    )
    token = params.get("page_token", "")
    page = await console.store.list_runs(query, LIST_PAGE_SIZE, token)
    return console.page(
        request,
        "runs.html",
        title="Runs",
        runs=page.items,
        next_token=page.next_page_token,
        agent=agent,
        status=status,
        statuses=[s.value for s in RunStatus],
        sessionless=sessionless,
        first_page=not token,
    )


async def run(console: Console, request: Request) -> Response:
    run_id = _required(request, "id")
    view = request.query_params.get("view", "records")
    if view not in ("records", "transcript"):
        raise ReadArgumentError("view must be records or transcript", field="view")
    found = await console.store.load_run(run_id)
    records = await reads.run_records(console.store, run_id, _position(request, "before"))
    session_runs = (
        await console.store.list_runs_by_session(found.session_id) if found.session_id else []
    )
    first = next((r for position, r in records.records if position == 1), None)
    predecessor = (
        str(render.json_object(first.payload).get("predecessor_run_id") or "")
        if first is not None
        else await reads.predecessor(console.store, run_id)
    )
    cancellation = next(
        (r for _, r in records.records if r.event_key == found.keys.cancellation), None
    )
    oldest_first = [record for _, record in reversed(records.records)]
    return console.page(
        request,
        "run.html",
        title=f"Run {run_id}",
        run=found,
        records=records,
        view=view,
        shown={position: render.formatted(r.payload) for position, r in records.records},
        children=[r for r in session_runs if r.parent_run_id == run_id],
        predecessor=predecessor,
        successors=await reads.successors(console.store, found, session_runs),
        checkpoint=(
            render.formatted(found.checkpoint.data) if found.checkpoint is not None else None
        ),
        cancellation=cancellation,
        cancellation_payload=(
            render.formatted(cancellation.payload) if cancellation is not None else None
        ),
        transcript=render.transcript(oldest_first) if view == "transcript" else None,
    )
