"""The console's Starlette application: routes, security headers, sign-in, errors.

Every screen reads through the store core the gRPC servicers call, behind the
concerns a gRPC call passes (``ROUTES``, ``Screen``); ``OPEN_ROUTES`` (health,
sign-in, static files) pass none. Pages are rendered by one Jinja2
environment that escapes everything, and each response carries
``CONTENT_SECURITY_POLICY``, which allows only the console's own script and
style files: the pages have no inline script or style.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
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
    CallCancelledError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    QuotaExceededError,
    ReadArgumentError,
    RunstoreError,
    UnauthenticatedError,
)
from runstore.contract.namespaces import NAME_RULE, is_valid_name
from runstore.server import call_principal, call_request_id
from runstore.server.auth.principals import Principal
from runstore.server.concerns import Call, Door
from runstore.server.console import access, live, stores, views
from runstore.server.console.pages import Console, url
from runstore.server.core.quota_rules import READ, WATCH, Rule
from runstore.server.error_status import public_message

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


# --- The routes and what each passes ---------------------------------------------------

_RUNTIME: Final = "/runstore.v1.RuntimeStore/"
_SESSIONS: Final = "/runstore.v1.SessionAdmin/"

_PAGE: Final = Rule(READ)
_LIVE: Final = Rule(WATCH)

ROUTES: Final[Mapping[str, Door]] = {
    "sessions": Door((_SESSIONS + "ListSessions", _SESSIONS + "LoadSession"), _PAGE, may_lag=True),
    "session": Door(
        (
            _SESSIONS + "LoadSession",
            _SESSIONS + "ListRuns",
            _RUNTIME + "ListSessionRunRecords",
        ),
        _PAGE,
        may_lag=True,
    ),
    "session_events": Door(
        (_SESSIONS + "LoadSession", _RUNTIME + "WatchSessionRunRecords"), _LIVE, may_lag=False
    ),
    "runs": Door((_SESSIONS + "ListRuns",), _PAGE, may_lag=True),
    "run": Door(
        (
            _RUNTIME + "LoadRun",
            _RUNTIME + "ListRunRecords",
            _SESSIONS + "ListRuns",
            _RUNTIME + "LoadRunSeed",
            _RUNTIME + "ListRunSeedRecords",
        ),
        _PAGE,
        may_lag=True,
    ),
    "run_payload": Door((_RUNTIME + "ListRunRecords",), _PAGE, may_lag=True),
    "memory": Door(("/runstore.v1.MemoryStore/LoadRun",), _PAGE, may_lag=False),
    "context": Door(("/runstore.v1.ContextStore/GetContext",), _PAGE, may_lag=False),
    "run_events": Door((_RUNTIME + "LoadRun", _RUNTIME + "WatchRunRecords"), _LIVE, may_lag=False),
}
"""Every screen, by route name, and what it passes (``concerns.Door``): the
gRPC methods it reads through (declared ``console_reads``: their roles
admit a principal, ``access.may_view``), one ``reads_per_second`` token per
page or a ``watch_streams`` lease per live page, and whether its reads may go
to the standby of ``--read-database-url`` (a page is a look, not a worker's
read; a live stream may not: a wake-up for a commit the standby has not
replayed would find nothing). Its calls are ``console:<name>`` in the call
metrics and the access log (docs/observability.md)."""

OPEN_ROUTES: Final = frozenset({"healthz", "home", "login", "sign_in", "sign_out", "static"})
"""The routes that pass no concern: health, the sign-in form and its posts,
the redirect to ``/sessions``, the static files (they show no data)."""

QUOTA_HEADER: Final = "x-runstore-quota"
"""A 429's header naming the quota the page is at (``reads_per_second``, ...)."""


def _status(exc: RunstoreError) -> int:
    """The HTTP status of a page refused or failed with ``exc``."""
    for kind, status in (
        (UnauthenticatedError, 401),
        (PermissionDeniedError, 403),
        (QuotaExceededError, 429),
        (NotFoundError, 404),
        (InvalidArgumentError, 400),
        (PreconditionError, 410),
    ):
        if isinstance(exc, kind):
            return status
    return 503  # the database cannot say (UNAVAILABLE, ...), or the server is busy


def principal_of(console: Console, request: Request) -> Principal:
    """The request's principal: the bearer token when one is sent, else the
    sign-in cookie; refused when there is none or its role may not call every
    method the console reads through (``access.CONSOLE_METHODS``)."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthenticatedError("authorization must be 'Bearer <token>'")
        principal = console.access.by_token(token.strip())
        if principal is None:
            raise UnauthenticatedError("invalid bearer token")
    else:
        principal = console.access.by_sign_in(request.cookies.get(access.COOKIE, ""))
        if principal is None:
            raise UnauthenticatedError("sign in first")
    # Known from here, refused or not: a refusal page shows who is signed in.
    request.scope["runstore_principal"] = principal
    if console.access.required:
        call_principal.set_current(principal.name)  # for the access log and refusals
        if not access.may_view(principal):
            raise PermissionDeniedError(
                f"principal {principal.name!r} (role {principal.role}) may not read the console"
            )
    return principal


def _requested(request: Request) -> str | None:
    """The namespace the URL names (None: none)."""
    requested = request.query_params.get("namespace", "")
    if not requested:
        return None
    if not is_valid_name(requested):
        raise ReadArgumentError(f"namespace must match {NAME_RULE}", field="namespace")
    return requested


Handler = Callable[[Console, Request], Awaitable[Response]]


class Screen:
    """One route behind the concerns a gRPC call passes (``concerns.FrontDoor``):
    the principal and its roles, the namespace, the quota, the standby reads,
    then the handler; the call is counted and logged once its response has
    been sent, and a live page's ``watch_streams`` lease is held until then.

    A plain ASGI app, not a request-to-response function, so the call ends
    (and its lease goes) only when the response, a live stream included, is over.
    """

    def __init__(self, console: Console, name: str, handler: Handler) -> None:
        self.console = console
        self.name = name
        self.door = ROUTES[name]
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        front = self.console.door
        call = front.begin(
            f"console:{self.name}",
            self.door,
            peer=_peer(request),
            request_id=request.headers.get(call_request_id.METADATA_KEY),
        )
        scope["runstore_call"] = call
        left = False

        async def listening() -> Message:
            nonlocal left
            message = await receive()
            left = left or message["type"] == "http.disconnect"
            return message

        try:
            response = await self._respond(request, call)
            # As a gRPC call's trailing metadata does: the id its log lines carry.
            response.headers[call_request_id.METADATA_KEY] = call_request_id.current()
            await response(scope, listening, send)
            if left and call.error is None:
                # The browser went away before the response ended (a live page
                # closed): CANCELLED, as a gRPC stream its client cancels.
                call.error = CallCancelledError()
        except asyncio.CancelledError:
            call.end(CallCancelledError())
            raise
        except BaseException:
            call.end(RunstoreError())  # UNKNOWN, as grpc answers a behaviour that raised
            raise
        finally:
            call.end(call.error)

    async def _respond(self, request: Request, call: Call) -> Response:
        console, door = self.console, self.door
        try:
            principal = request.scope["runstore_principal"] = principal_of(console, request)
            requested = _requested(request)
            namespace = await console.door.admit(call, door, requested, principal)
            request.scope["runstore_namespace"] = namespace
            request.scope["runstore_namespaces"] = access.viewable_namespaces(
                principal,
                await console.active_namespaces(),
                open_console=not console.access.required,
            )
            with console.door.reads(door):
                return await self.handler(console, request)
        except RunstoreError as exc:
            call.error = exc
            await self._offer_namespaces(request)
            return self._refusal(request, exc)

    async def _offer_namespaces(self, request: Request) -> None:
        """A refused page keeps the picker: the namespaces its principal may
        view (none for a principal whose role may not read the console)."""
        principal = request.scope.get("runstore_principal")
        if principal is None or "runstore_namespaces" in request.scope:
            return
        console = self.console
        if console.access.required and not access.may_view(principal):
            return
        try:
            active = await console.active_namespaces()
        except RunstoreError:
            return  # the directory cannot say: no picker, the refusal still shows
        request.scope["runstore_namespaces"] = access.viewable_namespaces(
            principal, active, open_console=not console.access.required
        )

    def _refusal(self, request: Request, exc: RunstoreError) -> Response:
        console = self.console
        status = _status(exc)
        if status == 401:
            wants_page = "text/html" in request.headers.get("accept", "")
            if wants_page and "authorization" not in request.headers:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(url("/login", next=target), 303)
        # What a gRPC caller would read: a contract error's or a quota's own
        # text, only a generic one for the server's own trouble.
        text = public_message(exc)
        if status in (401, 403):
            return console.page(request, "refused.html", status, reason=text, title="Refused")
        response = console.page(request, "error.html", status, message=text, title="Error")
        if isinstance(exc, QuotaExceededError):
            # Whole seconds (RFC 9110), at least one: a watch_streams refusal
            # names no time, a stream may close at any moment.
            wait = exc.retry_delay if exc.retry_delay is not None else 1.0
            response.headers["retry-after"] = str(max(1, math.ceil(wait)))
            response.headers[QUOTA_HEADER] = exc.details.get("quota", "")
        return response


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
        Route("/login", form, methods=["GET"], name="login"),
        Route("/login", sign_in, methods=["POST"], name="sign_in"),
        Route("/logout", sign_out, methods=["POST"], name="sign_out"),
    ]


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else "?"


def _peer(request: Request) -> str | None:
    """The browser's address as gRPC spells a peer (``ipv4:HOST:PORT``)."""
    client = request.client
    if client is None:
        return None
    if ":" in client.host:
        return f"ipv6:[{client.host}]:{client.port}"
    return f"ipv4:{client.host}:{client.port}"


# --- The application ------------------------------------------------------------------


def create_app(console: Console) -> Starlette:
    async def health(request: Request) -> Response:
        return PlainTextResponse("ok", headers={"cache-control": "no-store"})

    async def home(request: Request) -> Response:
        return RedirectResponse("/sessions", 303)

    def screen(name: str, path: str, handler: Handler) -> Route:
        return Route(path, Screen(console, name, handler), methods=["GET"], name=name)

    routes = [
        Route("/healthz", health, name="healthz"),
        Route("/", home, name="home"),
        *login_endpoints(console),
        screen("sessions", "/sessions", views.sessions),
        screen("session", "/session", views.session),
        screen("session_events", "/session/events", live.session_events),
        screen("runs", "/runs", views.runs),
        screen("run", "/run", views.run),
        screen("run_events", "/run/events", live.run_events),
        screen("run_payload", "/run/payload", views.payload),
        screen("memory", "/memory", stores.memory),
        screen("context", "/context", stores.context),
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
