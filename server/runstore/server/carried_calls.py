"""AppendRunRecordCalls: several AppendRunRecord calls carried by one message.

Each carried call is served as if it had come alone: it goes through the
whole interceptor chain under the method ``AppendRunRecord`` (its own request
id, access-log line, metric count, roles check, quota token, parsing and
database bound) with a context of its own (``CarriedContext``), and its
outcome (the response, or the status it ended with) is kept apart from its
neighbours'. So what a coalescing client saves is the gRPC call's fixed cost,
not any of the call's meaning (docs/limits.md, "Coalesced appends").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import grpc

from runstore.contract.errors import ValidationError
from runstore.server import call_arrivals, call_request_id
from runstore.server.core.batch_rules import MAX_BATCH_PAYLOAD_BYTES, MAX_BATCH_RECORDS
from runstore.server.interceptors.handlers import Handler
from runstore.v1 import runtime_store_pb2 as rs

CARRIED_METHOD: Final = "/runstore.v1.RuntimeStore/AppendRunRecord"
"""The method every carried call is served as."""

MAX_CALLS: Final = MAX_BATCH_RECORDS
"""Most calls of one AppendRunRecordCalls message (as AppendRunRecords' records)."""

MAX_PAYLOAD_BYTES: Final = MAX_BATCH_PAYLOAD_BYTES
"""Most payload bytes of one message, every call's record together."""

_STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"


class _Details(NamedTuple):
    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...]


class _CallDetails(_Details, grpc.HandlerCallDetails):
    """The call details a carried call is resolved with."""


class CarriedContext:
    """The servicer context of one carried call: its own metadata, deadline,
    status and trailers; everything else (peer, TLS identity) is the message's."""

    def __init__(
        self,
        outer: grpc.aio.ServicerContext[Any, Any],
        metadata: tuple[tuple[str, str | bytes], ...],
        deadline: float | None,
    ) -> None:
        self._outer = outer
        self._metadata = metadata
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._callbacks: list[Callable[[Any], None]] = []

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._outer.peer()

    def auth_context(self) -> Any:
        return self._outer.auth_context()

    def peer_identities(self) -> Any:
        return self._outer.peer_identities()

    def peer_identity_key(self) -> Any:
        return self._outer.peer_identity_key()

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return self._outer.cancelled()

    def done(self) -> bool:
        return self._outer.done()

    async def send_initial_metadata(self, metadata: Any) -> None:
        """The message's own header went out already (the server's version)."""

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self._trailing = tuple(metadata)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailing

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def set_details(self, details: str) -> None:
        self._details = details

    def details(self) -> str:
        return self._details

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> None:
        self._code = code
        self._details = details
        if trailing_metadata:
            self._trailing = (*self._trailing, *trailing_metadata)
        raise grpc.aio.AbortError()

    def __getattr__(self, name: str) -> Any:
        """What a carried call cannot have apart (compression, ...) is the message's."""
        return getattr(self._outer, name)

    def finish(self) -> None:
        for callback in self._callbacks:
            callback(self)

    def status(self) -> rs.CallStatus:
        """The status the call ended with, as a lone call's caller reads it."""
        for key, value in self._trailing:
            if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
                return rs.CallStatus.FromString(value)
        code = self._code or grpc.StatusCode.UNKNOWN
        return rs.CallStatus(code=code.value[0], message=self._details)


Resolve = Callable[[grpc.HandlerCallDetails], Any]


class CarriedCalls:
    """Serves the calls of AppendRunRecordCalls, each through ``interceptors``
    (the server's, outermost first) around ``handler`` (the servicer's own
    AppendRunRecord)."""

    def __init__(
        self, interceptors: Sequence[grpc.aio.ServerInterceptor], handler: Handler
    ) -> None:
        self._interceptors = tuple(interceptors)
        self._handler = handler

    async def _resolve(self, details: grpc.HandlerCallDetails, index: int = 0) -> Any:
        if index == len(self._interceptors):
            return self._handler

        async def inner(next_details: grpc.HandlerCallDetails) -> Any:
            return await self._resolve(next_details, index + 1)

        return await self._interceptors[index].intercept_service(inner, details)

    async def serve(
        self, request: rs.AppendRunRecordCallsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> rs.AppendRunRecordCallsResponse:
        calls = request.calls
        if not calls:
            raise ValidationError("at least one call is required", field="calls")
        if len(calls) > MAX_CALLS:
            raise ValidationError(
                f"a message carries at most {MAX_CALLS} calls, not {len(calls)}", field="calls"
            )
        payload = sum(len(call.request.record.payload) for call in calls)
        if payload > MAX_PAYLOAD_BYTES:
            raise ValidationError(
                f"a message carries at most {MAX_PAYLOAD_BYTES} payload bytes, not {payload}",
                field="calls",
            )
        metadata = tuple(
            (key, value)
            for key, value in context.invocation_metadata() or ()
            if key != call_request_id.METADATA_KEY
        )
        remaining = context.time_remaining()
        began = time.monotonic()
        outer_deadline = None if remaining is None else began + remaining
        together = call_arrivals.Together(len(calls))
        outcomes = await asyncio.gather(
            *(self._one(call, context, metadata, began, outer_deadline, together) for call in calls)
        )
        return rs.AppendRunRecordCallsResponse(outcomes=outcomes)

    async def _one(
        self,
        call: rs.AppendRunRecordCall,
        outer: grpc.aio.ServicerContext[Any, Any],
        metadata: tuple[tuple[str, str | bytes], ...],
        began: float,
        outer_deadline: float | None,
        together: call_arrivals.Together,
    ) -> rs.AppendRunRecordCallOutcome:
        """One call in a task of its own (``gather``), so the context variables
        its concerns set (request id, principal, namespace) are its own; its
        neighbours' appends wait for its own to go in one group with them
        (``call_arrivals``)."""
        arriving = call_arrivals.Arriving(together)
        call_arrivals.CURRENT.set(arriving)
        if call.request_id:
            metadata = (*metadata, (call_request_id.METADATA_KEY, call.request_id))
        deadline = outer_deadline
        if call.HasField("timeout"):
            own = began + call.timeout.ToTimedelta().total_seconds()
            deadline = own if deadline is None else min(own, deadline)
        context = CarriedContext(outer, metadata, deadline)
        outcome = rs.AppendRunRecordCallOutcome()
        try:
            handler = await self._resolve(_CallDetails(CARRIED_METHOD, metadata))
            wire = call.request.SerializeToString()
            parse = handler.request_deserializer
            # asyncio.timeout, not wait_for: the call runs in this task, not one more.
            async with asyncio.timeout(context.time_remaining()):
                response = await handler.unary_unary(parse(wire) if parse else wire, context)
            serialize = handler.response_serializer
            outcome.response.ParseFromString(serialize(response) if serialize else response)
        except grpc.aio.AbortError:
            outcome.error.CopyFrom(context.status())
        except TimeoutError:
            outcome.error.CopyFrom(
                rs.CallStatus(
                    code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0], message="Deadline Exceeded"
                )
            )
        finally:
            arriving.end()
            context.finish()
        outcome.request_id = call_request_id.current()
        return outcome
