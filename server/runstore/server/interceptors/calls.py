"""Slot 2: every call measured and logged once, whatever answered it.

One concern does both, around everything later in the chain (so refusals
by authentication, limits and request parsing count too): the go-grpc-prometheus
call metrics (``grpc_server_started_total``, ``grpc_server_handled_total``,
``grpc_server_handling_seconds``, ``grpc_server_msg_received_total`` and
``grpc_server_msg_sent_total``, the last two per message of a stream, with
their own labels only), ``runstore_calls_total{namespace, ...}`` and
``runstore_errors_total{namespace, reason}``, and the access-log line (method, gRPC
code, ErrorInfo reason, duration, principal, namespace, peer, request id). Neither
payloads nor metadata values other than the request id are ever logged.
``CallsInFlight``, right after the namespace concern, counts
``runstore_calls_in_flight{namespace}``. The namespace is only ever one the
namespace concern resolved, "" before that or for a service that acts in none
(docs/observability.md, "The namespace label").

The code is the one the call ended with: OK when the behaviour returned,
the aborted code (with its ErrorInfo reason, read back from the status
details in the trailing metadata) when it aborted, CANCELLED when the caller
went away, UNKNOWN when it raised anything else (what grpc answers then).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

from runstore.server import concerns
from runstore.server.interceptors.handlers import (
    Context,
    Handler,
    Steps,
    admits_nothing,
    behaviour_of,
)
from runstore.server.interceptors.namespaces import resolved as resolved_namespace
from runstore.server.metrics import MethodFigures, Metrics, grpc_type

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_OK = grpc.StatusCode.OK


def error_reason(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The ErrorInfo reason of the status the call aborted with ("" if none)."""
    for key, value in context.trailing_metadata() or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return str(info.reason)
    return ""


async def _counted(requests: AsyncIterator[Any], counter: Any) -> AsyncIterator[Any]:
    """A streamed request, counted message by message as the behaviour reads it."""
    async for request in requests:
        counter.inc()
        yield request


class _CountingWrites:
    """The call's context, counting each ``write`` of a streamed response."""

    def __init__(self, context: Context, counter: Any) -> None:
        self._context = context
        self._counter = counter

    async def write(self, message: Any) -> None:
        await self._context.write(message)
        self._counter.inc()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class CallObserver:
    """Metrics (when ``metrics`` is given) and the access log (when ``access_log``)."""

    def __init__(self, metrics: Metrics | None, *, access_log: bool) -> None:
        self._metrics = metrics
        self._access_log = access_log

    admit = admits_nothing

    def steps(self, method: str, handler: Handler) -> Steps:
        figures = None
        if self._metrics is not None:
            kind = grpc_type(handler.request_streaming, handler.response_streaming)
            figures = self._metrics.method(method, kind)
        begin = self._begin
        end = self._end
        _, behaviour = behaviour_of(handler)
        streamed = inspect.isasyncgenfunction(behaviour)
        # A streamed response a coroutine writes (health's Watch) is counted at
        # each context.write; a returned response once, when the call succeeds.
        writes_stream = handler.response_streaming and not streamed

        def entered(request: Any, context: Context) -> tuple[float, str | None]:
            return begin(figures, context)

        def failed(state: tuple[float, str | None], exc: BaseException, context: Context) -> None:
            end(method, figures, state[0], state[1], _code_of(exc, context), context)

        def returned(state: tuple[float, str | None], response: Any, context: Context) -> Any:
            code = _returned_code(context)
            if figures is not None and not streamed and not writes_stream and code is _OK:
                figures.sent.inc()
            end(method, figures, state[0], state[1], code, context)
            return response

        received = None
        counting = None
        each = None
        if figures is not None:
            received_counter = figures.received
            sent_counter = figures.sent
            if handler.request_streaming:

                def received(request: Any, context: Context, state: Any) -> Any:
                    return _counted(request, received_counter)

            else:

                def received(request: Any, context: Context, state: Any) -> Any:
                    received_counter.inc()
                    return request

            if writes_stream:

                def counting(context: Context, state: Any) -> Context:
                    return cast(Context, _CountingWrites(context, sent_counter))

            if streamed:

                def each(state: Any) -> None:
                    sent_counter.inc()

        return Steps(
            enter=entered,
            request=received,
            context=counting,
            after=returned,
            fail=failed,
            each=each,
        )

    def _begin(self, figures: MethodFigures | None, context: Context) -> tuple[float, str | None]:
        """The call's start time, and its peer when the access log will name it.

        The peer is read now, while the call is live: once a client has cancelled
        a stream, grpc.aio may have released the core call, and ``context.peer()``
        then dereferences a null pointer in grpc's C core (a segfault that takes
        the whole server down).
        """
        if figures is not None:
            figures.started.inc()
        peer = context.peer() if self._access_log else None
        return time.perf_counter(), peer

    def _end(
        self,
        method: str,
        figures: MethodFigures | None,
        started: float,
        peer: str | None,
        code: grpc.StatusCode,
        context: Context,
    ) -> None:
        failed = code is not _OK
        concerns.record_call(
            method,
            figures,
            time.perf_counter() - started,
            code,
            error_reason(context) if failed else "",
            resolved_namespace(),
            peer,
            log_access=self._access_log,
        )


class CallsInFlight:
    """``runstore_calls_in_flight{namespace}``: right after the namespace concern,
    so a call is counted under the namespace it acts in ("" for a service that
    acts in none) from the moment that is decided until it ends; a call refused
    before (by authentication or the namespace concern) is never in flight."""

    admit = admits_nothing

    def __init__(self, metrics: Metrics) -> None:
        counts = metrics.calls_in_flight

        def entered(request: Any, context: Context) -> str:
            namespace = resolved_namespace() or ""
            counts[namespace] += 1
            return namespace

        def left(namespace: str, response: Any, context: Context) -> Any:
            # get: a namespace purged meanwhile has no series to bring back.
            counts[namespace] = counts.get(namespace, 1) - 1
            return response

        def failed(namespace: str, exc: BaseException, context: Context) -> None:
            left(namespace, None, context)

        self._steps = Steps(enter=entered, after=left, fail=failed)

    def steps(self, method: str, handler: Handler) -> Steps:
        return self._steps


def _returned_code(context: grpc.aio.ServicerContext[Any, Any]) -> grpc.StatusCode:
    """OK, or the code a behaviour set without aborting."""
    code = context.code()
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.OK


def _code_of(exc: BaseException, context: grpc.aio.ServicerContext[Any, Any]) -> grpc.StatusCode:
    code = context.code()
    if isinstance(code, grpc.StatusCode) and code != grpc.StatusCode.OK:
        return code  # an abort (grpc.aio.AbortError) or a code set before raising
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN
