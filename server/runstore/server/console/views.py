"""The console's screens: Sessions, a session, Runs, a run. Each reads through
the store core (the methods the gRPC servicers call) and at most one page of
records per request; every URL names what it shows, so it can be shared."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from runstore.contract.errors import NotFoundError, ReadArgumentError
from runstore.contract.model import (
    RunFilter,
    RunStatus,
    SessionFilter,
    SessionStatus,
    StatusCount,
)
from runstore.server.console import filters, reads, render, timeline
from runstore.server.console.pages import Console
from runstore.server.core.model import Nanos

LIST_PAGE_SIZE: Final = 100
"""Sessions or runs one listing page shows."""


def _position(request: Request, name: str) -> int:
    text = request.query_params.get(name, "")
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()):
        raise ReadArgumentError(f"{name} must be a record position", field=name)
    return int(text)


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if not value:
        raise ReadArgumentError(f"{name} is required", field=name)
    return value


def _status_param(request: Request, every: type[SessionStatus] | type[RunStatus]) -> str:
    status = request.query_params.get("status", "")
    if status and status not in {s.value for s in every}:
        raise ReadArgumentError(
            f"status must be one of {', '.join(s.value for s in every)}", field="status"
        )
    return status


def _totals(counts: Sequence[StatusCount]) -> list[StatusCount]:
    return [count for count in counts if count.count or count.estimated]


async def sessions(console: Console, request: Request) -> Response:
    """Sessions, newest first unless asked otherwise, through ListSessions'
    filters (ID exact or prefix, status, creation time) and its counts."""
    params = request.query_params
    status = _status_param(request, SessionStatus)
    exact, prefix = filters.id_match(params)
    span = filters.time_range(params)
    newest = filters.newest_first(params)
    at = filters.pages(params)
    query: SessionFilter[Nanos] = SessionFilter(
        statuses=frozenset({SessionStatus(status)}) if status else None,
        created_after=span.since,
        created_before=span.until,
        session_id=exact,
        session_id_prefix=prefix,
        newest_first=newest,
    )
    page = await console.store.list_sessions(query, LIST_PAGE_SIZE, at.token, count_statuses=True)
    kept = _kept(params, span, newest)
    return console.page(
        request,
        "sessions.html",
        title="Sessions",
        sessions=page.items,
        totals=_totals(page.status_counts),
        status=status,
        statuses=[s.value for s in SessionStatus],
        span=span,
        ranges=list(filters.RANGES),
        newest=newest,
        search=exact or prefix,
        match="exact" if exact else "prefix",
        kept=kept,
        next_page=at.next_links(page.next_page_token) if page.next_page_token else None,
        previous_page=at.previous_links(),
        first_page=not at.token,
        now=time.time_ns(),
    )


def _kept(params: QueryParams, span: filters.TimeRange, newest: bool) -> dict[str, object]:
    """The listing's filters as its links carry them (a relative range with its anchor)."""
    kept: dict[str, object] = {
        key: params.get(key, "")
        for key in (
            "id",
            "match",
            "session",
            "agent",
            "label",
            "status",
            "root",
            "sessionless",
            "parent",
        )
    }
    kept.update(
        range=span.name,
        at=span.at or 0,
        **{"from": span.start_text, "to": span.end_text},
        order="" if newest else "oldest",
    )
    return kept


SESSION_RUNS_PAGE: Final = 100
"""Runs of a session one session page shows (a session of 10,000 runs pages)."""


async def session(console: Console, request: Request) -> Response:
    """A session: a page of its runs as a tree (ListRuns by session, in start
    order, with the session's totals per status) and its records from the tail."""
    params = request.query_params
    session_id = _required(request, "id")
    found = await console.store.load_session(session_id)
    at = filters.pages(params, prefix="runs_")
    page = await console.store.list_runs(
        RunFilter(session_id=session_id), SESSION_RUNS_PAGE, at.token, count_statuses=True
    )
    records = await reads.session_records(console.store, session_id, _position(request, "before"))
    return console.page(
        request,
        "session.html",
        title=f"Session {session_id}",
        session=found,
        tree=reads.run_tree(page.items),
        totals=_totals(page.status_counts),
        run_count=sum(count.count for count in page.status_counts),
        run_count_estimated=any(count.estimated for count in page.status_counts),
        runs_next=at.next_links(page.next_page_token) if page.next_page_token else None,
        runs_previous=at.previous_links(),
        runs_first_page=not at.token,
        records=records,
        shown={position: render.formatted(r.payload) for position, r in records.records},
        now=time.time_ns(),
    )


async def runs(console: Console, request: Request) -> Response:
    """Runs, newest first unless asked otherwise, through ListRuns' filters
    (run ID exact or prefix, agent prefix, labels, status, start time, roots
    or sessionless only, a run's children) and its counts per status."""
    params = request.query_params
    status = _status_param(request, RunStatus)
    exact, prefix = filters.id_match(params)
    span = filters.time_range(params)
    newest = filters.newest_first(params)
    at = filters.pages(params)
    query: RunFilter[Nanos] = RunFilter(
        session_id=params.get("session", "").strip(),
        agent_id_prefix=params.get("agent", "").strip(),
        statuses=frozenset({RunStatus(status)}) if status else None,
        started_after=span.since,
        started_before=span.until,
        sessionless_only=params.get("sessionless", "") == "1",
        run_id=exact,
        run_id_prefix=prefix,
        labels=filters.labels(params.get("label", "")),
        root_only=params.get("root", "") == "1",
        parent_run_id=params.get("parent", "").strip(),
        newest_first=newest,
    )
    page = await console.store.list_runs(query, LIST_PAGE_SIZE, at.token, count_statuses=True)
    return console.page(
        request,
        "runs.html",
        title="Runs",
        runs=page.items,
        totals=_totals(page.status_counts),
        agent=query.agent_id_prefix,
        session_filter=query.session_id,
        label=params.get("label", ""),
        status=status,
        statuses=[s.value for s in RunStatus],
        span=span,
        ranges=list(filters.RANGES),
        newest=newest,
        search=exact or prefix,
        match="exact" if exact else "prefix",
        sessionless=query.sessionless_only,
        root_only=query.root_only,
        parent=query.parent_run_id,
        kept=_kept(params, span, newest),
        next_page=at.next_links(page.next_page_token) if page.next_page_token else None,
        previous_page=at.previous_links(),
        first_page=not at.token,
        now=time.time_ns(),
    )


VIEWS: Final = ("records", "transcript", "timeline")
"""What a run's page shows below its facts."""


async def run(console: Console, request: Request) -> Response:
    """A run: its failure first, its lifecycle, children and successors (one
    ListRuns page of the runs started after it), a page of its records (of one
    type, or around record N), or its transcript."""
    params = request.query_params
    run_id = _required(request, "id")
    view = params.get("view", "records")
    if view not in VIEWS:
        raise ReadArgumentError(f"view must be one of {', '.join(VIEWS)}", field="view")
    record_type = params.get("type", "").strip() if view == "records" else ""
    target = _position(request, "record")
    before = target + reads.RECORDS_PER_PAGE // 2 + 1 if target else _position(request, "before")
    found = await console.store.load_run(run_id)
    records = await reads.run_records(console.store, run_id, before)
    if target and target > records.tail:
        raise ReadArgumentError(
            f"record must be at most {records.tail}, the run's newest record", field="record"
        )
    typed = None
    if record_type:
        after = target - 1 if target else _position(request, "after")
        typed = await reads.typed_records(console.store, run_id, record_type, after)
    related = await reads.related(console.store, found)
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
    seed = await reads.seed_of(console.store, found)
    now = time.time_ns()
    return console.page(
        request,
        "run.html",
        seed=seed,
        seed_shown=[
            render.formatted(r.messages or (r.literal_part.data if r.literal_part else b""))
            for r in (seed.records if seed is not None else [])
        ],
        title=f"Run {run_id}",
        run=found,
        records=records,
        rows=typed.records if typed is not None else records.records,
        typed=typed,
        record_type=record_type,
        types=sorted({record.type for _, record in records.records} | {record_type} - {""}),
        target=target,
        view=view,
        shown={
            position: render.formatted(r.payload)
            for position, r in (typed.records if typed is not None else records.records)
        },
        children=related.children,
        child_count=sum(related.child_counts.values()),
        failed_children=related.child_counts.get(RunStatus.FAILED.value, 0),
        more_children=related.more_children,
        more_later=related.more_later,
        related_scan=reads.RELATED_RUNS,
        predecessor=predecessor,
        successors=related.successors,
        checkpoint=(
            render.formatted(found.checkpoint.data) if found.checkpoint is not None else None
        ),
        cancellation=cancellation,
        cancellation_payload=(
            render.formatted(cancellation.payload) if cancellation is not None else None
        ),
        transcript=render.transcript(oldest_first) if view == "transcript" else None,
        timeline=(
            timeline.timeline(found, records.records, related.children, related.successor_runs, now)
            if view == "timeline"
            else None
        ),
        now=now,
    )


async def payload(console: Console, request: Request) -> Response:
    """One record's payload, byte for byte, as a download (never rendered:
    ``attachment``, ``nosniff`` and an opaque type)."""
    run_id = _required(request, "id")
    position = _position(request, "record")
    if position < 1:
        raise ReadArgumentError("record must be a record ID (1 or more)", field="record")
    page = await console.store.list_run_records(run_id, str(position - 1), 1)
    if not page.events or page.events[0].id != position:
        raise NotFoundError(f"run {run_id!r} has no record {position}")
    record = page.events[0]
    name = f"{_file_part(run_id)}-{position}.bin"
    return Response(
        record.payload,
        media_type="application/octet-stream",
        headers={
            "content-disposition": f'attachment; filename="{name}"',
            "cache-control": "no-store",
        },
    )


def _file_part(text: str) -> str:
    """``text`` with anything but letters, digits, ``-``, ``_`` and ``.`` as ``_``."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in text)[:80]
