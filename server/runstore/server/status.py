"""The one place where errors become gRPC statuses (§11, D4).

A ``RunstoreError`` becomes a ``google.rpc.Status`` carrying exactly one
``google.rpc.ErrorInfo`` (domain ``runstore``, the error's reason, and its
metadata). Anything else is logged with its traceback and reported as
INTERNAL with reason TRANSIENT: never as a contract error, so clients may
retry the identical command.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from runstore.contract.errors import ERROR_DOMAIN, InternalError, RunstoreError

log = logging.getLogger(__name__)

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def to_status(error: RunstoreError) -> grpc.Status:
    """The rich gRPC status of ``error``."""
    info = error_details_pb2.ErrorInfo(
        reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata()
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    code = grpc.StatusCode[error.code]
    message = status_pb2.Status(code=code.value[0], message=error.message, details=[detail])
    return rpc_status.to_status(message)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: RunstoreError) -> NoReturn:
    status = to_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: context.abort raises")


@contextlib.asynccontextmanager
async def _as_status(name: str, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
    """Ends the call with the status of any failure inside the block."""
    try:
        yield
    except RunstoreError as error:
        if isinstance(error, InternalError):
            log.warning("%s failed: %r", name, error)
        await abort(context, error)
    except (asyncio.CancelledError, grpc.aio.AbortError):
        raise
    except Exception:
        log.exception("%s failed unexpectedly", name)
        await abort(context, InternalError())


def maps_errors(
    method: Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
) -> Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]:
    """Wraps a servicer method so every failure reaches the caller as a status."""

    @functools.wraps(method)
    async def wrapper(self: S, request: Req, context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
        async with _as_status(method.__name__, context):
            return await method(self, request, context)
        raise AssertionError("unreachable: a failure aborts the call")

    return wrapper


def maps_stream_errors(
    method: Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]],
) -> Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]]:
    """``maps_errors`` for a server-streaming method: a failure ends the
    stream with its status, after the messages already sent."""

    @functools.wraps(method)
    async def wrapper(
        self: S, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> AsyncIterator[Resp]:
        async with _as_status(method.__name__, context):
            async for response in method(self, request, context):
                yield response

    return wrapper
