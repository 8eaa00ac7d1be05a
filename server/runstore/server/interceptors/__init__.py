"""The server's interceptor chain: every cross-cutting concern, in one order.

Each concern (request ids, access logs and metrics, authentication and roles,
limits, request parsing) lives in its own module of this package and is added
here, so servicers stay thin and never see them. The list runs outermost first:
a concern that must see every call, including ones refused later, sits earlier.
"""

from __future__ import annotations

from typing import Any

import grpc

from runstore.server import tracing
from runstore.server.auth import Security
from runstore.server.config import ServerConfig
from runstore.server.interceptors.auth import AuthInterceptor
from runstore.server.interceptors.calls import CallObserver
from runstore.server.interceptors.parsing import RequestParsingInterceptor
from runstore.server.interceptors.request_ids import RequestIdInterceptor
from runstore.server.metrics import Metrics


def server_interceptors(
    config: ServerConfig,
    security: Security | None = None,
    metrics: Metrics | None = None,
    tracer_provider: Any | None = None,
) -> list[grpc.aio.ServerInterceptor]:
    """The chain ``build_server`` installs, outermost first."""
    security = security or Security()
    chain: list[grpc.aio.ServerInterceptor] = []
    # 1. Request ids: taken from x-request-id or generated (Hardening I).
    chain.append(RequestIdInterceptor())

    # 2. Access log and metrics (Operations), inside the call's span when tracing.
    if tracer_provider is not None:
        chain.append(tracing.server_interceptor(tracer_provider))
    if metrics is not None or config.access_log_on:
        chain.append(CallObserver(metrics, access_log=config.access_log_on))

    # 3. Authentication and roles (Security).
    chain.append(
        AuthInterceptor(
            security.principals,
            certificates=security.tls is not None and security.tls.mutual,
        )
    )

    # 4. Limits on calls and response bytes in flight (Hardening II).

    # 5. Request parsing: unparsable bodies become MALFORMED_REQUEST (Hardening I).
    chain.append(RequestParsingInterceptor())

    return chain
