"""Marks when each call starts, so its database work is bounded from then on
(``db.bound``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from runstore.server.db import bound


def _bounded(behavior: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Any]:
    async def call(request: Any, context: Any) -> Any:
        token = bound.mark_call_start()
        try:
            return await behavior(request, context)
        finally:
            bound.end_call(token)

    return call


class DatabaseBoundInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every unary method once; streams keep the per-operation bound.

    Innermost in the chain, so the handler it wraps is always the method's own
    and can be cached per method."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        wrapped = handler._replace(unary_unary=_bounded(handler.unary_unary))
        self._wrapped[method] = wrapped
        return wrapped
