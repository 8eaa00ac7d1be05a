"""Slot 4: the namespace every call of a runstore service acts in (docs/namespaces.md).

Right after authentication: the metadata ``x-runstore-namespace`` names it;
without it a principal bound to exactly one namespace acts there, any other
is refused (INVALID_ARGUMENT, ``NAMESPACE_REQUIRED``); with authentication
off, the header or ``default``. A principal not bound to the namespace is
PERMISSION_DENIED, before anything says whether the namespace exists; then an
unknown (or being deleted) namespace is NOT_FOUND, ``NAMESPACE_NOT_FOUND``.
The namespace is set (``call_namespace``) for the rest of the call. A
response stream ends with ``NAMESPACE_NOT_FOUND`` once its namespace is
deleted (``core.namespace_streams``), quotas or not.

Which methods act in a namespace is declared on each method
(``method_rules``, ``namespace_scope``). ``runstore.v1.NamespaceAdmin`` acts
on namespaces, not in one: it needs a principal bound to every namespace
(``"*"``) and ignores the header. Health, reflection and any other service are
left alone.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from typing import Any, Final

import grpc

from runstore.contract.auth_file import Principal
from runstore.contract.errors import (
    NamespaceRequiredError,
    PermissionDeniedError,
    RunstoreError,
    UnauthenticatedError,
    ValidationError,
)
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.contract.namespaces import DEFAULT, EVERY, NAME_RULE, is_valid_name
from runstore.server import call_namespace, call_principal
from runstore.server.core.namespace_streams import NamespaceStreams
from runstore.server.core.namespaces import NamespaceDirectory, namespace_not_found
from runstore.server.interceptors.handlers import Context, Handler, Steps
from runstore.server.method_rules import DECLARED, IN_ONE, ON_ALL
from runstore.server.stream_ending import until_ended

NAMESPACED: Final = frozenset(
    method for method, declared in DECLARED.items() if declared.namespace_scope == IN_ONE
)
"""The methods whose calls act in one namespace (declared in ``method_rules``)."""

ADMINISTRATION: Final = frozenset(
    method for method, declared in DECLARED.items() if declared.namespace_scope == ON_ALL
)
"""The methods that act on namespaces, not in one (NamespaceAdmin's)."""


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

    def __init__(self, directory: NamespaceDirectory | None, *, authenticated: bool) -> None:
        self._directory = directory
        self._authenticated = authenticated
        self.streams = None if directory is None else NamespaceStreams(directory)
        """The streams open per namespace, ended when it is deleted."""

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        try:
            requested = requested_namespace(details.invocation_metadata)
        except _Malformed as exc:
            _REQUESTED.set(ValidationError(str(exc), field=NAMESPACE_KEY))
            return
        _REQUESTED.set(requested)

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if method in ADMINISTRATION:
            return Steps(check=functools.partial(self._administrator, method))
        if method not in NAMESPACED:
            return None
        if handler.response_streaming and self.streams is not None:
            return Steps(
                check=functools.partial(self._resolve, method), responses=self._until_deleted
            )
        return Steps(check=functools.partial(self._resolve, method))

    async def _until_deleted(
        self, state: None, responses: AsyncIterator[Any], context: Context
    ) -> AsyncIterator[Any]:
        """A stream's responses until its namespace is deleted; then the call
        ends with ``NAMESPACE_NOT_FOUND``."""
        namespace, streams = _RESOLVED.get(), self.streams
        assert namespace is not None and streams is not None  # _resolve ran first
        stream = streams.open(namespace)
        try:
            async for response in until_ended(stream, responses, context):
                yield response
        finally:
            streams.close(namespace, stream)

    def _bindings(self, method: str) -> Principal | RunstoreError | None:
        if not self._authenticated:
            return None
        bound = call_principal.admitted()
        if bound is None:  # authentication refuses such a call before this runs
            return UnauthenticatedError("authentication required", details={"method": method})
        return bound

    async def _administrator(self, method: str) -> RunstoreError | None:
        bound = self._bindings(method)
        if isinstance(bound, RunstoreError):
            return bound
        if bound is not None and not bound.bound_to(EVERY):
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
            elif len(bound.namespaces) == 1 and bound.namespaces[0] != EVERY:
                requested = bound.namespaces[0]
            else:
                return NamespaceRequiredError(
                    f"principal {call_principal.current()!r} is bound to several namespaces: "
                    f"send {NAMESPACE_KEY}",
                    details={"metadata": NAMESPACE_KEY},
                )
        elif bound is not None and not bound.bound_to(requested):
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
            return namespace_not_found(requested)
        call_namespace.set_current(requested)
        _RESOLVED.set(requested)
        return None
