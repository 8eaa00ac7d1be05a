"""What the operator asked to see of a server: metrics and traces (both off by
default, docs/observability.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runstore.server import tracing
from runstore.server.config import ServerConfig
from runstore.server.metrics import Metrics
from runstore.server.version import __version__


@dataclass(frozen=True)
class Telemetry:
    """Metrics (``--metrics-listen``) and an OpenTelemetry tracer provider."""

    metrics: Metrics | None = None
    tracer_provider: Any | None = None
    """An OpenTelemetry tracer provider (the ``otel`` extra), or None."""

    @classmethod
    def from_config(cls, config: ServerConfig) -> Telemetry:
        return cls(
            metrics=Metrics(__version__) if config.metrics_listen else None,
            tracer_provider=tracing.provider_from_env(),
        )
