"""What every console handler shares (``Console``) and how it renders a page:
one Jinja2 environment that escapes every value of every template."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from runstore.contract.namespaces import DEFAULT
from runstore.server import call_scope
from runstore.server.auth.tls import TLSFiles
from runstore.server.concerns import FrontDoor
from runstore.server.console import render
from runstore.server.console.access import Access
from runstore.server.console.reads import run_kind
from runstore.server.core.context import ContextStore
from runstore.server.core.memory import MemoryStore
from runstore.server.core.store import RuntimeStore
from runstore.server.core.watch import RecordWatch


@dataclass
class Console:
    """What the console's handlers share."""

    store: RuntimeStore
    watch: RecordWatch
    access: Access
    door: FrontDoor
    """The concerns every call passes (``runstore.server.concerns``): the
    namespace, the quotas, the call metrics and the access log, shared with the
    gRPC chain."""
    secure: bool
    """Served over TLS: the sign-in cookie is Secure."""
    tls_files: TLSFiles | None = None
    """The certificate and key it serves (re-read on SIGHUP)."""
    allowed_hosts: Sequence[str] | None = None
    """Host headers served (None: any). An open console on loopback serves only
    loopback names: a page of another site whose name was rebound to 127.0.0.1
    (DNS rebinding) gets 400, not the data."""
    templates: jinja2.Environment = field(default_factory=lambda: _environment())
    memory: MemoryStore | None = None
    """The memory store (§12), shown by the Memory screen; None: not shown."""
    context: ContextStore | None = None
    """The context store, shown by the Context screen; None: not shown."""
    shutdown: anyio.Event | None = None
    """Set when the server stops: live streams end (created in the serving loop)."""

    async def active_namespaces(self) -> frozenset[str]:
        """The active namespaces, read again once the directory's copy is stale."""
        directory = self.door.directory
        if directory is None:
            return frozenset({DEFAULT})
        if directory.stale():
            await directory.refresh()
        return directory.active()

    def page(
        self, request: Request, name: str, http_status: int = 200, **context: Any
    ) -> HTMLResponse:
        html = self.templates.get_template(name).render(
            principal=request.scope.get("runstore_principal"),
            auth_required=self.access.required,
            # Set once the request's namespace is decided (``app.Screen``).
            namespace=request.scope.get("runstore_namespace"),
            namespaces=request.scope.get("runstore_namespaces", []),
            **context,
        )
        return HTMLResponse(html, http_status, headers={"cache-control": "no-store"})


def _environment() -> jinja2.Environment:
    """One environment that escapes every value of every template (not by file name)."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("runstore.server.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.globals.update(
        timestamp=render.timestamp,
        iso=render.iso,
        duration=render.duration,
        kind=run_kind,
        url=url,
    )
    return environment


def url(path: str, **params: Any) -> str:
    """``path`` with the non-empty ``params`` as its query string (values
    escaped), in the namespace the page shows: a link never leaves it."""
    namespace = call_scope.named()  # None on a page outside any (sign-in, refusals)
    if namespace not in (None, DEFAULT) and "namespace" not in params:
        params["namespace"] = namespace
    kept = {key: value for key, value in params.items() if value not in ("", None, 0, False, [])}
    return f"{path}?{urlencode(kept, doseq=True)}" if kept else path
