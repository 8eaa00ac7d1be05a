"""Latency percentiles shared by the benchmark's client processes.

The same definitions as ``bench.driver``: p50 is the median, p99 the value at
rank ``int(0.99 × n)`` of the sorted sample (the largest one below 100 values).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of a sorted, non-empty sample (nearest rank, floor)."""
    if not ordered:
        raise ValueError("percentile of an empty sample")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_ms(latencies: Sequence[float]) -> dict[str, float | None]:
    """``p50_ms`` and ``p99_ms`` of latencies given in seconds (``None`` when empty)."""
    if not latencies:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(latencies)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * percentile(ordered, 0.99),
    }


def throughput_row(
    spec: dict[str, Any], latencies: Sequence[float], elapsed: float
) -> dict[str, Any]:
    """One measurement's row, shaped as ``bench.driver`` writes it."""
    return {
        **spec,
        "ops": len(latencies),
        "ops_per_s": len(latencies) / elapsed if elapsed > 0 else 0.0,
        **latency_ms(latencies),
    }
