"""The concerns every call passes, whichever front door it comes in by.

runstore has two front doors: the gRPC interceptor chain (``interceptors``)
and the web console (``console``). Both ask this module, so a rule has one
home and the doors stay equal (docs/console.md, "One front door"):

* the namespace a call acts in (``decide_namespace``): a principal not bound to
  it (``Principal.bound_to``) is refused before anything says whether it
  exists; when none is named the door's ``Unnamed`` rule picks one;
* the call's record (``record_call``): the call metrics and the access-log line;
* the quotas (``core.quotas.Quotas``: a unary call takes a rate token, a stream
  holds a ``watch_streams`` lease), the end of a deleted namespace's streams
  (``core.namespace_streams``), the watcher limit (``RecordWatch.refusal``)
  and the standby reads (``call_scope.lagging_reads``), called through ``FrontDoor`` by the
  console and by their slots of the chain by gRPC.

``FrontDoor`` bundles them for a door that is not a grpc interceptor (the
console): one object per server, sharing the chain's ``Quotas``, ``Metrics``
and namespace directory.
"""

from __future__ import annotations

import enum
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Final

import grpc

from runstore.contract.auth_file import Principal
from runstore.contract.errors import (
    NamespaceRequiredError,
    PermissionDeniedError,
    RunstoreError,
)
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.contract.namespaces import DEFAULT, EVERY
from runstore.server import call_principal, call_request_id, call_scope
from runstore.server.core.namespace_streams import NamespaceStreams
from runstore.server.core.namespaces import NamespaceDirectory, namespace_not_found
from runstore.server.core.quota_rules import WATCH, Rule
from runstore.server.core.quotas import Quotas, StreamLease
from runstore.server.core.watch import RecordWatch
from runstore.server.logs import ACCESS_LOGGER
from runstore.server.metrics import GO_CODE_NAMES, MethodFigures, Metrics
from runstore.server.stream_ending import EndableStream

access_log = logging.getLogger(ACCESS_LOGGER)

_OK: Final = grpc.StatusCode.OK


# --- The namespace ---------------------------------------------------------------------


class Unnamed(enum.Enum):
    """What a door does with a call that names no namespace (docs/namespaces.md)."""

    SOLE_BINDING = "sole binding"
    """gRPC: a principal bound to exactly one namespace acts there; any other
    is refused (``NAMESPACE_REQUIRED``): a program must say where it writes."""
    HOME = "home"
    """The console: ``default`` when the principal may view it, else the first
    active namespace it is bound to, else its first binding: a person opening
    ``/sessions`` sees something rather than an error."""


def _unnamed(
    principal: Principal | None, rule: Unnamed, active: frozenset[str]
) -> str | RunstoreError:
    if principal is None:  # authentication off
        return DEFAULT
    bound = principal.namespaces
    if rule is Unnamed.SOLE_BINDING:
        if len(bound) == 1 and bound[0] != EVERY:
            return bound[0]
        return NamespaceRequiredError(
            f"principal {call_principal.current()!r} is bound to several namespaces: "
            f"send {NAMESPACE_KEY}",
            details={"metadata": NAMESPACE_KEY},
        )
    if principal.bound_to(DEFAULT):
        return DEFAULT
    for name in sorted(active):
        if name in bound:  # by name: "*" was bound to default above
            return name
    first = bound[0] if bound else DEFAULT
    return DEFAULT if first == EVERY else first


async def decide_namespace(
    directory: NamespaceDirectory | None,
    requested: str | None,
    principal: Principal | None,
    *,
    method: str,
    unnamed: Unnamed,
) -> str | RunstoreError:
    """The namespace a call of ``method`` acts in, or its refusal; set for the
    rest of the call (``call_scope``) when admitted.

    ``requested`` is the name the call sends (None: none), ``principal``
    the caller (None: authentication is off, every namespace is open).
    Refused in this order: not bound (PERMISSION_DENIED, before anything says
    whether the namespace exists), then not active (NOT_FOUND).
    Without a ``directory`` only ``default`` exists.
    """
    if requested is None:
        active = frozenset({DEFAULT})
        if directory is not None and unnamed is Unnamed.HOME and principal is not None:
            try:
                if directory.stale():
                    await directory.refresh()
            except RunstoreError as exc:
                return exc
            active = directory.active()
        chosen = _unnamed(principal, unnamed, active)
        if isinstance(chosen, RunstoreError):
            return chosen
        requested = chosen
    if principal is not None and not principal.bound_to(requested):
        return PermissionDeniedError(
            f"principal {call_principal.current()!r} is not bound to namespace {requested!r}",
            details={"method": method, "namespace": requested},
        )
    try:
        known = requested == DEFAULT if directory is None else await directory.is_active(requested)
    except RunstoreError as exc:  # the database cannot say (UNAVAILABLE, ...)
        return exc
    if not known:
        return namespace_not_found(requested)
    call_scope.enter_call(requested)
    return requested


# --- The call's record: metrics and the access log ---------------------------------------


def record_call(
    method: str,
    figures: MethodFigures | None,
    seconds: float,
    code: grpc.StatusCode,
    reason: str,
    namespace: str | None,
    peer: str | None,
    *,
    log_access: bool,
) -> None:
    """One finished call in the call metrics (``figures``, when metrics are
    on) and the access log (when ``log_access``), whichever door it came by
    (docs/observability.md). ``namespace`` is None until one was decided."""
    if figures is not None:
        # Refused before a namespace was decided, or of a service acting in none: "".
        in_namespace = namespace or ""
        figures.handled(code).inc()
        figures.calls(code, in_namespace).inc()
        figures.handling.observe(seconds)
        if code is not _OK:
            figures.errors_in(in_namespace, reason or "NONE").inc()
    if log_access and access_log.isEnabledFor(logging.INFO):
        go_code = GO_CODE_NAMES.get(code, "Unknown")
        fields = {
            "method": method,
            "code": go_code,
            "reason": reason or None,
            "duration_ms": round(seconds * 1000, 3),
            "principal": call_principal.current() or None,
            "namespace": namespace,
            "peer": peer,
            "request_id": call_request_id.current() or None,
        }
        # Logger.info without its search of the stack for the caller's
        # file and line, which no access-log format shows.
        access_log.handle(
            access_log.makeRecord(
                ACCESS_LOGGER,
                logging.INFO,
                __file__,
                0,
                "%s %s",
                (method, go_code),
                None,
                extra={"access": fields},
            )
        )


def status_code(error: RunstoreError | None) -> grpc.StatusCode:
    """The gRPC code a call refused with ``error`` ends with (OK for None)."""
    return _OK if error is None else grpc.StatusCode[error.code]


# --- A door that is not a grpc interceptor ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Door:
    """The properties of one entry of a door (a console route), declared once
    beside its routes: the gRPC methods whose roles it needs (``reads``), what
    it counts against (``quota``: a rate token for a page, a ``watch_streams``
    lease for a stream), and whether its reads may go to the standby."""

    reads: tuple[str, ...]
    quota: Rule
    may_lag: bool

    @property
    def streams(self) -> bool:
        """A live stream: it holds a ``watch_streams`` lease while open."""
        return self.quota.kind == WATCH


@dataclass(slots=True)
class Call:
    """One call through ``FrontDoor``: started by ``FrontDoor.begin``, finished
    once by ``end`` (the metrics, the access log, the lease released)."""

    door: FrontDoor
    method: str
    figures: MethodFigures | None
    peer: str | None
    streamed: bool
    started: float = field(default_factory=time.perf_counter)
    namespace: str | None = None
    lease: StreamLease | None = None
    stream: EndableStream | None = None
    """A live stream's handle, ended when its namespace is deleted."""
    error: RunstoreError | None = None
    """What refused or ended the call, once known (a live page's failure event)."""
    ended: bool = False

    def sent(self) -> None:
        """One message of a streamed response went out (a live page's event)."""
        if self.figures is not None:
            self.figures.sent.inc()

    def end(self, error: RunstoreError | None) -> None:
        """Counts and logs the call with ``error``'s code (OK for None), once."""
        if self.ended:
            return
        self.ended = True
        if self.lease is not None:
            self.lease.close()
        streams = self.door.streams
        if self.stream is not None and streams is not None and self.namespace is not None:
            streams.close(self.namespace, self.stream)
        in_flight = self.door.metrics.calls_in_flight if self.door.metrics is not None else None
        if in_flight is not None and self.namespace is not None:
            in_flight[self.namespace] = in_flight.get(self.namespace, 1) - 1
        code = status_code(error)
        if self.figures is not None and code is _OK and not self.streamed:
            self.figures.sent.inc()  # a page: one response (a stream counts each, ``sent``)
        record_call(
            self.method,
            self.figures,
            time.perf_counter() - self.started,
            code,
            error.reason if error is not None else "",
            self.namespace,
            self.peer,
            log_access=self.door.access_log,
        )


class FrontDoor:
    """The shared concerns, for a door that is not a grpc interceptor.

    Args:
        directory: The active namespaces; None serves ``default`` only.
        authenticated: Whether principals carry namespace bindings.
        quotas: The server's quota state, shared with the gRPC chain (None: off).
        metrics: The server's metrics (None: off).
        streams: The streams open per namespace, ended when it is deleted
            (None: only ``default`` exists, which is never deleted).
        access_log: Whether each call is logged (``--access-log``).
        watch: The server's watchers, for the watcher limit.
    """

    def __init__(
        self,
        *,
        directory: NamespaceDirectory | None,
        authenticated: bool,
        quotas: Quotas | None,
        metrics: Metrics | None,
        access_log: bool,
        watch: RecordWatch,
        streams: NamespaceStreams | None = None,
    ) -> None:
        self.directory = directory
        self.streams = streams
        self.authenticated = authenticated
        self.quotas = quotas
        self.metrics = metrics
        self.access_log = access_log
        self.watch = watch

    def begin(self, method: str, door: Door, *, peer: str | None, request_id: str | None) -> Call:
        """A call of ``method`` (``door:entry``, e.g. ``console:run``) starts:
        its request id (the caller's, when one the server takes, else a new
        one), and its started count."""
        call_request_id.set_current(
            call_request_id.from_metadata(
                [(call_request_id.METADATA_KEY, request_id)] if request_id else ()
            )
        )
        call_principal.set_current("")
        figures = None
        if self.metrics is not None:
            # ``console:run`` is method ``run`` of service ``console`` in the
            # call metrics' labels (docs/observability.md).
            service, _, name = method.partition(":")
            figures = self.metrics.method(
                f"/{service}/{name}", "server_stream" if door.streams else "unary"
            )
            figures.started.inc()
            figures.received.inc()
        return Call(self, method, figures, peer, door.streams)

    async def admit(
        self, call: Call, door: Door, requested: str | None, principal: Principal
    ) -> str:
        """The call's namespace, and its place in the namespace's quotas (a
        stream's also among the namespace's open streams); raises the refusal
        (the call is not yet ended)."""
        namespace = await decide_namespace(
            self.directory,
            requested,
            principal if self.authenticated else None,
            method=call.method,
            unnamed=Unnamed.HOME,
        )
        if isinstance(namespace, RunstoreError):
            raise namespace
        call.namespace = namespace
        if self.metrics is not None:
            self.metrics.calls_in_flight[namespace] += 1
        if door.streams and self.streams is not None:
            call.stream = self.streams.open(namespace)
        if self.quotas is None:
            return namespace
        if door.streams:
            lease = self.quotas.open_stream(namespace)
            if isinstance(lease, RunstoreError):
                raise lease
            call.lease = lease
        else:
            refusal = self.quotas.admit(door.quota, namespace, 0)
            if refusal is not None:
                raise refusal
        return namespace

    @staticmethod
    def reads(door: Door) -> AbstractContextManager[None]:
        """The block the call's reads run in: the standby's, when it may lag."""
        return call_scope.lagging_reads() if door.may_lag else nullcontext()

    def watcher_refusal(self) -> RunstoreError | None:
        """The server's watcher limit (``--max-watchers``), shared with Watch."""
        return self.watch.refusal()
