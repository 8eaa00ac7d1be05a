"""The Memory and Context screens: a run's memory events (§12) and a context
key's snapshot, read through the stores the gRPC servicers call, one page at
a time (docs/console.md#memory-and-context)."""

from __future__ import annotations

from typing import Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from starlette.requests import Request
from starlette.responses import Response

from runstore.contract.errors import NotFoundError, ReadArgumentError, UnavailableError
from runstore.server.console import render
from runstore.server.console.pages import Console
from runstore.server.core.context import StoredContext
from runstore.server.core.memory import MemoryPage
from runstore.v1 import context_store_pb2 as ctx

MEMORY_PAGE: Final = 50
"""Memory events one page shows."""


def _number(request: Request, name: str) -> int:
    text = request.query_params.get(name, "")
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()):
        raise ReadArgumentError(f"{name} must be a whole number", field=name)
    return int(text)


async def memory(console: Console, request: Request) -> Response:
    """The events stored for (agent, run), oldest first, a page at a time;
    positions are dense, so the previous page starts ``MEMORY_PAGE`` earlier."""
    if console.memory is None:
        raise UnavailableError("this server shows no memory store")
    agent = request.query_params.get("agent", "").strip()
    run_id = request.query_params.get("run", "").strip()
    after = _number(request, "after")
    page: MemoryPage | None = None
    if agent and run_id:
        page = await console.memory.load_run(
            agent, run_id, str(after) if after else "", MEMORY_PAGE
        )
    events = list(page.events) if page is not None else []
    return console.page(
        request,
        "memory.html",
        title="Memory",
        agent=agent,
        run_id=run_id,
        page=page,
        events=[
            (after + index + 1, event, render.formatted(event.data))
            for index, event in enumerate(events)
        ],
        after=after,
        previous=max(0, after - MEMORY_PAGE) if after else None,
        next_after=int(page.next_cursor) if page is not None and page.next_cursor else 0,
    )


def _snapshot(stored: StoredContext) -> render.Shown:
    """The snapshot (a ``ContextSnapshot`` message) as JSON text."""
    try:
        message = ctx.ContextSnapshot.FromString(stored.snapshot)
    except DecodeError:
        return render.formatted(stored.snapshot)
    text = json_format.MessageToJson(message, indent=2, ensure_ascii=False)
    return render.formatted(text.encode())


async def context(console: Console, request: Request) -> Response:
    """A context key's current snapshot, or a kept older ``version``."""
    if console.context is None:
        raise UnavailableError("this server shows no context store")
    key = request.query_params.get("key", "").strip()
    version = _number(request, "version")
    stored: StoredContext | None = None
    missing = ""
    if key:
        try:
            stored = await console.context.get_context(key, version)
        except NotFoundError as exc:
            missing = str(exc)
    return console.page(
        request,
        "context.html",
        title="Context",
        key=key,
        version=version,
        stored=stored,
        missing=missing,
        snapshot=_snapshot(stored) if stored is not None else None,
    )
