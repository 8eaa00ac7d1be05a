"""Authentication and roles: every call proves a principal whose role allows the method.

A bearer token, when the call carries one, decides the principal (it must be
valid, whatever certificate the connection has); without a token a client
certificate mapped to a principal decides (mTLS); otherwise the call is
unauthenticated. The role then must be allowed by ``auth.roles.METHOD_ROLES``.
Refusals are ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` with ErrorInfo
metadata ``method``, decided before the servicer runs, so they say nothing
about whether a session or run exists.

A refusal is made before the request body is even parsed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeAlias

import grpc

from runstore.contract.errors import PermissionDeniedError, RunstoreError, UnauthenticatedError
from runstore.server import call_principal
from runstore.server.auth import roles
from runstore.server.auth.principals import ANONYMOUS, Principal, Principals, PrincipalsFile
from runstore.server.interceptors.handlers import Context, Handler, Refused, Steps
from runstore.server.interceptors.namespaces import resolved as resolved_namespace
from runstore.server.interceptors.parsing import parsed_request
from runstore.server.stream_ending import EndableStream, until_ended

log = logging.getLogger(__name__)

_BEARER = "bearer "
_CERTIFICATE_PROPERTIES = ("peer_uri", "peer_dns", "x509_common_name")


class _MalformedAuthorization(Exception):
    pass


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The token of ``authorization: Bearer <token>``, None when there is none."""
    values = [value for key, value in metadata or () if key == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise _MalformedAuthorization("more than one authorization header")
    value = values[0] if isinstance(values[0], str) else values[0].decode("latin-1")
    if not value[: len(_BEARER)].lower() == _BEARER or not value[len(_BEARER) :].strip():
        raise _MalformedAuthorization("authorization must be 'Bearer <token>'")
    return value[len(_BEARER) :].strip()


def certificate_identities(context: grpc.aio.ServicerContext[Any, Any]) -> list[str]:
    """The peer certificate's SAN URIs, SAN DNS names and subject CN, in that order."""
    properties = context.auth_context()
    return [
        value.decode("utf-8", "replace")
        for name in _CERTIFICATE_PROPERTIES
        for value in properties.get(name, ())
    ]


class _ByCertificate:
    """The decision of a call without a token under mTLS: its peer certificate
    decides, read inside the call (``auth_context``)."""

    __slots__ = ("principals",)

    def __init__(self, principals: Principals) -> None:
        self.principals = principals


_Decision: TypeAlias = "Principal | RunstoreError | _ByCertificate | None"

_DECISION: ContextVar[_Decision] = ContextVar("runstore_auth_decision", default=None)
"""What ``admit`` decided for the call; None (never admitted) refuses."""


class Authentication:
    """Enforces ``METHOD_ROLES``; with ``principals`` None only audits.

    The decision is made from the call's metadata before anything runs
    (``admit``); the wrapper then refuses, before the request is parsed, or runs
    the method.

    Args:
        principals: The reloadable auth file; None when authentication is off.
        certificates: Whether connections carry verified client certificates (mTLS).
    """

    def __init__(self, principals: PrincipalsFile | None, *, certificates: bool = False) -> None:
        self._principals = principals
        self._certificates = certificates

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        method: str = details.method
        if self._principals is None or method in roles.OPEN_METHODS:
            return
        principals = self._principals.current  # the set this call started with
        try:
            token = bearer_token(details.invocation_metadata)
        except _MalformedAuthorization as exc:
            _DECISION.set(UnauthenticatedError(str(exc), details={"method": method}))
            return
        if token is None and self._certificates:
            _DECISION.set(_ByCertificate(principals))
            return
        principal = principals.by_token(token) if token is not None else None
        if principal is not None:
            call_principal.set_current(principal.name)  # for the access log
        refusal = _refusal(method, principal, token is not None)
        if refusal is not None:
            if principal is not None and method in roles.AUDITED_METHODS:
                _log_refused(method, principal)
            _DECISION.set(refusal)
            return
        assert principal is not None
        call_principal.set_admitted(principal)
        _DECISION.set(principal)

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if method in roles.OPEN_METHODS:
            return None
        audited = method in roles.AUDITED_METHODS
        name = method.rsplit("/", 1)[-1]
        if self._principals is None:
            if not audited:
                return None
            return Steps(
                enter=lambda request, context: (ANONYMOUS, request),
                after=lambda state, response, context: _log_audited(name, state, None, response),
                fail=lambda state, exc, context: _log_audited(name, state, context, None),
            )

        def decided(request: Any, context: Context) -> Principal:
            decision = _DECISION.get()
            if isinstance(decision, Principal):
                return decision
            return _settle(method, decision, context)

        if handler.response_streaming and inspect.isasyncgenfunction(
            handler.unary_stream or handler.stream_stream
        ):
            principals_file = self._principals
            certificates = self._certificates

            def standing(
                principal: Principal, responses: AsyncIterator[Any], context: Context
            ) -> AsyncIterator[Any]:
                return _standing(
                    method, principal, responses, context, principals_file, certificates
                )

            return Steps(enter=decided, responses=standing)
        if not audited:
            return Steps(enter=decided)

        def entered(request: Any, context: Context) -> tuple[Principal, Any]:
            return decided(request, context), request

        return Steps(
            enter=entered,
            after=lambda state, response, context: _log_audited(name, state, None, response),
            fail=lambda state, exc, context: _log_audited(name, state, context, None),
        )


async def _standing(
    method: str,
    principal: Principal,
    responses: AsyncIterator[Any],
    context: Context,
    principals_file: PrincipalsFile,
    certificates: bool,
) -> AsyncIterator[Any]:
    """``responses`` while the auth file, reloaded, still admits the stream."""
    standing = _Standing(
        method,
        principal,
        context,
        certificates=certificates,
        current=lambda: principals_file.current,
    )
    principals_file.listen(standing.reloaded)
    # A reload between this call's admission and ``listen`` told no
    # one: judge the stream once against the set installed now.
    standing.judge(principals_file.current)
    try:
        async for response in until_ended(standing, responses, context):
            yield response
    finally:
        principals_file.unlisten(standing.reloaded)


class _Standing(EndableStream):
    """An open stream's standing with the auth file. A stream outlives the
    principals it started with, so every reload judges it again exactly as a
    new call with the same token or certificate would be judged; once that
    call would be refused, the stream ends with the same refusal."""

    __slots__ = (
        "_certificates",
        "_current",
        "_loop",
        "_method",
        "_namespace",
        "_principal",
        "_token",
    )

    def __init__(
        self,
        method: str,
        principal: Principal,
        context: Context,
        *,
        certificates: bool,
        current: Callable[[], Principals],
    ) -> None:
        super().__init__()
        self._method = method
        self._current = current
        self._principal = principal
        metadata = context.invocation_metadata()
        self._token = bearer_token(tuple(metadata) if metadata is not None else None)
        self._certificates = (
            certificate_identities(context) if self._token is None and certificates else []
        )
        self._loop = asyncio.get_running_loop()
        self._namespace: str | None = None
        """The namespace the stream acts in, once decided (inside the stream)."""

    def reloaded(self, principals: Principals) -> None:
        """A reload installed ``principals`` (called in the reloading thread)."""
        self._loop.call_soon_threadsafe(self.judge, principals)

    def judge(self, principals: Principals) -> None:
        """Sets ``refusal`` (and wakes the stream) once ``principals`` refuse it."""
        if self.refusal is not None:
            return
        if self._token is not None:
            principal = principals.by_token(self._token)
        else:
            principal = principals.by_certificate(self._certificates)
        refusal = _refusal(self._method, principal, token_sent=self._token is not None)
        if refusal is None:
            assert principal is not None
            refusal = self._unbound(principal)
        if refusal is None:
            return
        log.warning(
            "%s by principal %r: stream ended, the reloaded auth file refuses it (%s)",
            self._method.rsplit("/", 1)[-1],
            self._principal.name,
            refusal.code,
        )
        self.end(refusal)

    def _unbound(self, principal: Principal) -> RunstoreError | None:
        """A refusal once the principal is no longer bound to the stream's
        namespace (docs/namespaces.md): as a new call into it would be refused."""
        namespace = self._namespace
        if namespace is None or principal.bound_to(namespace):
            return None
        return PermissionDeniedError(
            f"principal {principal.name!r} is not bound to namespace {namespace!r}",
            details={"method": self._method, "namespace": namespace},
        )

    def _learn_namespace(self) -> None:
        """The namespace concern decides it inside the stream, in this task: once
        it has, the stream is judged against the principals installed now (a
        reload before this moment could not check the namespace)."""
        self._namespace = resolved_namespace()
        if self._namespace is not None:
            self.judge(self._current())

    async def next_of(self, responses: AsyncIterator[Any]) -> Any:
        try:
            return await super().next_of(responses)
        finally:
            if self._namespace is None:
                self._learn_namespace()


def _settle(method: str, decision: _Decision, context: Context) -> Principal:
    """The principal of a call whose certificate decides; refuses any other call."""
    if isinstance(decision, _ByCertificate):
        principal = decision.principals.by_certificate(certificate_identities(context))
        if principal is not None:
            call_principal.set_current(principal.name)
        refusal = _refusal(method, principal, token_sent=False)
        if refusal is None:
            assert principal is not None
            call_principal.set_admitted(principal)
            return principal
        if principal is not None and method in roles.AUDITED_METHODS:
            _log_refused(method, principal)
        decision = refusal
    if not isinstance(decision, RunstoreError):
        decision = UnauthenticatedError("authentication required", details={"method": method})
    raise Refused(decision)


def _refusal(method: str, principal: Principal | None, token_sent: bool) -> RunstoreError | None:
    if principal is None:
        message = "invalid bearer token" if token_sent else "authentication required"
        return UnauthenticatedError(message, details={"method": method})
    if not roles.allowed(method, principal.role):
        return PermissionDeniedError(
            f"principal {principal.name!r} (role {principal.role}) may not call {method}",
            details={"method": method},
        )
    return None


def _log_refused(method: str, principal: Principal) -> None:
    log.warning(
        "%s by principal %r (role %s): refused (PERMISSION_DENIED)",
        method.rsplit("/", 1)[-1],
        principal.name,
        principal.role,
    )


def _log_audited(
    name: str, state: tuple[Principal, Any], failed: Context | None, response: Any
) -> Any:
    """An audited call's line: the principal's name and the outcome (with the
    code when ``failed``, the call's context); returns ``response``."""
    principal, request = state
    outcome = "failed" if failed is not None else "ok"
    code = failed.code() if failed is not None else None
    log.info(
        "%s %s by principal %r (role %s): %s",
        name,
        _subject(parsed_request(request)),
        principal.name,
        principal.role or "none, authentication off",
        outcome if code is None else f"{outcome} ({getattr(code, 'name', code)})",
    )
    return response


def _subject(request: Any) -> str:
    """What an audited call is about: its session, or the namespace it manages."""
    if hasattr(request, "session_id"):
        return f"session_id={request.session_id!r}"
    namespace = getattr(request, "namespace", None)
    name = getattr(request, "name", None) or getattr(namespace, "name", "")
    return f"namespace={name!r}"
