"""The one duration syntax of every time flag, the server's and the CLI's
(docs/configuration.md#durations): a number and a unit, ``250ms``, ``4s``,
``10m``, ``2h``, ``30d``, or a bare number of seconds (``4``, ``0.5``).

One parser so that ``--db-operation-timeout 4s`` and ``--retention-interval
600`` mean what they say everywhere; each flag adds its own range check.
"""

from __future__ import annotations

import math
import re
from typing import Final

UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""Seconds in one of each unit."""

SYNTAX: Final = "a number of seconds or a number and ms, s, m, h or d (250ms, 4s, 10m, 2h, 30d)"
"""How the syntax reads in an error message."""

_DURATION: Final = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<unit>ms|s|m|h|d)?")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``250ms``, ``4s``, ``10m``, ``2h``, ``30d``, or a bare
    number of seconds; surrounding whitespace is ignored, zero is allowed.

    Raises:
        ValueError: ``text`` is negative, malformed or not finite; the message
            says why in words a user reads (no Python repr of the parse).
    """
    stripped = text.strip()
    if stripped.startswith("-"):
        raise ValueError(f"must not be negative, not {text!r}")
    match = _DURATION.fullmatch(stripped)
    if match is None:
        raise ValueError(f"must be {SYNTAX}, not {text!r}")
    seconds = float(match["number"]) * UNIT_SECONDS[match["unit"] or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"must be a finite duration, not {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it whole (``600`` is ``10m``,
    ``0.25`` is ``250ms``), so defaults print in the syntax flags accept."""
    if seconds == 0:
        return "0s"
    for unit in ("d", "h", "m", "s"):
        size = UNIT_SECONDS[unit]
        if seconds >= size and float(seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    milliseconds = seconds * 1000
    if float(milliseconds).is_integer():
        return f"{int(milliseconds)}ms"
    return f"{seconds:g}s"
