"""Authentication and roles: every call proves a principal whose role allows the method.

A bearer token, when the call carries one, decides the principal (it must be
valid, whatever certificate the connection has); without a token a client
certificate mapped to a principal decides (mTLS); otherwise the call is
unauthenticated. The role then must be allowed by ``auth.roles.METHOD_ROLES``.
Refusals are ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` with ErrorInfo
metadata ``method``, decided before the servicer runs, so they say nothing
about whether a session or run exists.

Where the decision needs no peer certificate, the refusal is made before the
request body is even parsed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import grpc

from runstore.contract.errors import PermissionDeniedError, RunstoreError, UnauthenticatedError
from runstore.server import principal as current_principal
from runstore.server.auth import roles
from runstore.server.auth.principals import ANONYMOUS, Principal, Principals, PrincipalsFile
from runstore.server.interceptors.parsing import parsed_request
from runstore.server.status import to_status

log = logging.getLogger(__name__)

_BEARER = "bearer "
_CERTIFICATE_PROPERTIES = ("peer_uri", "peer_dns", "x509_common_name")

Behavior = Callable[..., Any]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


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


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Enforces ``METHOD_ROLES``; with ``principals`` None only audits.

    Args:
        principals: The reloadable auth file; None when authentication is off.
        certificates: Whether connections carry verified client certificates (mTLS).
    """

    def __init__(self, principals: PrincipalsFile | None, *, certificates: bool = False) -> None:
        self._principals = principals
        self._certificates = certificates

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or method in roles.OPEN_METHODS:
            return handler
        if self._principals is None:
            if method in roles.AUDITED_METHODS:
                return _with_behavior(handler, _audited(method, _behavior(handler), ANONYMOUS))
            return handler
        principals = self._principals.current
        try:
            token = bearer_token(details.invocation_metadata)
        except _MalformedAuthorization as exc:
            return _refusing(handler, UnauthenticatedError(str(exc), details={"method": method}))
        if token is not None or not self._certificates:
            principal = principals.by_token(token) if token is not None else None
            if principal is not None:
                current_principal.set_current(principal.name)  # for the access log
            refusal = _refusal(method, principal, token is not None)
            if refusal is not None:
                if principal is not None and method in roles.AUDITED_METHODS:
                    _log_refused(method, principal)
                return _refusing(handler, refusal)
            assert principal is not None
            if method in roles.AUDITED_METHODS:
                return _with_behavior(handler, _audited(method, _behavior(handler), principal))
            return handler
        return _with_behavior(handler, self._checking(method, handler, principals))

    def _checking(self, method: str, handler: Handler, principals: Principals) -> Behavior:
        """The handler's behaviour behind a check of the peer's certificate."""
        inner = _behavior(handler)

        async def authorize(context: grpc.aio.ServicerContext[Any, Any]) -> Principal:
            principal = principals.by_certificate(certificate_identities(context))
            if principal is not None:
                current_principal.set_current(principal.name)
            refusal = _refusal(method, principal, token_sent=False)
            if refusal is not None:
                if principal is not None and method in roles.AUDITED_METHODS:
                    _log_refused(method, principal)
                await _abort(context, refusal)
            assert principal is not None
            return principal

        if handler.unary_stream is not None or handler.stream_stream is not None:

            async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
                await authorize(context)
                result = inner(request, context)
                if inspect.isasyncgen(result):
                    async for response in result:
                        yield response
                else:
                    await result

            return streaming

        async def unary(request: Any, context: Any) -> Any:
            principal = await authorize(context)
            if method in roles.AUDITED_METHODS:
                return await _audited(method, inner, principal)(request, context)
            return await inner(request, context)

        return unary


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


async def _abort(context: grpc.aio.ServicerContext[Any, Any], error: RunstoreError) -> None:
    status = to_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)


def _log_refused(method: str, principal: Principal) -> None:
    log.warning(
        "%s by principal %r (role %s): refused (PERMISSION_DENIED)",
        method.rsplit("/", 1)[-1],
        principal.name,
        principal.role,
    )


def _audited(method: str, inner: Behavior, principal: Principal) -> Behavior:
    """``inner`` logged with the principal's name and the outcome."""
    name = method.rsplit("/", 1)[-1]

    async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        outcome = "failed"
        try:
            response = await inner(request, context)
            outcome = "ok"
            return response
        finally:
            code = context.code() if outcome != "ok" else None
            log.info(
                "%s session_id=%r by principal %r (role %s): %s",
                name,
                getattr(parsed_request(request), "session_id", ""),
                principal.name,
                principal.role or "none, authentication off",
                outcome if code is None else f"{outcome} ({getattr(code, 'name', code)})",
            )

    return behavior


_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def _kind(handler: Handler) -> str:
    """Which of the four call shapes ``handler`` serves."""
    for kind in _KINDS:
        if getattr(handler, kind) is not None:
            return kind
    raise ValueError("handler without a behaviour")


def _behavior(handler: Handler) -> Behavior:
    behavior: Behavior = getattr(handler, _kind(handler))
    return behavior


def _with_behavior(handler: Handler, behavior: Behavior, *, parse: bool = True) -> Handler:
    """``handler`` running ``behavior`` instead; without ``parse`` the behaviour
    gets the raw request bytes."""
    changes: dict[str, Any] = {_kind(handler): behavior}
    if not parse:
        changes["request_deserializer"] = None
    replaced: Handler = handler._replace(**changes)  # type: ignore[attr-defined]
    return replaced


def _refusing(handler: Handler, error: RunstoreError) -> Handler:
    """A handler that refuses with ``error`` without parsing the request."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await _abort(context, error)

    return _with_behavior(handler, refuse, parse=False)
