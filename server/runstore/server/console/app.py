"""The console's Starlette application: routes, security headers, sign-in, errors.

Every screen reads through the store core the gRPC servicers call and needs a
principal that ``access.may_view`` admits; ``/healthz`` and ``/static`` are
open. Pages are rendered by one Jinja2 environment that escapes everything,
and each response carries ``CONTENT_SECURITY_POLICY``, which allows only the
console's own script and style files: the pages have no inline script or style.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import parse_qs, urlsplit

from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstore.contract.errors import (
    InvalidArgumentError,
    NotFoundError,
    PreconditionError,
    ReadArgumentError,
    RunstoreError,
)
from runstore.contract.namespaces import DEFAULT, NAME_RULE, is_valid_name
from runstore.server import call_namespace
from runstore.server.auth.principals import Principal
from runstore.server.console import access, live, views
from runstore.server.console.pages import Console, url
from runstore.server.core.namespaces import namespace_not_found
from runstore.server.db.lagging import lagging_reads

log = logging.getLogger(__name__)

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Only the console's own files: no inline script or style, no other origin, no framing."""

SECURITY_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)

MAX_FORM_BYTES: Final = 8192
"""The sign-in form is one token: a larger body is refused unread."""


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every response (pure ASGI: streams pass untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


# --- Who is asking --------------------------------------------------------------------


class Refused(Exception):
    """No principal, or one the console does not admit."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def principal_of(console: Console, request: Request) -> Principal:
    """The request's principal: the bearer token when one is sent, else the
    sign-in cookie; ``Refused`` when there is none or it may not view."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "authorization must be 'Bearer <token>'")
        principal = console.access.by_token(token.strip())
        if principal is None:
            raise Refused(401, "invalid bearer token")
    else:
        principal = console.access.by_sign_in(request.cookies.get(access.COOKIE, ""))
        if principal is None:
            raise Refused(401, "sign in first")
    if console.access.required and not access.may_view(principal):
        raise Refused(
            403,
            f"principal {principal.name!r} (role {principal.role}) may not read the console",
        )
    return principal


async def namespace_of(
    console: Console, request: Request, principal: Principal
) -> tuple[str, list[str]]:
    """The namespace the request's screen shows (``access``) and those its
    picker offers: refused when the principal is not bound to it, then when it
    is not an active namespace."""
    active = await console.active_namespaces()
    offered = access.viewable_namespaces(
        principal, active, open_console=not console.access.required
    )
    requested = request.query_params.get("namespace", "")
    if not requested:
        requested = access.home_namespace(principal, active) if console.access.required else DEFAULT
    elif not is_valid_name(requested):
        raise ReadArgumentError(f"namespace must match {NAME_RULE}", field="namespace")
    if console.access.required and not principal.bound_to(requested):
        raise Refused(403, f"principal {principal.name!r} is not bound to namespace {requested!r}")
    if requested not in active:
        raise namespace_not_found(requested)
    return requested, offered


Handler = Callable[[Console, Request], Awaitable[Response]]


def screen(
    console: Console, handler: Handler, *, may_lag: bool = True
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the access check and the store's errors as pages.

    A page's reads ``may_lag``: with ``--read-database-url`` the standby serves
    them (a page is a look, not a worker's read). The live streams do not: a
    wake-up for a commit the standby has not replayed would find nothing.
    """

    async def endpoint(request: Request) -> Response:
        try:
            principal = request.scope["runstore_principal"] = principal_of(console, request)
            namespace, offered = await namespace_of(console, request, principal)
        except Refused as refused:
            wants_page = "text/html" in request.headers.get("accept", "")
            if refused.status == 401 and wants_page and "authorization" not in request.headers:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(url("/login", next=target), 303)
            return console.page(
                request, "refused.html", refused.status, reason=refused.reason, title="Refused"
            )
        except NotFoundError as exc:
            return _error(console, request, 404, exc)
        except InvalidArgumentError as exc:
            return _error(console, request, 400, exc)
        except RunstoreError as exc:  # the database cannot say (UNAVAILABLE, ...)
            return _error(console, request, 503, exc)
        # Every read of this request (and of its live stream's task) is keyed by it.
        call_namespace.set_current(namespace)
        request.scope["runstore_namespace"] = namespace
        request.scope["runstore_namespaces"] = offered
        try:
            if not may_lag:
                return await handler(console, request)
            with lagging_reads():
                return await handler(console, request)
        except NotFoundError as exc:
            return _error(console, request, 404, exc)
        except InvalidArgumentError as exc:
            return _error(console, request, 400, exc)
        except PreconditionError as exc:
            return _error(console, request, 410, exc)
        except RunstoreError as exc:
            return _error(console, request, 503, exc)

    return endpoint


def _error(console: Console, request: Request, status: int, exc: RunstoreError) -> Response:
    return console.page(request, "error.html", status, message=str(exc), title="Error")


# --- Sign-in --------------------------------------------------------------------------


def _same_origin(request: Request) -> bool:
    """CSRF: a POST must come from a page of this console (Origin, else Referer,
    names this host); the SameSite=Strict cookie is the other half."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return False
    parts = urlsplit(source)
    return parts.scheme == request.url.scheme and parts.netloc == request.url.netloc


def _safe_next(target: str) -> str:
    """Only a path of this console: never another site (open redirect)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/sessions"
    return target


async def _form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[0] for key, values in fields.items()}


def login_endpoints(console: Console) -> list[Route]:
    async def form(request: Request) -> Response:
        return console.page(
            request,
            "login.html",
            next=_safe_next(request.query_params.get("next", "/sessions")),
            error="",
            title="Sign in",
        )

    async def sign_in(request: Request) -> Response:
        if not _same_origin(request):
            return PlainTextResponse("cross-origin sign-in refused", 403)
        fields = await _form(request)
        target = _safe_next(fields.get("next", "/sessions"))
        signed = console.access.sign_in(fields.get("token", "").strip())
        if signed is None:
            log.warning("console sign-in refused: invalid token from %s", _client(request))
            return console.page(
                request, "login.html", 401, next=target, error="invalid token", title="Sign in"
            )
        sign_in_id, principal = signed
        log.info("console sign-in: principal %r from %s", principal.name, _client(request))
        response = RedirectResponse(target, 303)
        response.set_cookie(
            access.COOKIE,
            sign_in_id,
            max_age=access.SIGN_IN_SECONDS,
            path="/",
            secure=console.secure,
            httponly=True,
            samesite="strict",
        )
        return response

    async def sign_out(request: Request) -> Response:
        if not _same_origin(request):
            return PlainTextResponse("cross-origin sign-out refused", 403)
        console.access.sign_out(request.cookies.get(access.COOKIE, ""))
        response = RedirectResponse("/login", 303)
        response.delete_cookie(
            access.COOKIE, path="/", secure=console.secure, httponly=True, samesite="strict"
        )
        return response

    return [
        Route("/login", form, methods=["GET"]),
        Route("/login", sign_in, methods=["POST"]),
        Route("/logout", sign_out, methods=["POST"]),
    ]


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else "?"


# --- The application ------------------------------------------------------------------


def create_app(console: Console) -> Starlette:
    async def health(request: Request) -> Response:
        return PlainTextResponse("ok", headers={"cache-control": "no-store"})

    async def home(request: Request) -> Response:
        return RedirectResponse("/sessions", 303)

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return screen(console, handler)

    routes = [
        Route("/healthz", health),
        Route("/", home),
        *login_endpoints(console),
        Route("/sessions", guarded(views.sessions)),
        Route("/session", guarded(views.session)),
        Route("/session/events", screen(console, live.session_events, may_lag=False)),
        Route("/runs", guarded(views.runs)),
        Route("/run", guarded(views.run)),
        Route("/run/events", screen(console, live.run_events, may_lag=False)),
        Mount(
            "/static",
            StaticFiles(packages=[("runstore.server.console", "static")]),
            name="static",
        ),
    ]
    app = Starlette(routes=routes)
    if console.allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=console.allowed_hosts)
    app.add_middleware(SecurityHeaders)  # outermost: refusals carry the headers too
    return app
