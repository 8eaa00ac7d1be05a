"""Marks when each call starts, so its database work is bounded from then on
(``db.bound``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc

from runstore.server.db import bound

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


def _bounded(behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``behavior`` (a grpc.aio method: a coroutine function) with its start marked."""

    async def call(request: Any, context: Any) -> Any:
        token = bound.mark_call_start()
        try:
            return await behavior(request, context)
        finally:
            bound.end_call(token)

    return call


class DatabaseBoundInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every unary method once; streams keep the per-operation bound.

    Innermost in the chain, so the handler it wraps is always the method's own
    and can be cached per method."""

    def __init__(self) -> None:
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Req, _Resp] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return cast("grpc.RpcMethodHandler[_Req, _Resp]", wrapped)
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        # grpc's method handlers are named tuples.
        wrapped = cast(Any, handler)._replace(unary_unary=_bounded(handler.unary_unary))
        self._wrapped[method] = wrapped
        return cast("grpc.RpcMethodHandler[_Req, _Resp]", wrapped)
