"""How the chain runs its concerns around a method's behaviour, flat.

Each concern says once per method what it does around each call of it
(``Concern.steps``): plain functions run before the behaviour in chain order
(``Steps.enter``, ``Steps.request``) and after it in reverse order
(``Steps.after`` on success, ``Steps.fail`` on any exception), as nested
wrappers would run them. ``Chain`` builds ONE coroutine (or async generator,
for a streamed response: grpc.aio picks how to drive a behaviour by its kind)
per method that runs every concern's steps in a loop around the servicer's
behaviour, so a call costs one frame of the chain instead of one per concern
(docs/benchmarks.md, "The interceptor chain's own cost", has the figures).
Per call a concern first reads what it needs from the call's metadata
(``Concern.admit``) into context variables its steps read back.

A step refuses a call by raising ``Refused``: the call aborts with the error's
status, and the concerns outside it see that abort as their failure, those
inside it never run. A concern written as a wrapper (``Concern.wrap``, with
``wrapped`` or ``prepared``) still composes, nested around what is inside it.

The flat coroutine is Python source written and compiled once per method
(``_straight_line``). ``nested`` is the plain reference of the same protocol,
one readable wrapper per concern; ``RUNSTORE_INTERCEPTOR_CHAIN=nested`` makes
the server use it (a traceback then names real lines), and the interceptor
tests run against both. The protocol is described once, in docs/development.md
("The interceptor chain").
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, cast

import grpc

from runstore.contract.errors import RunstoreError
from runstore.server.error_status import abort

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

CHAIN_ENV = "RUNSTORE_INTERCEPTOR_CHAIN"
"""The environment variable that picks how ``Chain`` runs the steps."""

CHAIN_KINDS = ("flat", "nested")
"""``flat``: one generated coroutine per method (the default, the faster);
``nested``: the reference, one plain wrapper per concern."""


class ChainKindError(ValueError):
    """``CHAIN_ENV`` names no kind of chain: the server does not start."""


def chain_kind(environ: Mapping[str, str] = os.environ) -> str:
    """The kind ``CHAIN_ENV`` names (``flat`` when unset); any other value is a
    mistake the server refuses to start with."""
    kind = environ.get(CHAIN_ENV, "") or "flat"
    if kind not in CHAIN_KINDS:
        raise ChainKindError(
            f"{CHAIN_ENV}={kind!r} is not a kind of interceptor chain "
            f"(expected {' or '.join(CHAIN_KINDS)})"
        )
    return kind


class Refused(Exception):
    """Raised by a step to end the call with ``error`` (its status and ErrorInfo)."""

    def __init__(self, error: RunstoreError) -> None:
        super().__init__(error)
        self.error = error


@dataclass(frozen=True, slots=True)
class Steps:
    """What one concern does around each call of one method; every step is optional.

    ``enter(request, context)`` runs before the behaviour, outermost concern
    first, and returns the call's state for this concern (a coroutine
    function when it must await, e.g. a database read); ``request(request,
    context, state)`` then returns the request the rest of the call gets, and
    ``context(context, state)`` the context the behaviour gets; ``check()``,
    awaited last, returns the error that refuses the call, or None. After the
    behaviour, innermost first, ``after(state, response, context)`` returns the
    response handed outward (raising ``Refused`` there refuses it), or
    ``fail(state, exc, context)`` sees the exception the call ends with (a
    refusal from inside included) before it goes on outward. A streamed
    response's messages each pass ``each(state)`` on the way out, and
    ``responses(state, responses, context)`` may replace the stream of them.
    ``replace`` sets fields of the handler (e.g. ``request_deserializer``).
    """

    enter: Callable[[Any, Context], Any] | None = None
    request: Callable[[Any, Context, Any], Any] | None = None
    context: Callable[[Context, Any], Context] | None = None
    check: Callable[[], Awaitable[RunstoreError | None]] | None = None
    after: Callable[[Any, Any, Context], Any] | None = None
    fail: Callable[[Any, BaseException, Context], None] | None = None
    each: Callable[[Any], None] | None = None
    responses: Callable[[Any, AsyncIterator[Any], Context], AsyncIterator[Any]] | None = None
    replace: Mapping[str, Any] = field(default_factory=dict)


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


def flat(handler: Handler, steps: Sequence[Steps]) -> Handler:
    """``handler`` with ``steps`` (outermost first) run around its behaviour by
    one coroutine (or async generator) made now for this list of steps."""
    steps = tuple(steps)
    if not steps:
        return handler
    replace: dict[str, Any] = {}
    for step in steps:
        replace.update(step.replace)
    name, behaviour = behaviour_of(handler)
    changed = _straight_line(behaviour, steps)
    fields: Any = handler  # a namedtuple at run time
    return cast(Handler, fields._replace(**{name: changed}, **replace))


def nested(handler: Handler, steps: Sequence[Steps]) -> Handler:
    """``handler`` with ``steps`` (outermost first) run around its behaviour by
    one plain wrapper per step: the reference the generated ``flat`` must match
    (docs/development.md, "The interceptor chain")."""
    steps = tuple(steps)
    if not steps:
        return handler
    replace: dict[str, Any] = {}
    for step in steps:
        replace.update(step.replace)
    name, behaviour = behaviour_of(handler)
    if inspect.isasyncgenfunction(behaviour):
        changed: Callable[..., Any] = behaviour
        for step in reversed(steps):
            changed = _nested_stream(changed, step)
    else:
        changed = _refusing(_awaitable(behaviour))
        for step in reversed(steps):
            changed = _nested_unary(changed, step)
    fields: Any = handler  # a namedtuple at run time
    return cast(Handler, fields._replace(**{name: changed}, **replace))


async def _entered(step: Steps, request: Any, context: Context) -> tuple[Any, Any, Context]:
    """Runs ``step``'s steps before the behaviour: its state, the request and
    the context the rest of the call gets; a refusal aborts the call here."""
    try:
        state = None
        if inspect.iscoroutinefunction(step.enter):
            state = await step.enter(request, context)
        elif step.enter is not None:
            state = step.enter(request, context)
        if step.request is not None:
            request = step.request(request, context, state)
        given = context if step.context is None else step.context(context, state)
        if step.check is not None:
            refusal = await step.check()
            if refusal is not None:
                raise Refused(refusal)
    except Refused as refused:
        await abort(context, refused.error)
    return state, request, given


def _refusing(behaviour: Unary) -> Unary:
    """``behaviour`` whose ``Refused`` aborts the call, as a step's does."""

    async def call(request: Any, context: Context) -> Any:
        try:
            return await behaviour(request, context)
        except Refused as refused:
            await abort(context, refused.error)

    return call


def _nested_unary(inner: Unary, step: Steps) -> Unary:
    """``inner`` (awaited) with ``step`` around it."""

    async def call(request: Any, context: Context) -> Any:
        state, request, given = await _entered(step, request, context)
        try:
            response = await inner(request, given)
        except BaseException as exc:
            if step.fail is not None:
                step.fail(state, exc, context)
            raise
        if step.after is None:
            return response
        try:
            return step.after(state, response, context)
        except Refused as refused:
            response = None  # a refused response is freed at once (Limits)
            await abort(context, refused.error)

    return call


def _nested_stream(inner: Streaming, step: Steps) -> Streaming:
    """``inner`` (an async generator function) with ``step`` around it."""

    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        state, request, given = await _entered(step, request, context)
        try:
            responses = inner(request, given)
            if step.responses is not None:
                responses = step.responses(state, responses, context)
            async for response in responses:
                if step.each is not None:
                    step.each(state)
                yield response
        except BaseException as exc:
            if step.fail is not None:
                step.fail(state, exc, context)
            raise
        if step.after is not None:
            step.after(state, None, context)

    return call


def _straight_line(behaviour: Callable[..., Any], steps: tuple[Steps, ...]) -> Callable[..., Any]:
    """The one function that runs ``steps`` around ``behaviour``, written out
    step by step (as ``dataclasses`` writes its methods): no loop, no list of
    states, no branch for a step a concern does not take.

    ``entered`` counts the concerns whose ``fail`` an exception now reaches: a
    concern is entered once its ``enter``, ``request`` and ``context`` ran, and
    leaves as its ``after`` starts (one that raises there is not failed too).
    """
    streamed = inspect.isasyncgenfunction(behaviour)
    names: dict[str, Any] = {
        "Refused": Refused,
        "abort": abort,
        "isawaitable": inspect.isawaitable,
        "behaviour": behaviour,
    }
    body: list[str] = []
    for k, step in enumerate(steps):
        for hook in ("enter", "request", "context", "check", "after", "fail", "each", "responses"):
            if getattr(step, hook) is not None:
                names[f"{hook}{k}"] = getattr(step, hook)
        if step.enter is not None:
            waits = "await " if inspect.iscoroutinefunction(step.enter) else ""
            body.append(f"s{k} = {waits}enter{k}(request, context)")
        elif any(
            hook is not None
            for hook in (
                step.request,
                step.context,
                step.after,
                step.fail,
                step.each,
                step.responses,
            )
        ):
            body.append(f"s{k} = None")  # the state its other steps are handed
        if step.request is not None:
            body.append(f"request = request{k}(request, context, s{k})")
        if step.context is not None:
            body.append(f"given = context{k}(given, s{k})")
        if step.check is not None:
            body.append(f"refusal = await check{k}()")
            body.append("if refusal is not None:")
            body.append("    raise Refused(refusal)")
        if step.fail is not None:
            body.append(f"entered = {k + 1}")
    tail: list[str] = []
    if streamed:
        head = ["async def call(request, context):"]
        entering = ["    given = context", "    entered = 0", "    try:", "        try:"]
        entering += ["            " + line for line in body]
        entering += [
            "        except Refused as refused:",
            "            await abort(context, refused.error)",
            "        responses = behaviour(request, given)",
        ]
        for k in range(len(steps) - 1, -1, -1):
            if steps[k].responses is not None:
                entering.append(f"        responses = responses{k}(s{k}, responses, context)")
        entering.append("        async for response in responses:")
        for k in range(len(steps) - 1, -1, -1):
            if steps[k].each is not None:
                entering.append(f"            each{k}(s{k})")
        entering.append("            yield response")
        for k in range(len(steps) - 1, -1, -1):
            if steps[k].after is not None:
                entering += [f"        entered = {k}", f"        after{k}(s{k}, None, context)"]
        lines = head + entering
    else:
        lines = ["async def call(request, context):", "    given = context", "    entered = 0"]
        lines += ["    try:", "        try:"]
        lines += ["            " + line for line in body]
        if inspect.iscoroutinefunction(behaviour):
            lines.append("            response = await behaviour(request, given)")
        else:
            lines += [
                "            response = behaviour(request, given)",
                "            if isawaitable(response):",
                "                response = await response",
            ]
        for k in range(len(steps) - 1, -1, -1):
            if steps[k].after is not None:
                lines += [
                    f"            entered = {k}",
                    f"            response = after{k}(s{k}, response, context)",
                ]
        lines += [
            "            return response",
            "        except Refused as refused:",
            # A refused response is not kept alive by this frame (the traceback
            # holds it until the exception is collected): Limits' refusals
            # must free the pages they refuse at once.
            "            response = None",
            "            await abort(context, refused.error)",
        ]
    tail.append("    except BaseException as exc:")
    for k in range(len(steps) - 1, -1, -1):
        if steps[k].fail is not None:
            tail.append(f"        if entered > {k}:")
            tail.append(f"            fail{k}(s{k}, exc, context)")
    tail.append("        raise")
    exec("\n".join(lines + tail), names)  # our own text, made once per method
    call: Callable[..., Any] = names["call"]
    call.__qualname__ = f"flat({getattr(behaviour, '__qualname__', 'behaviour')})"
    return call


class Concern(Protocol):
    """One cross-cutting concern of the chain."""

    def steps(self, method: str, handler: Handler) -> Steps | None:
        """What the concern does around each call of ``method`` (None: nothing);
        asked once per method."""

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        """What the concern takes from each call before it runs (its metadata)."""


class Chain(grpc.aio.ServerInterceptor):
    """The concerns, outermost first, as one interceptor.

    The handler a method resolves to is the servicer's own, the same for every
    call (this is the innermost interceptor), so each method's handler is made
    on its first call and reused: one flat coroutine running every concern's
    steps. Unknown methods are not cached (a caller could name any number of
    them).
    """

    def __init__(self, concerns: Sequence[Any], *, kind: str | None = None) -> None:
        """``kind``: ``flat`` or ``nested`` (``CHAIN_KINDS``); None reads ``CHAIN_ENV``."""
        if kind is None:
            kind = chain_kind()
        elif kind not in CHAIN_KINDS:
            raise ChainKindError(f"chain kind {kind!r}: expected {' or '.join(CHAIN_KINDS)}")
        self.kind = kind
        self._run = flat if kind == "flat" else nested
        self._concerns = tuple(concerns)
        # A concern that takes nothing from the metadata costs no call.
        self._admit = tuple(
            concern.admit
            for concern in concerns
            if getattr(type(concern), "admit", None) is not admits_nothing
        )
        self._handlers: dict[str, Handler] = {}

    def compose(self, method: str, handler: Handler) -> Handler:
        """``handler`` of ``method`` with every concern around it."""
        pending: list[Steps] = []  # the steps inside the next wrapper, innermost last
        for concern in reversed(self._concerns):
            steps_of = getattr(concern, "steps", None)
            if steps_of is None:  # a wrapper: what is inside it first
                handler = concern.wrap(method, self._run(handler, pending[::-1]))
                pending = []
                continue
            steps = steps_of(method, handler)
            if steps is not None:
                pending.append(steps)
                if steps.replace:  # what the concerns outside it see
                    fields: Any = handler
                    handler = cast(Handler, fields._replace(**steps.replace))
        return self._run(handler, pending[::-1])

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = self._handlers.get(details.method)
        if handler is None:
            found = await continuation(details)
            if found is None:
                return None
            handler = self._handlers[details.method] = self.compose(details.method, found)
        for admit in self._admit:
            admit(details)
        return handler


def admits_nothing(self: Any, details: grpc.HandlerCallDetails) -> None:
    """The ``admit`` of a concern that reads nothing of the call's metadata."""
