"""The one way the chain wraps a method's behaviour, and the interceptor that applies it.

grpc.aio picks how to drive a behaviour by its kind (coroutine function, or
async generator function for a streamed response), so a wrapper must keep that
kind; ``wrapped`` writes that once for every concern. Each concern wraps a
method's handler once (``Concern.wrap``); per call it only reads what it needs
from the call's metadata (``Concern.admit``) into context variables its
wrapper reads back. ``Chain`` is the single grpc interceptor that composes the
concerns per method and caches the result, so a call costs one interceptor
hop and a dict lookup instead of a handler rebuilt by every concern (docs/benchmarks.md,
"The interceptor chain's own cost", has the figures).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias, cast

import grpc

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
"""A method handler of any message types (generic only in the type stubs)."""

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

Unary = Callable[[Any, Context], Awaitable[Any]]
"""A behaviour grpc.aio awaits: unary and client-streaming responses (and a
streamed response written with ``context.write``)."""

Streaming = Callable[[Any, Context], AsyncIterator[Any]]
"""A behaviour grpc.aio iterates: a server-streamed response."""

Prepare = Callable[[Any, Context], Awaitable[Any]]
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


def _awaitable(behaviour: Callable[..., Any]) -> Unary:
    """A behaviour that may return a plain value, as a coroutine function."""

    async def call(request: Any, context: Context) -> Any:
        result = behaviour(request, context)
        return await result if inspect.isawaitable(result) else result

    return call


def wrapped(
    handler: Handler,
    *,
    unary: Callable[[Unary], Unary],
    stream: Callable[[Streaming], Streaming] | None = None,
    **replace: Any,
) -> Handler:
    """``handler`` with its behaviour wrapped by ``unary`` (a behaviour grpc.aio
    awaits) or ``stream`` (an async generator function; left as it is when
    ``stream`` is None); ``replace`` sets other handler fields (e.g.
    ``request_deserializer=None`` for raw bytes). The wrapper made is of the same
    kind as the behaviour, so grpc.aio drives it the same way."""
    name, behaviour = behaviour_of(handler)
    if inspect.isasyncgenfunction(behaviour):
        changed = behaviour if stream is None else stream(behaviour)
    else:
        if not inspect.iscoroutinefunction(behaviour):
            behaviour = _awaitable(behaviour)
        changed = unary(behaviour)
    fields: Any = handler  # a namedtuple at run time
    return cast(Handler, fields._replace(**{name: changed}, **replace))


def prepared(handler: Handler, prepare: Prepare, **replace: Any) -> Handler:
    """``handler`` whose behaviour first runs ``prepare``; ``replace`` as in ``wrapped``."""

    def unary(behaviour: Unary) -> Unary:
        async def call(request: Any, context: Context) -> Any:
            return await behaviour(await prepare(request, context), context)

        return call

    def stream(behaviour: Streaming) -> Streaming:
        async def call(request: Any, context: Context) -> AsyncIterator[Any]:
            async for response in behaviour(await prepare(request, context), context):
                yield response

        return call

    return wrapped(handler, unary=unary, stream=stream, **replace)


class Concern(Protocol):
    """One cross-cutting concern of the chain."""

    def wrap(self, method: str, handler: Handler) -> Handler:
        """``handler`` of ``method`` with the concern around it; made once per method."""

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        """What the concern takes from each call before it runs (its metadata)."""


class Chain(grpc.aio.ServerInterceptor):
    """The concerns, outermost first, as one interceptor.

    The handler a method resolves to is the servicer's own, the same for every
    call (this is the innermost interceptor), so each method's composed
    handler is made on its first call and reused. Unknown methods are not
    cached (a caller could name any number of them).
    """

    def __init__(self, concerns: Sequence[Concern]) -> None:
        self._concerns = tuple(concerns)
        self._admit = tuple(concern.admit for concern in concerns)
        self._handlers: dict[str, Handler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method: str = details.method
        handler = self._handlers.get(method)
        if handler is None:
            found = await continuation(details)
            if found is None:
                return None
            handler = found
            for concern in reversed(self._concerns):
                handler = concern.wrap(method, handler)
            self._handlers[method] = handler
        for admit in self._admit:
            admit(details)
        return handler
