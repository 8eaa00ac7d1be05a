"""Slot 5: request bodies are parsed here, so an unparsable one is INVALID_ARGUMENT.

Left to grpc, a body that does not parse (a stray byte, a truncated message,
invalid UTF-8 in a string field) fails as UNKNOWN with Python class names. This
concern makes the method receive raw bytes and parses them itself with the
method's own deserializer; a failure answers ``MALFORMED_REQUEST`` naming the
expected message type, and the servicer never runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import grpc

from runstore.contract.errors import MalformedRequestError
from runstore.server.error_status import abort
from runstore.server.interceptors.handlers import Context, Handler, prepared

_PARSED: ContextVar[Any] = ContextVar("runstore_parsed_request", default=None)


def parsed_request(request: Any) -> Any:
    """What this concern parsed ``request`` into during the call, for the
    concerns outside it, whose behaviours receive the raw bytes (after the
    call has run; ``request`` itself if nothing was parsed)."""
    parsed = _PARSED.get()
    return parsed if parsed is not None and isinstance(request, bytes) else request


def _message_name(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "request"))


class RequestParsing:
    def admit(self, details: grpc.HandlerCallDetails) -> None:
        pass

    def wrap(self, method: str, handler: Handler) -> Handler:
        if handler.request_deserializer is None:
            return handler
        deserialize: Callable[[bytes], Any] = handler.request_deserializer
        name = _message_name(deserialize)

        async def parse(raw: bytes, context: Context) -> Any:
            try:
                message = deserialize(raw)
            except Exception:
                await abort(
                    context,
                    MalformedRequestError(f"request body is not a valid {name} message"),
                )
            _PARSED.set(message)
            return message

        async def parse_each(raw_requests: AsyncIterator[bytes], context: Context) -> Any:
            async for raw in raw_requests:
                yield await parse(raw, context)

        async def prepare(request: Any, context: Context) -> Any:
            return parse_each(request, context)

        if handler.request_streaming:
            return prepared(handler, prepare, request_deserializer=None)
        return prepared(handler, parse, request_deserializer=None)
