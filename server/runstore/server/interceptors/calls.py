"""Slot 2: every call measured and logged once, whatever answered it.

One interceptor does both, around everything later in the chain (so refusals
by authentication, limits and request parsing count too): the go-grpc-prometheus
call metrics (``grpc_server_started_total``, ``grpc_server_handled_total``,
``grpc_server_handling_seconds``), ``runstore_calls_in_flight`` and
``runstore_errors_total{reason}``, and the access-log line (method, gRPC
code, ErrorInfo reason, duration, principal, peer, request id). Neither
payloads nor metadata values other than the request id are ever logged.

The code is the one the call ended with: OK when the behaviour returned,
the aborted code (with its ErrorInfo reason, read back from the status
details in the trailing metadata) when it aborted, CANCELLED when the caller
went away, UNKNOWN when it raised anything else (what grpc answers then).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

from runstore.server import principal, request_id
from runstore.server.interceptors.handlers import Handler, behaviour_of
from runstore.server.logs import ACCESS_LOGGER
from runstore.server.metrics import GO_CODE_NAMES, MethodFigures, Metrics, grpc_type

access_log = logging.getLogger(ACCESS_LOGGER)

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


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


class _Call:
    """One call being observed: its start, and how it ended."""

    __slots__ = ("code", "figures", "method", "started")

    def __init__(self, method: str, figures: MethodFigures | None) -> None:
        self.method = method
        self.figures = figures
        self.started = time.perf_counter()
        self.code = grpc.StatusCode.OK


class CallObserver(grpc.aio.ServerInterceptor):
    """Metrics (when ``metrics`` is given) and the access log (when ``access_log``)."""

    def __init__(self, metrics: Metrics | None, *, access_log: bool) -> None:
        self._metrics = metrics
        self._access_log = access_log

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        figures = None
        if self._metrics is not None:
            kind = grpc_type(handler.request_streaming, handler.response_streaming)
            figures = self._metrics.method(method, kind)
        name, behaviour = behaviour_of(handler)
        fields: Any = handler  # a namedtuple at run time
        return cast(Handler, fields._replace(**{name: self._around(behaviour, method, figures)}))

    def _around(
        self, behaviour: Callable[..., Any], method: str, figures: MethodFigures | None
    ) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(behaviour):

            async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                call = self._begin(method, figures)
                try:
                    async for response in behaviour(request, context):
                        yield response
                except BaseException as exc:
                    call.code = _code_of(exc, context)
                    raise
                else:
                    call.code = _returned_code(context)
                finally:
                    self._end(call, context)

            return stream

        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            call = self._begin(method, figures)
            try:
                result = behaviour(request, context)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                call.code = _code_of(exc, context)
                raise
            else:
                call.code = _returned_code(context)
                return result
            finally:
                self._end(call, context)

        return unary

    def _begin(self, method: str, figures: MethodFigures | None) -> _Call:
        if self._metrics is not None and figures is not None:
            figures.started.inc()
            self._metrics.in_flight.inc()
        return _Call(method, figures)

    def _end(self, call: _Call, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        seconds = time.perf_counter() - call.started
        failed = call.code != grpc.StatusCode.OK
        reason = error_reason(context) if failed else ""
        if self._metrics is not None and call.figures is not None:
            self._metrics.in_flight.dec()
            call.figures.handled(call.code).inc()
            call.figures.handling.observe(seconds)
            if failed:
                self._metrics.errors.labels(reason or "NONE").inc()
        if self._access_log:
            fields = {
                "method": call.method,
                "code": GO_CODE_NAMES.get(call.code, "Unknown"),
                "reason": reason or None,
                "duration_ms": round(seconds * 1000, 3),
                "principal": principal.current() or None,
                "peer": context.peer(),
                "request_id": request_id.current() or None,
            }
            access_log.info("%s %s", call.method, fields["code"], extra={"access": fields})


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
