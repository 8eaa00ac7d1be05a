"""Tracing with OpenTelemetry, when the ``otel`` extra is installed and asked for.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
set, the server makes a tracer provider that exports over OTLP (gRPC); the
standard ``OTEL_*`` variables (service name, headers, sampler) apply. Each RPC
gets a server span from OpenTelemetry's own gRPC instrumentation, which also
continues the caller's trace from the ``traceparent`` metadata, and each
database transaction a child span (``db.measured``). Without the variable, or
without the extra, nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Final

import grpc

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
INSTRUMENTATION_NAME: Final = "runstore.server"


class TracingUnavailable(RuntimeError):
    """Tracing was asked for (an OTLP endpoint is set) but cannot be set up."""


def provider_from_env(env: Mapping[str, str] | None = None) -> Any | None:
    """An SDK tracer provider exporting over OTLP, or None when tracing is not asked for.

    Raises:
        TracingUnavailable: an endpoint is set but the ``otel`` extra is missing.
    """
    env = os.environ if env is None else env
    if not any(env.get(name) for name in ENDPOINT_VARIABLES):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but tracing needs the otel extra: "
            "pip install 'runstore-server[otel]'"
        ) from exc
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "runstore"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    log.info("tracing: exporting spans over OTLP")
    return provider


def server_interceptor(provider: Any) -> grpc.aio.ServerInterceptor:
    """OpenTelemetry's own server interceptor: a span per RPC, the caller's trace continued."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]
        tracer_provider=provider
    )
    return interceptor


def tracer(provider: Any) -> Any:
    """The tracer of the database spans."""
    return provider.get_tracer(INSTRUMENTATION_NAME)


def shutdown(provider: Any) -> None:
    """Exports the spans still buffered."""
    provider.shutdown()
