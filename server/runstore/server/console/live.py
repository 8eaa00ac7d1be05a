"""Live pages: a run's or a session's new records as server-sent events, fed by Watch.

Each event's ``id`` is the record's position (a run's record ID, a session's
position), so a browser that reconnects sends it back as ``Last-Event-ID`` and
the stream resumes right after it: nothing is sent twice or skipped. A run's
stream ends with an ``end`` event once the run has ended (Watch stops there);
server shutdown ends every stream (Watch's UNAVAILABLE, and the shutdown event);
deleting the stream's namespace ends it with a ``failure`` event at once. A
stream holds its namespace's ``watch_streams`` lease while it is open and
meets the server's watcher limit, both the ones a gRPC Watch passes
(``concerns``, ``app.Screen``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Final

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from runstore.contract.errors import RunstoreError, UnavailableError
from runstore.server.concerns import Call
from runstore.server.console import render
from runstore.server.console.pages import Console
from runstore.server.core.model import RunRecord
from runstore.server.core.watch import WatchBatch
from runstore.server.stream_ending import EndableStream

PING_SECONDS: Final = 15
"""A comment line this often keeps proxies from closing an idle stream."""
SEND_TIMEOUT_SECONDS: Final = 30
"""A client that takes no bytes for this long is dropped (its watcher freed)."""
RETRY_MILLISECONDS: Final = 1000
"""How soon a browser reconnects after a dropped stream."""


def _resume_from(request: Request) -> int | None:
    """Where to resume: ``Last-Event-ID`` (a reconnect) beats ``after`` (the page's
    newest record); None when neither is a position."""
    text = request.headers.get("last-event-id") or request.query_params.get("after", "0")
    return int(text) if text.isascii() and text.isdigit() else None


def _record_event(position: int, record: RunRecord) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(render.record_json(position, record)),
        id=str(position),
        event="record",
        retry=RETRY_MILLISECONDS,
    )


def _positions(batch: WatchBatch, by_id: bool) -> list[int]:
    """A run's positions are its record IDs; a session's batch ends at its
    ``next_cursor`` (the last record's position) and positions are dense."""
    if by_id:
        return [record.id for record in batch.events]
    last = int(batch.next_cursor)
    return list(range(last - len(batch.events) + 1, last + 1))


def _failure(exc: RunstoreError) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps({"error": str(exc)}), event="failure")


async def _events(
    call: Call, batches: AsyncIterator[WatchBatch], by_id: bool
) -> AsyncIterator[ServerSentEvent]:
    # Opened among the namespace's streams when the page was admitted: the
    # namespace's deletion ends it, as it ends a gRPC Watch (without a
    # directory only ``default`` exists, and it is never deleted).
    stream = call.stream if call.stream is not None else EndableStream()
    try:
        while True:
            try:
                batch = await stream.next_of(batches)
            except StopAsyncIteration:
                break
            for position, record in zip(_positions(batch, by_id), batch.events, strict=True):
                yield _record_event(position, record)
                call.sent()
        if stream.refusal is not None:
            call.error = stream.refusal
            yield _failure(stream.refusal)
            return
        yield ServerSentEvent(data="{}", event="end")
    except UnavailableError:
        return  # shutting down: the browser reconnects to whichever server answers
    except RunstoreError as exc:
        call.error = exc
        yield _failure(exc)
    finally:
        close = getattr(batches, "aclose", None)
        if close is not None:
            await close()


def _stream(console: Console, events: AsyncIterator[ServerSentEvent]) -> Response:
    return EventSourceResponse(
        events,
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
        shutdown_event=console.shutdown,
        headers={"cache-control": "no-store"},
    )


def _admitted(console: Console) -> None:
    """Refused (503) at the server's watcher limit, the one a gRPC Watch meets,
    before the response starts: a stream refused later could only say so in
    an event."""
    refusal = console.door.watcher_refusal()
    if refusal is not None:
        raise refusal


def _refusal(text: str, status: int = 400) -> Response:
    return PlainTextResponse(text, status)


async def run_events(console: Console, request: Request) -> Response:
    run_id = request.query_params.get("id", "")
    after = _resume_from(request)
    if not run_id or after is None:
        return _refusal("id and a numeric after (or Last-Event-ID) are required")
    await console.store.load_run(run_id)  # 404 before the stream starts
    _admitted(console)
    batches = console.watch.run(run_id, str(after) if after else "")
    return _stream(console, _events(request.scope["runstore_call"], batches, by_id=True))


async def session_events(console: Console, request: Request) -> Response:
    session_id = request.query_params.get("id", "")
    after = _resume_from(request)
    if not session_id or after is None:
        return _refusal("id and a numeric after (or Last-Event-ID) are required")
    await console.store.load_session(session_id)
    _admitted(console)
    batches = console.watch.session(session_id, str(after) if after else "")
    return _stream(console, _events(request.scope["runstore_call"], batches, by_id=False))
