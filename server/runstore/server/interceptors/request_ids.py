"""Slot 1: every call gets a request id, from ``x-request-id`` or generated.

The id is set for the whole call (``runstore.server.call_request_id``): later
concerns, logs and every ErrorInfo (``request_id``) use it, and it goes
back to the caller in the trailing metadata ``x-request-id``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from runstore.server import call_request_id
from runstore.server.interceptors.handlers import Context, Handler, Streaming, Unary, wrapped


def _tagged(context: Context) -> None:
    context.set_trailing_metadata(((call_request_id.METADATA_KEY, call_request_id.current()),))


def _unary(behaviour: Unary) -> Unary:
    async def call(request: Any, context: Context) -> Any:
        _tagged(context)
        return await behaviour(request, context)

    return call


def _stream(behaviour: Streaming) -> Streaming:
    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        _tagged(context)
        async for response in behaviour(request, context):
            yield response

    return call


class RequestIds:
    def admit(self, details: grpc.HandlerCallDetails) -> None:
        call_request_id.set_current(call_request_id.from_metadata(details.invocation_metadata))

    def wrap(self, method: str, handler: Handler) -> Handler:
        return wrapped(handler, unary=_unary, stream=_stream)
