"""A run's timeline (docs/console.md#timeline): the run from its start to its
end (or now), the records of the page as ticks at their times, and its
children and successors as bars beside it, drawn as inline SVG whose shapes
the style sheet colours (no inline style, no script)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from runstore.contract import lifecycle
from runstore.server.core.model import Nanos, RunRecord, RunState

WIDTH: Final = 1000.0
"""The drawing's width in SVG units (it scales to the page)."""
ROW: Final = 26.0
"""One bar's row height."""


@dataclass(frozen=True, slots=True)
class Bar:
    """One run as a bar: ``x`` and ``width`` in SVG units."""

    run: RunState
    role: str
    """``run``, ``child`` or ``successor``."""
    x: float
    width: float
    y: float
    ongoing: bool


@dataclass(frozen=True, slots=True)
class Tick:
    position: int
    record: RunRecord
    x: float
    lifecycle: bool
    """A lifecycle record (started, suspended, completed, ...)."""


@dataclass(frozen=True, slots=True)
class Timeline:
    start: Nanos
    end: Nanos
    bars: list[Bar]
    ticks: list[Tick]
    ticks_y: float
    height: float


def _lifecycle(record: RunRecord) -> bool:
    return record.type in lifecycle.LIFECYCLE_TYPES


def timeline(
    run: RunState,
    records: Sequence[tuple[int, RunRecord]],
    children: Sequence[RunState],
    successors: Sequence[RunState],
    now: Nanos,
) -> Timeline:
    """The run's span holds every bar and tick: from its start (or the
    earliest record shown) to the latest end, record or now."""
    others = [*children, *successors]
    start = min([run.started_at, *(r.timestamp for _, r in records)])
    ends = [
        run.ended_at or now,
        *(other.ended_at or now for other in others),
        *(r.timestamp for _, r in records),
    ]
    end = max(max(ends), start + 1)

    def x(moment: Nanos) -> float:
        return round((moment - start) / (end - start) * WIDTH, 2)

    def bar(other: RunState, role: str, y: float) -> Bar:
        left = x(max(other.started_at, start))
        right = x(other.ended_at or now)
        return Bar(other, role, left, max(right - left, 2.0), y, other.ended_at is None)

    bars = [bar(run, "run", 0.0)]
    ticks_y = ROW
    for index, other in enumerate(children):
        bars.append(bar(other, "child", ROW * (2 + index)))
    for index, other in enumerate(successors):
        bars.append(bar(other, "successor", ROW * (2 + len(children) + index)))
    ticks = [
        Tick(position, record, x(record.timestamp), _lifecycle(record))
        for position, record in records
    ]
    return Timeline(start, end, bars, ticks, ticks_y, ROW * (2 + len(others)))
