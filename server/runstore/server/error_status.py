"""The one place where errors become gRPC statuses (§11, D4).

A ``RunstoreError`` becomes a ``google.rpc.Status`` carrying exactly one
``google.rpc.ErrorInfo`` (domain ``runstore``, the error's reason, its
metadata and the ``request_id`` of the call), and a ``google.rpc.RetryInfo``
when the error says how long to wait (``retry_delay``). Anything else is logged with its
traceback and reported as INTERNAL with reason TRANSIENT: never as a contract
error, so clients may retry the identical command.

What goes back to the caller is bounded and says nothing about internals:
every echoed value is cut to a fixed size (``bounded``), and errors that are
not contract errors (database or server trouble) carry only their class's
generic message; the detail is in the server log under the request id.
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from runstore.contract.errors import (
    ERROR_DOMAIN,
    ContractError,
    InternalError,
    RunstoreError,
)
from runstore.server import call_request_id

log = logging.getLogger(__name__)

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

MAX_ECHOED_VALUE_BYTES: Final = 256
"""Longest ErrorInfo metadata value sent back (request values are echoed there)."""

MAX_MESSAGE_BYTES: Final = 1024
"""Longest status message sent back (messages quote request values)."""

CUT_MARK: Final = "…[cut]"
"""Ends a value that was cut to its bound."""


def bounded(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` bytes of UTF-8; otherwise its longest
    prefix that fits together with ``CUT_MARK``, cut at a character boundary."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    keep = max(0, limit - len(CUT_MARK.encode()))
    return data[:keep].decode("utf-8", "ignore") + CUT_MARK


def public_message(error: RunstoreError) -> str:
    """The message the caller sees: a contract error's (or a quota's) own
    text; for anything else (database or server trouble) only its generic
    class message."""
    message = error.message if error.shows_message else type(error).default_message
    return bounded(message, MAX_MESSAGE_BYTES)


def to_status(error: RunstoreError) -> grpc.Status:
    """The rich gRPC status of ``error``, with the call's request id."""
    metadata = {
        key: bounded(value, MAX_ECHOED_VALUE_BYTES) for key, value in error.metadata().items()
    }
    current = call_request_id.current()
    if current:
        metadata["request_id"] = current
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    details = [detail]
    if error.retry_delay is not None:
        # When to try again (a quota's next token, docs/namespaces.md#quotas).
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(max(0, round(error.retry_delay * 1e9)))
        retry = any_pb2.Any()
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(retry)
    code = grpc.StatusCode[error.code]
    message = status_pb2.Status(code=code.value[0], message=public_message(error), details=details)
    status = rpc_status.to_status(message)
    if current:
        trailing = (*status.trailing_metadata, (call_request_id.METADATA_KEY, current))
        status = _Status(status.code, status.details, trailing)
    return status


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")),
    grpc.Status,
):
    """A status with trailers of our choosing (grpc.Status is only an interface)."""


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: RunstoreError) -> NoReturn:
    status = to_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: context.abort raises")


async def _as_status(
    name: str, context: grpc.aio.ServicerContext[Any, Any], exc: Exception
) -> None:
    """Ends the call with the status of ``exc``, a failure of the method
    ``name`` (a plain ``except``, not a context manager: a call that succeeds
    pays nothing for it)."""
    if isinstance(exc, grpc.aio.AbortError):
        raise exc
    if isinstance(exc, RunstoreError):
        if not isinstance(exc, ContractError):
            # An error whose cause was logged once where it was seen (the
            # database refusing connections) is not logged again per call.
            level = logging.DEBUG if getattr(exc, "cause_logged", False) else logging.WARNING
            log.log(level, "%s failed (request %s): %r", name, call_request_id.current(), exc)
        await abort(context, exc)
    log.error("%s failed unexpectedly (request %s)", name, call_request_id.current(), exc_info=exc)
    await abort(context, InternalError())


def maps_errors(
    method: Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
) -> Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]:
    """Wraps a servicer method so every failure reaches the caller as a status."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: S, request: Req, context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
        try:
            return await method(self, request, context)
        except Exception as exc:
            await _as_status(name, context, exc)
        raise AssertionError("unreachable: a failure aborts the call")

    return wrapper


def maps_stream_errors(
    method: Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]],
) -> Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]]:
    """``maps_errors`` for a server-streaming method: a failure ends the
    stream with its status, after the messages already sent."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(
        self: S, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> AsyncIterator[Resp]:
        try:
            async for response in method(self, request, context):
                yield response
        except Exception as exc:
            await _as_status(name, context, exc)

    return wrapper
