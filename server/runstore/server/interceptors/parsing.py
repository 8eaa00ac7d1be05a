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

from runstore.contract.errors import MalformedRequestError
from runstore.server.error_status import abort
from runstore.server.interceptors.handlers import Context, Handler, Refused, Steps, admits_nothing

_PARSED: ContextVar[Any] = ContextVar("runstore_parsed_request", default=None)


def parsed_request(request: Any) -> Any:
    """What this concern parsed ``request`` into during the call, for the
    concerns outside it, whose steps see the raw bytes (after the
    call has run; ``request`` itself if nothing was parsed)."""
    parsed = _PARSED.get()
    return parsed if parsed is not None and isinstance(request, bytes) else request


def _message_name(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "request"))


class RequestParsing:
    admit = admits_nothing

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if handler.request_deserializer is None:
            return None
        deserialize: Callable[[bytes], Any] = handler.request_deserializer
        name = _message_name(deserialize)

        def malformed() -> MalformedRequestError:
            return MalformedRequestError(f"request body is not a valid {name} message")

        def parse(raw: bytes, context: Context, state: None) -> Any:
            try:
                message = deserialize(raw)
            except Exception:
                raise Refused(malformed()) from None
            _PARSED.set(message)
            return message

        async def parse_each(raw_requests: AsyncIterator[bytes], context: Context) -> Any:
            async for raw in raw_requests:
                try:
                    message = deserialize(raw)
                except Exception:
                    await abort(context, malformed())
                _PARSED.set(message)
                yield message

        def parse_stream(raw_requests: AsyncIterator[bytes], context: Context, state: None) -> Any:
            return parse_each(raw_requests, context)

        return Steps(
            request=parse_stream if handler.request_streaming else parse,
            replace={"request_deserializer": None},
        )
