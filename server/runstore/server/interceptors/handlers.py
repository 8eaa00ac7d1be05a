"""Rebuilding a method handler around its behaviour, for any of the four call shapes.

grpc.aio picks how to drive a behaviour by its kind (coroutine function or
async generator function), so a wrapper must keep that kind; this module
writes that once for every interceptor that needs to act inside the call.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, cast

import grpc

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
"""A method handler of any message types (generic only in the type stubs)."""

Prepare = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]
"""Runs first in the call: takes the request (or request iterator) and returns
the one the behaviour gets."""

_BEHAVIOURS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def behaviour_of(handler: Handler) -> tuple[str, Callable[..., Any]]:
    """The handler's populated behaviour field and its function."""
    for name in _BEHAVIOURS:
        behaviour = getattr(handler, name)
        if behaviour is not None:
            return name, behaviour
    raise ValueError("method handler without a behaviour")


def _with_prepare(behaviour: Callable[..., Any], prepare: Prepare) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behaviour):

        async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            prepared = await prepare(request, context)
            async for response in behaviour(prepared, context):
                yield response

        return stream

    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        prepared = await prepare(request, context)
        result = behaviour(prepared, context)
        return await result if inspect.isawaitable(result) else result

    return call


def prepared(handler: Handler, prepare: Prepare, **replace: Any) -> Handler:
    """``handler`` whose behaviour first runs ``prepare``; ``replace`` sets
    other handler fields (e.g. ``request_deserializer=None`` for raw bytes)."""
    name, behaviour = behaviour_of(handler)
    fields: Any = handler  # a namedtuple at run time
    return cast(Handler, fields._replace(**{name: _with_prepare(behaviour, prepare)}, **replace))
