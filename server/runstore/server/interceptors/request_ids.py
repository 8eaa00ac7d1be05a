"""Slot 1: every call gets a request id, from ``x-request-id`` or generated.

The id is set for the whole call (``runstore.server.request_id``): later
interceptors, logs and every ErrorInfo (``request_id``) use it, and it goes
back to the caller in the trailing metadata ``x-request-id``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from runstore.server import request_id
from runstore.server.interceptors.handlers import Handler, prepared


class RequestIdInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        current = request_id.from_metadata(handler_call_details.invocation_metadata)
        request_id.set_current(current)
        handler = await continuation(handler_call_details)
        if handler is None:
            return None

        async def tag(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            request_id.set_current(current)
            context.set_trailing_metadata(((request_id.METADATA_KEY, current),))
            return request

        return prepared(handler, tag)
