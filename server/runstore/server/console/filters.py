"""The listings' query parameters, read once: the ID box, the time range, labels,
the order and the pages already seen (docs/console.md#runs).

Every filter becomes a filter of ``ListRuns`` or ``ListSessions`` (the store
filters, through its indexes, and counts); the console never filters a page
it has read. A relative range ("last 1h") is anchored: the first page
resolves it against the clock and its links carry that moment (``at``), so
the next pages keep the same range and the page token its filter digest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from starlette.datastructures import QueryParams

from runstore.contract.errors import ReadArgumentError
from runstore.server.console import render
from runstore.server.core.model import Nanos

RANGES: Final[Mapping[str, int]] = {
    "15m": 15 * 60,
    "1h": 3600,
    "24h": 24 * 3600,
    "7d": 7 * 24 * 3600,
}
"""The relative time ranges offered, in seconds back from the anchor."""

CUSTOM: Final = "custom"
"""The range whose bounds are ``from`` and ``to``."""

MAX_PREVIOUS: Final = 20
"""Page tokens a listing's URL keeps for "previous page" links (keyset pages
only go forwards); deeper than this, "first page" remains."""


def _time(params: QueryParams, name: str) -> Nanos | None:
    text = params.get(name, "")
    moment = render.parse_time(text)
    if text.strip() and moment is None:
        raise ReadArgumentError(
            f"{name} must be a date and time (YYYY-MM-DDTHH:MM, UTC)", field=name
        )
    return moment


def _digits(params: QueryParams, name: str) -> int | None:
    text = params.get(name, "")
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ReadArgumentError(f"{name} must be a whole number", field=name)
    return int(text)


@dataclass(frozen=True, slots=True)
class TimeRange:
    """``since`` (inclusive) and ``until`` (exclusive), either None."""

    name: str
    """"" (any time), one of ``RANGES``, or ``CUSTOM``."""
    since: Nanos | None
    until: Nanos | None
    at: Nanos | None
    """A relative range's anchor (the first page's now), kept in the links."""
    start_text: str
    end_text: str
    """The custom bounds as typed, for the form and the links."""


def time_range(params: QueryParams, start: str = "from", end: str = "to") -> TimeRange:
    """The range the URL names; a custom range is bounded by ``start`` and ``end``
    (given without ``range``, they make a custom range too)."""
    name = params.get("range", "")
    start_text, end_text = params.get(start, ""), params.get(end, "")
    if name in RANGES:
        at = _digits(params, "at") or time.time_ns()
        return TimeRange(name, at - RANGES[name] * 1_000_000_000, None, at, "", "")
    if name not in ("", CUSTOM):
        raise ReadArgumentError(
            f"range must be one of {', '.join([*RANGES, CUSTOM])}", field="range"
        )
    since, until = _time(params, start), _time(params, end)
    if since is None and until is None:
        return TimeRange("", None, None, None, "", "")
    return TimeRange(CUSTOM, since, until, None, start_text.strip(), end_text.strip())


def labels(text: str) -> dict[str, str]:
    """``key=value`` pairs, separated by commas: every one must match."""
    found: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise ReadArgumentError("a label filter is key=value", field="label")
        found[key.strip()] = value.strip()
    return found


def id_match(params: QueryParams) -> tuple[str, str]:
    """(exact, prefix) of the ID box: ``match=exact`` asks for that ID only."""
    text = params.get("id", "").strip()
    match = params.get("match", "")
    if match not in ("", "prefix", "exact"):
        raise ReadArgumentError("match must be prefix or exact", field="match")
    return (text, "") if match == "exact" else ("", text)


@dataclass(frozen=True, slots=True)
class Pages:
    """Where a listing is: its token, and the tokens of the pages before it."""

    token: str
    previous: list[str] = field(default_factory=list)
    """Tokens of earlier pages, oldest first (the first page has none)."""
    deep: bool = False
    """Deeper than ``MAX_PREVIOUS`` pages: the earlier tokens were let go."""
    prefix: str = ""
    """Before the parameters' names, for a page with two pagers (a session's runs)."""

    def _names(self, **values: object) -> dict[str, object]:
        return {self.prefix + name: value for name, value in values.items()}

    def next_links(self, next_token: str) -> dict[str, object]:
        """The query of the page after this one."""
        chain = [*self.previous, self.token] if self.token else []
        if self.deep or len(chain) > MAX_PREVIOUS:
            return self._names(page_token=next_token, deep=1)
        return self._names(page_token=next_token, prev=chain)

    def previous_links(self) -> dict[str, object] | None:
        """The query of the page before this one; None when it is not known
        (the first page, or deeper than ``MAX_PREVIOUS``)."""
        if not self.token or self.deep:
            return None
        if not self.previous:
            return {}
        return self._names(page_token=self.previous[-1], prev=self.previous[:-1])


def pages(params: QueryParams, prefix: str = "") -> Pages:
    return Pages(
        params.get(prefix + "page_token", ""),
        [t for t in params.getlist(prefix + "prev") if t][-MAX_PREVIOUS:],
        params.get(prefix + "deep", "") == "1",
        prefix,
    )


def newest_first(params: QueryParams) -> bool:
    order = params.get("order", "")
    if order not in ("", "newest", "oldest"):
        raise ReadArgumentError("order must be newest or oldest", field="order")
    return order != "oldest"
