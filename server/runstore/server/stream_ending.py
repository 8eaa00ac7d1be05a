"""Ending an open response stream from outside it (docs/namespaces.md,
docs/security.md).

A Watch stream can outlive what admitted it: the auth file is reloaded and no
longer admits its principal, or its namespace is deleted. Whoever learns that
calls ``EndableStream.end`` with the refusal a new call would get. A stream
waiting for its next response is woken at once (its task is cancelled, and
the cancellation is taken back); one whose response is being written ends
before the next. ``until_ended`` is the loop every such concern wraps around
the responses, so the rule is written once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from runstore.contract.errors import RunstoreError
from runstore.server.error_status import abort


class EndableStream:
    """One open stream that another task may end with ``refusal``: the task
    waiting in ``next_of`` is the one ``end`` wakes, so it may be built before
    the stream starts (the console admits a live page before its response
    body runs in a task of its own)."""

    __slots__ = ("_task", "_waiting", "_woken", "refusal")

    def __init__(self) -> None:
        self._task = asyncio.current_task()
        self._waiting = False
        self._woken = False
        self.refusal: RunstoreError | None = None

    def end(self, refusal: RunstoreError) -> None:
        """Ends the stream with ``refusal``; the first refusal wins."""
        if self.refusal is not None:
            return
        self.refusal = refusal
        if self._waiting and self._task is not None:
            self._woken = True
            self._task.cancel()

    async def next_of(self, responses: AsyncIterator[Any]) -> Any:
        """The stream's next response; StopAsyncIteration at its end, or once
        it is ended, even while waiting for one."""
        if self.refusal is not None:
            raise StopAsyncIteration
        self._task = asyncio.current_task()
        self._waiting = True
        try:
            return await anext(responses)
        except asyncio.CancelledError:
            if not self._woken:
                raise
            raise StopAsyncIteration from None
        finally:
            self._waiting = False
            if self._woken:
                self._woken = False
                assert self._task is not None
                if self._task.uncancel() > 0:  # cancelled by someone else too
                    raise asyncio.CancelledError


async def until_ended(
    stream: EndableStream,
    responses: AsyncIterator[Any],
    context: grpc.aio.ServicerContext[Any, Any],
) -> AsyncIterator[Any]:
    """``responses`` until they end or ``stream`` is ended; then the inner
    stream is closed and the call ends with the stream's refusal."""
    try:
        while stream.refusal is None:
            try:
                response = await stream.next_of(responses)
            except StopAsyncIteration:
                break
            if stream.refusal is not None:
                break
            yield response
    finally:
        if stream.refusal is not None:
            close = getattr(responses, "aclose", None)
            if close is not None:
                await close()
    if stream.refusal is not None:
        await abort(context, stream.refusal)
