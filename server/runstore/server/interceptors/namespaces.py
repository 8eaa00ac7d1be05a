"""Slot 4: the namespace every call of a runstore service acts in (docs/namespaces.md).

Right after authentication: the metadata ``x-runstore-namespace`` names it;
without it a principal bound to exactly one namespace acts there, any other
is refused (INVALID_ARGUMENT, ``NAMESPACE_REQUIRED``); with authentication
off, the header or ``default``. A principal not bound to the namespace is
PERMISSION_DENIED, before anything says whether the namespace exists; then an
unknown (or being deleted) namespace is NOT_FOUND, ``NAMESPACE_NOT_FOUND``.
The namespace is named (``call_scope``) for the rest of the call; the header
is read from the call's own context, in the call's own task. The rule is
``concerns.decide_namespace``, the one the console's pages pass too, with
the gRPC choice when none is named. A response stream ends with
``NAMESPACE_NOT_FOUND`` once its namespace is deleted
(``core.namespace_streams``), quotas or not.

Which methods act in a namespace is declared on each method
(``method_rules``, ``namespace_scope``). ``runstore.v1.NamespaceAdmin`` acts
on namespaces, not in one: it needs a principal bound to every namespace
(``"*"``), ignores the header and acts on ``ALL_NAMESPACES``. Health,
reflection and any other service are left alone (and name no namespace: their
database work would fail, not act on one).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

from runstore.contract.auth_file import Principal
from runstore.contract.errors import (
    PermissionDeniedError,
    RunstoreError,
    UnauthenticatedError,
    ValidationError,
)
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.contract.namespaces import EVERY, NAME_RULE, is_valid_name
from runstore.server import call_principal, call_scope, concerns
from runstore.server.call_scope import ALL_NAMESPACES
from runstore.server.core.namespace_streams import NamespaceStreams
from runstore.server.core.namespaces import NamespaceDirectory
from runstore.server.interceptors.handlers import Context, Handler, Refused, Steps, admits_nothing
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


def resolved() -> str | None:
    """The namespace the call acts in, once decided (None before, when
    refused, or for a call on no one namespace): for labels, never for data."""
    return call_scope.named()


def requested_namespace(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
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

    admit = admits_nothing  # the header is read inside the call (``_resolve``)

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if method in ADMINISTRATION:
            return Steps(enter=_deciding(functools.partial(self._administrator, method)))
        if method not in NAMESPACED:
            return None
        enter = _deciding(functools.partial(self._resolve, method))
        if handler.response_streaming and self.streams is not None:
            return Steps(enter=enter, responses=self._until_deleted)
        return Steps(enter=enter)

    async def _until_deleted(
        self, state: None, responses: AsyncIterator[Any], context: Context
    ) -> AsyncIterator[Any]:
        """A stream's responses until its namespace is deleted; then the call
        ends with ``NAMESPACE_NOT_FOUND``."""
        namespace, streams = call_scope.named(), self.streams
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

    async def _administrator(self, method: str, context: Context) -> RunstoreError | None:
        bound = self._bindings(method)
        if isinstance(bound, RunstoreError):
            return bound
        if bound is not None and not bound.bound_to(EVERY):
            return PermissionDeniedError(
                f"principal {call_principal.current()!r} is not bound to every namespace "
                '("*"), which NamespaceAdmin needs',
                details={"method": method},
            )
        call_scope.enter_call(ALL_NAMESPACES)
        return None

    async def _resolve(self, method: str, context: Context) -> RunstoreError | None:
        try:
            requested = requested_namespace(context.invocation_metadata())
        except _Malformed as exc:
            return ValidationError(str(exc), field=NAMESPACE_KEY)
        bound = self._bindings(method)
        if isinstance(bound, RunstoreError):
            return bound
        decided = await concerns.decide_namespace(
            self._directory, requested, bound, method=method, unnamed=concerns.Unnamed.SOLE_BINDING
        )
        if isinstance(decided, RunstoreError):
            return decided
        return None


def _deciding(
    decide: functools.partial[Any],
) -> functools.partial[Any]:
    """The ``enter`` step of ``decide`` (``_resolve`` or ``_administrator``)."""
    return functools.partial(_entered, decide)


async def _entered(decide: functools.partial[Any], request: Any, context: Context) -> None:
    """``decide``'s refusal ends the call; else it named the call's scope
    (``call_scope``) for the rest of the call."""
    refusal: RunstoreError | None = await decide(context)
    if refusal is not None:
        raise Refused(refusal)
