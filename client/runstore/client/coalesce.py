"""Coalescing concurrent ``append_run_record`` calls into shared messages.

A worker process runs many agent runs at once, so its appends arrive
together. An append that finds nothing on the wire and nothing queued goes
out at once, alone, as a plain AppendRunRecord: a lone append is never
delayed. One that finds a message in flight joins the queue, and the queue
leaves as one AppendRunRecordCalls message (which the server serves as that
many separate calls, docs/limits.md "Coalesced appends") at the end of the
event loop's current turn if fewer than ``max_messages_in_flight`` messages
are on the wire, or else as soon as one returns. So the appends that arrive
together, such as the callers one returning message wakes, leave together
rather than the first of them alone. Each append keeps its own
result or error, its own deadline (sent with it), its own retry (the caller
retries its own attempt) and its own cancellation (an append cancelled while
queued is never sent; one already sent may still be stored, as a unary call
may). Bytes queued are bounded: at the bound a caller waits, within its own
attempt's deadline. Order across runs is not promised.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc

from runstore.client.errors import from_rpc_error
from runstore.contract.errors import RunstoreError
from runstore.v1 import runtime_store_pb2 as rs

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_REQUEST_ID_KEY = "x-request-id"


@dataclass(frozen=True, slots=True)
class AppendCoalescing:
    """The bounds of coalescing (``RemoteStore(coalescing=None)`` turns it off)."""

    max_messages_in_flight: int = 2
    """Messages on the wire at once; appends queued behind them wait for one to return."""
    max_calls: int = 128
    """Appends in one message at most (the server's limit)."""
    max_message_bytes: int = 4 * 1024 * 1024
    """Payload bytes in one message at most (the server's limit)."""
    max_queued_bytes: int = 16 * 1024 * 1024
    """Payload bytes waiting to be sent at most; past it a caller waits."""

    def __post_init__(self) -> None:
        if self.max_messages_in_flight < 1 or self.max_calls < 1:
            raise ValueError("AppendCoalescing: max_messages_in_flight and max_calls must be ≥ 1")
        if self.max_queued_bytes < self.max_message_bytes:
            raise ValueError("AppendCoalescing: max_queued_bytes must be ≥ max_message_bytes")


DEFAULT_COALESCING = AppendCoalescing()


@dataclass(slots=True)
class _Queued:
    request: rs.AppendRunRecordRequest
    size: int
    deadline: float | None
    done: asyncio.Future[rs.AppendRunRecordResponse]


Send = Callable[[rs.AppendRunRecordCallsRequest, float | None], Awaitable[Any]]
SendOne = Callable[[rs.AppendRunRecordRequest, float | None], Awaitable[Any]]


def _rebuilt(outcome: rs.AppendRunRecordCallOutcome) -> RunstoreError:
    """The error a lone call ending as ``outcome`` would have raised (its
    status details and its x-request-id trailer)."""
    status = outcome.error
    code = next((c for c in grpc.StatusCode if c.value[0] == status.code), grpc.StatusCode.UNKNOWN)
    trailers = grpc.aio.Metadata(
        (_STATUS_DETAILS_KEY, status.SerializeToString()), (_REQUEST_ID_KEY, outcome.request_id)
    )
    return from_rpc_error(
        grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, details=status.message)
    )


class AppendCoalescer:
    """Shares messages among the appends of one client (see the module)."""

    def __init__(self, bounds: AppendCoalescing, send: Send, send_one: SendOne) -> None:
        self.bounds = bounds
        self._send = send
        """Sends one AppendRunRecordCalls (raises ``grpc.aio.AioRpcError``)."""
        self._send_one = send_one
        """Sends one AppendRunRecord (a lone append)."""
        self._queue: list[_Queued] = []
        self._queued_bytes = 0
        self._in_flight = 0
        self._room = asyncio.Condition()
        self._flush_scheduled = False
        self.messages_sent = 0
        """Messages sent so far (both methods), for tests and diagnostics."""

    async def append(
        self, request: rs.AppendRunRecordRequest, seconds: float | None
    ) -> rs.AppendRunRecordResponse:
        """One attempt of one append, within ``seconds``."""
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        if self._in_flight == 0 and not self._queue:
            self._in_flight += 1
            self.messages_sent += 1
            try:
                return await self._send_one(request, seconds)  # type: ignore[no-any-return]
            finally:
                self._in_flight -= 1
                self._flush()
        size = len(request.record.payload)
        if self._queued_bytes + size > self.bounds.max_queued_bytes:
            async with self._room:
                await asyncio.wait_for(
                    self._room.wait_for(
                        lambda: self._queued_bytes + size <= self.bounds.max_queued_bytes
                    ),
                    timeout=None if deadline is None else max(0.0, deadline - loop.time()),
                )
        queued = _Queued(request, size, deadline, loop.create_future())
        self._queue.append(queued)
        self._queued_bytes += size
        self._flush_soon()
        try:
            return await queued.done
        finally:
            if not queued.done.done():  # cancelled while queued: never sent
                queued.done.cancel()
                self._unqueue(queued)

    def _unqueue(self, queued: _Queued) -> None:
        if queued in self._queue:
            self._queue.remove(queued)
            self._release(queued.size)

    def _release(self, size: int) -> None:
        self._queued_bytes -= size

        async def notify() -> None:
            async with self._room:
                self._room.notify_all()

        asyncio.get_running_loop().create_task(notify())

    def _flush_soon(self) -> None:
        """Flushes once the loop's current turn has run, so that every append
        arriving in that turn joins the same message."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Sends what is queued, a message at a time, while there is room on the wire."""
        while self._queue and self._in_flight < self.bounds.max_messages_in_flight:
            batch: list[_Queued] = []
            payload = 0
            while self._queue and len(batch) < self.bounds.max_calls:
                head = self._queue[0]
                if batch and payload + head.size > self.bounds.max_message_bytes:
                    break
                self._queue.pop(0)
                self._release(head.size)
                if head.done.done():  # its caller left
                    continue
                batch.append(head)
                payload += head.size
            if not batch:
                continue
            self._in_flight += 1
            self.messages_sent += 1
            asyncio.get_running_loop().create_task(self._carry(batch))

    async def _send_alone(self, queued: _Queued) -> None:
        loop = asyncio.get_running_loop()
        remaining = None if queued.deadline is None else max(0.0, queued.deadline - loop.time())
        try:
            response = await self._send_one(queued.request, remaining)
        except Exception as error:
            if not queued.done.done():
                queued.done.set_exception(error)
            return
        if not queued.done.done():
            queued.done.set_result(response)

    async def _carry(self, batch: list[_Queued]) -> None:
        loop = asyncio.get_running_loop()
        try:
            if len(batch) == 1:  # one append needs no carrier
                await self._send_alone(batch[0])
                return
            now = loop.time()
            calls = []
            for queued in batch:
                call = rs.AppendRunRecordCall(request=queued.request)
                if queued.deadline is not None:
                    call.timeout.FromTimedelta(timedelta(seconds=max(0.0, queued.deadline - now)))
                calls.append(call)
            known = [q.deadline for q in batch if q.deadline is not None]
            timeout = None if len(known) < len(batch) else max(0.0, max(known) - now)
            try:
                response = await self._send(rs.AppendRunRecordCallsRequest(calls=calls), timeout)
            except BaseException as error:
                if (
                    isinstance(error, grpc.aio.AioRpcError)
                    and error.code() == grpc.StatusCode.UNIMPLEMENTED
                ):
                    # A server older than AppendRunRecordCalls: every append alone from now on.
                    self.bounds = dataclasses.replace(self.bounds, max_calls=1)
                    for queued in batch:
                        await self._send_alone(queued)
                    return
                # The message failed as a whole: each of its appends failed so.
                for queued in batch:
                    if not queued.done.done():
                        if isinstance(error, Exception):
                            queued.done.set_exception(error)
                        else:
                            queued.done.cancel()
                if not isinstance(error, Exception):
                    raise
                return
            for queued, outcome in zip(batch, response.outcomes, strict=True):
                if queued.done.done():
                    continue
                if outcome.HasField("error"):
                    queued.done.set_exception(_rebuilt(outcome))
                else:
                    queued.done.set_result(outcome.response)
        finally:
            self._in_flight -= 1
            self._flush()
