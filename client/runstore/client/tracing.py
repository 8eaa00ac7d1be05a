"""Client spans and trace context for every call, with the ``otel`` extra.

``runstore-client[otel]`` adds OpenTelemetry's gRPC instrumentation: each call
gets a client span and carries the trace context (``traceparent``) to the
server, which continues the trace. By default this is on exactly when the
extra is installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; spans go to the application's
tracer provider (``opentelemetry.trace.set_tracer_provider``) unless one is
given. The plain client never imports OpenTelemetry.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any, Final

import grpc

ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def installed() -> bool:
    """Whether OpenTelemetry's gRPC instrumentation (the ``otel`` extra) is importable."""
    return importlib.util.find_spec("opentelemetry.instrumentation.grpc") is not None


def wanted(tracing: bool | None, env: Mapping[str, str] | None = None) -> bool:
    """``tracing`` as asked; when None, on with the extra and an OTLP endpoint set."""
    if tracing is not None:
        return tracing
    env = os.environ if env is None else env
    return any(env.get(name) for name in ENDPOINT_VARIABLES) and installed()


def client_interceptors(tracer_provider: Any | None = None) -> list[grpc.aio.ClientInterceptor]:
    """OpenTelemetry's client interceptors for a ``grpc.aio`` channel.

    Raises:
        ImportError: the ``otel`` extra is not installed.
    """
    try:
        from opentelemetry.instrumentation.grpc import aio_client_interceptors
    except ImportError as exc:
        raise ImportError(
            "tracing needs the otel extra: pip install 'runstore-client[otel]'"
        ) from exc
    interceptors: list[grpc.aio.ClientInterceptor] = aio_client_interceptors(  # type: ignore[no-untyped-call]
        tracer_provider=tracer_provider
    )
    return interceptors
