"""The server's interceptor chain: every cross-cutting concern, in one order.

Each concern (request ids, access logs and metrics, the server's version,
authentication and roles, the call's namespace and its quotas, the calls in
flight, limits, request parsing, the database bound, reads on the standby)
lives in its own module of this package and is added here, so servicers stay
thin and never see them. The list runs outermost first: a concern that must see
every call, including ones refused later, sits earlier. The concerns make one
grpc interceptor (``handlers.Chain``), which runs every concern's steps
(``handlers.Steps``, the protocol in docs/development.md "The interceptor
chain") around each method's behaviour, composed once per method and reused;
OpenTelemetry's own interceptor, when tracing, sits just outside it, so every
concern runs inside the call's span.
"""

from __future__ import annotations

from typing import Any

import grpc

from runstore.server import tracing
from runstore.server.auth import Security
from runstore.server.config import ServerConfig
from runstore.server.core.namespaces import NamespaceDirectory
from runstore.server.core.quotas import Quotas
from runstore.server.interceptors.auth import Authentication
from runstore.server.interceptors.calls import CallObserver, CallsInFlight
from runstore.server.interceptors.db_bound import DatabaseBound
from runstore.server.interceptors.handlers import Chain, Concern
from runstore.server.interceptors.limits import Limits
from runstore.server.interceptors.namespaces import NamespaceResolution
from runstore.server.interceptors.parsing import RequestParsing
from runstore.server.interceptors.quotas import QuotaEnforcement
from runstore.server.interceptors.read_lag import ReadLag
from runstore.server.interceptors.request_ids import RequestIds
from runstore.server.interceptors.version import ServerVersion
from runstore.server.metrics import Metrics


def concerns(
    config: ServerConfig,
    security: Security | None = None,
    metrics: Metrics | None = None,
    namespaces: NamespaceDirectory | None = None,
    quotas: Quotas | None = None,
) -> list[Concern | ReadLag]:
    """The concerns of the chain, outermost first (without ``namespaces``,
    only the namespace ``default`` is served)."""
    security = security or Security()
    chain: list[Concern | ReadLag] = []  # ReadLag wraps (``Chain.compose``)
    # 1. Request ids: taken from x-request-id or generated, first, so that every
    #    later concern (and its log lines) knows the call's id.
    chain.append(RequestIds())

    # 2. Access log and metrics: outside authentication and the limits, so that
    #    refused calls are counted and logged too (docs/observability.md).
    if metrics is not None or config.access_log_on:
        chain.append(CallObserver(metrics, access_log=config.access_log_on))

    #    The server's version in every response's initial metadata: before any
    #    concern may refuse the call, inside the observer, which then counts a
    #    call whose caller left as the header went out (docs/observability.md).
    chain.append(ServerVersion())

    # 3. Authentication and roles (docs/security.md): decided before any limit
    #    or the store sees the request.
    chain.append(
        Authentication(
            security.principals,
            certificates=security.tls is not None and security.tls.mutual,
        )
    )

    # 4. The namespace the call acts in (docs/namespaces.md), right after the
    #    principal is known: the store's keys need it, and a refusal here says
    #    nothing about any session or run. Then its quotas, before the request
    #    is parsed, so a refusal costs almost nothing.
    chain.append(NamespaceResolution(namespaces, authenticated=security.principals is not None))
    if quotas is not None:
        chain.append(QuotaEnforcement(quotas))
    #    The calls in flight, by that namespace, from here to the call's end.
    if metrics is not None:
        chain.append(CallsInFlight(metrics))

    # 5. The budget of response bytes in flight (docs/limits.md). It serialises
    #    unary responses: from here outward a response is its bytes.
    chain.append(Limits(config.max_response_bytes_in_flight))

    # 6. Request parsing: unparsable bodies become MALFORMED_REQUEST, so no
    #    handler ever sees a message that did not parse.
    chain.append(RequestParsing())

    # 7. Database operation bound: marks when each call started, after every
    #    concern that may refuse it, so the bound counts from the call reaching
    #    the store (docs/limits.md).
    chain.append(DatabaseBound())

    # 8. Reads a method declares may use the standby of --read-database-url
    #    (the operator's listings always, record listings when the caller lets
    #    them lag) go there, when there is one (docs/failover.md): innermost,
    #    it only marks the call for the database layer.
    if config.read_database_url:
        chain.append(ReadLag())
    return chain


def server_interceptors(
    config: ServerConfig,
    security: Security | None = None,
    metrics: Metrics | None = None,
    tracer_provider: Any | None = None,
    namespaces: NamespaceDirectory | None = None,
    quotas: Quotas | None = None,
) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors ``build_server`` installs, outermost first: the call's
    span when tracing, then the chain of concerns."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if tracer_provider is not None:
        interceptors.append(tracing.server_interceptor(tracer_provider))
    interceptors.append(Chain(concerns(config, security, metrics, namespaces, quotas)))
    return interceptors
