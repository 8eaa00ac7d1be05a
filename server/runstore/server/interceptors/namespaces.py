"""Slot 4: the namespace every call of a runstore service acts in (docs/namespaces.md).

Right after authentication: the metadata ``x-runstore-namespace`` names it;
without it a principal bound to exactly one namespace acts there, any other
is refused (INVALID_ARGUMENT, ``NAMESPACE_REQUIRED``); with authentication
off, the header or ``default``. A principal not bound to the namespace is
PERMISSION_DENIED, before anything says whether the namespace exists; then an
unknown (or being deleted) namespace is NOT_FOUND, ``NAMESPACE_NOT_FOUND``.
The namespace is set (``call_namespace``) for the rest of the call.

Then the namespace's quotas (``core.quotas``, docs/namespaces.md#quotas), on
the raw request before it is parsed: a refusal is RESOURCE_EXHAUSTED,
``QUOTA_EXCEEDED``. A Watch stream holds its place in the namespace's
``watch_streams`` while open, and ends with ``NAMESPACE_NOT_FOUND`` when the
namespace is deleted.

``runstore.v1.NamespaceAdmin`` acts on namespaces, not in one: it needs a
principal bound to every namespace (``"*"``) and ignores the header. Health,
reflection and any other service are left alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, Final

import grpc

from runstore.contract.errors import (
    NamespaceNotFoundError,
    NamespaceRequiredError,
    PermissionDeniedError,
    RunstoreError,
    UnauthenticatedError,
    ValidationError,
)
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.contract.namespaces import DEFAULT, EVERY, NAME_RULE, is_valid_name
from runstore.server import call_namespace, call_principal
from runstore.server.core.namespaces import NamespaceDirectory
from runstore.server.core.quotas import Quotas, Rule
from runstore.server.error_status import to_status
from runstore.server.interceptors.handlers import Context, Handler, Streaming, Unary, wrapped

NAMESPACED_SERVICES: Final = (
    "/runstore.v1.RuntimeStore/",
    "/runstore.v1.SessionAdmin/",
    "/runstore.v1.MemoryStore/",
    "/runstore.v1.ContextStore/",
)
"""The services whose calls act in one namespace."""

ADMINISTRATION: Final = "/runstore.v1.NamespaceAdmin/"


class _Malformed(Exception):
    pass


_REQUESTED: ContextVar[str | RunstoreError | None] = ContextVar(
    "runstore_requested_namespace", default=None
)


_RESOLVED: ContextVar[str | None] = ContextVar("runstore_resolved_namespace", default=None)


def resolved() -> str | None:
    """The namespace the call acts in, once decided (None before, or when refused)."""
    return _RESOLVED.get()


def requested_namespace(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The value of ``x-runstore-namespace``; None without one."""
    values = [value for key, value in metadata or () if key == NAMESPACE_KEY]
    if not values:
        return None
    if len(values) > 1:
        raise _Malformed(f"{NAMESPACE_KEY} must be sent once, not {len(values)} times")
    value = values[0] if isinstance(values[0], str) else values[0].decode("latin-1")
    if not is_valid_name(value):
        raise _Malformed(f"{NAMESPACE_KEY} must match {NAME_RULE}, not {value!r}")
    return value


class NamespaceResolution:
    """Decides each call's namespace (``directory`` says which exist).

    Args:
        directory: The active namespaces; None serves ``default`` only.
        authenticated: Whether authentication is on (principals carry bindings).
    """

    def __init__(
        self,
        directory: NamespaceDirectory | None,
        *,
        authenticated: bool,
        quotas: Quotas | None = None,
    ) -> None:
        self._directory = directory
        self._authenticated = authenticated
        self._quotas = quotas

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        try:
            requested = requested_namespace(details.invocation_metadata)
        except _Malformed as exc:
            _REQUESTED.set(ValidationError(str(exc), field=NAMESPACE_KEY))
            return
        _REQUESTED.set(requested)

    def wrap(self, method: str, handler: Handler) -> Handler:
        if method.startswith(ADMINISTRATION):
            check = self._administrator
        elif method.startswith(NAMESPACED_SERVICES):
            check = self._resolve
        else:
            return handler
        quotas = self._quotas
        rule = quotas.rule(method) if quotas is not None and check == self._resolve else None
        if quotas is not None and rule is not None:
            return _with_quotas(handler, method, check, quotas, rule)

        def unary(inner: Unary) -> Unary:
            async def call(request: Any, context: Context) -> Any:
                refusal = await check(method)
                if refusal is not None:
                    await _abort(context, refusal)
                return await inner(request, context)

            return call

        def stream(inner: Streaming) -> Streaming:
            async def call(request: Any, context: Context) -> AsyncIterator[Any]:
                refusal = await check(method)
                if refusal is not None:
                    await _abort(context, refusal)
                async for response in inner(request, context):
                    yield response

            return call

        return wrapped(handler, unary=unary, stream=stream)

    def _bindings(self, method: str) -> tuple[str, ...] | RunstoreError | None:
        if not self._authenticated:
            return None
        bound = call_principal.namespaces()
        if bound is None:  # authentication refuses such a call before this runs
            return UnauthenticatedError("authentication required", details={"method": method})
        return bound

    async def _administrator(self, method: str) -> RunstoreError | None:
        bound = self._bindings(method)
        if isinstance(bound, RunstoreError):
            return bound
        if bound is not None and EVERY not in bound:
            return PermissionDeniedError(
                f"principal {call_principal.current()!r} is not bound to every namespace "
                '("*"), which NamespaceAdmin needs',
                details={"method": method},
            )
        return None

    async def _resolve(self, method: str) -> RunstoreError | None:
        requested = _REQUESTED.get()
        if isinstance(requested, RunstoreError):
            return requested
        bound = self._bindings(method)
        if isinstance(bound, RunstoreError):
            return bound
        if requested is None:
            if bound is None:
                requested = DEFAULT
            elif len(bound) == 1 and bound[0] != EVERY:
                requested = bound[0]
            else:
                return NamespaceRequiredError(
                    f"principal {call_principal.current()!r} is bound to several namespaces: "
                    f"send {NAMESPACE_KEY}",
                    details={"metadata": NAMESPACE_KEY},
                )
        elif bound is not None and EVERY not in bound and requested not in bound:
            return PermissionDeniedError(
                f"principal {call_principal.current()!r} is not bound to namespace {requested!r}",
                details={"method": method, "namespace": requested},
            )
        try:
            known = (
                requested == DEFAULT
                if self._directory is None
                else await self._directory.is_active(requested)
            )
        except RunstoreError as exc:  # the database cannot say (UNAVAILABLE, ...)
            return exc
        if not known:
            return NamespaceNotFoundError(
                f"namespace {requested!r} not found", details={"namespace": requested}
            )
        call_namespace.set_current(requested)
        _RESOLVED.set(requested)
        return None


def _with_quotas(
    handler: Handler,
    method: str,
    check: Callable[[str], Awaitable[RunstoreError | None]],
    quotas: Quotas,
    rule: Rule,
) -> Handler:
    """``handler`` behind the namespace's check and then its quotas (the rules
    and their state are ``core.quotas``'; this only calls them)."""
    adds_data = rule.adds_data

    def unary(inner: Unary) -> Unary:
        async def call(request: Any, context: Context) -> Any:
            refusal = await check(method)
            namespace = _RESOLVED.get() or DEFAULT
            size = len(request) if isinstance(request, bytes) else _size(request)
            if refusal is None:
                refusal = quotas.admit(rule, namespace, size)
            if refusal is not None:
                await _abort(context, refusal)
            response = await inner(request, context)
            if adds_data:
                quotas.committed(namespace, size)
            return response

        return call

    def stream(inner: Streaming) -> Streaming:
        async def call(request: Any, context: Context) -> AsyncIterator[Any]:
            refusal = await check(method)
            if refusal is not None:
                await _abort(context, refusal)
            lease = quotas.open_stream(_RESOLVED.get() or DEFAULT)
            if isinstance(lease, RunstoreError):
                await _abort(context, lease)
                return
            responses = inner(request, context)
            try:
                while True:
                    try:
                        response = await lease.next_of(responses)
                    except StopAsyncIteration:
                        break
                    if lease.refusal is not None:
                        break
                    yield response
            finally:
                lease.close()
            if lease.refusal is not None:  # its namespace was deleted
                close = getattr(responses, "aclose", None)
                if close is not None:
                    await close()
                await _abort(context, lease.refusal)

        return call

    return wrapped(handler, unary=unary, stream=stream)


def _size(request: Any) -> int:
    """A parsed request's encoded size (the chain hands this slot raw bytes)."""
    byte_size = getattr(request, "ByteSize", None)
    return int(byte_size()) if byte_size is not None else 0


async def _abort(context: Context, error: RunstoreError) -> None:
    status = to_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)
