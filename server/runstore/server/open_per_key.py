"""What is open, per key: the one registry of open streams (and their
leases and wake-up events) grouped by a key such as a namespace or a watched
run.

Each is added when it opens and discarded however it ends; a key left with
none is forgotten, so memory stays bounded by what is open now, not by every
key ever used. Used by the streams a deleted namespace ends
(``core.namespace_streams``), the ``watch_streams`` quota's leases
(``core.quotas``) and the watchers' wake-ups (``db.wakeups``).
"""

from __future__ import annotations

from collections.abc import Iterator, Set
from typing import Generic, TypeVar

T = TypeVar("T")

_NONE: frozenset[object] = frozenset()


class OpenPerKey(Generic[T]):
    """The open items of each key."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, set[T]] = {}

    def add(self, key: str, item: T) -> None:
        self._open.setdefault(key, set()).add(item)

    def discard(self, key: str, item: T) -> None:
        """``item`` ended (however); a key left with none is forgotten."""
        items = self._open.get(key)
        if items is not None:
            items.discard(item)
            if not items:
                del self._open[key]

    def count(self, key: str) -> int:
        return len(self._open.get(key, ()))

    def live(self, key: str) -> Set[T]:
        """``key``'s open items as they are (no copy, for a hot path that only
        reads them: nothing may open or end one while it is iterated)."""
        return self._open.get(key, _NONE)  # type: ignore[arg-type]

    def every(self) -> Iterator[T]:
        """Every open item of every key (a copy: they may end meanwhile)."""
        return iter([item for items in self._open.values() for item in items])

    def __contains__(self, key: object) -> bool:
        return key in self._open

    def items(self, key: str) -> list[T]:
        """A copy of ``key``'s open items (callers may end them meanwhile)."""
        return list(self._open.get(key, ()))

    def pop(self, key: str) -> list[T]:
        """``key``'s open items, forgotten here (the key is gone)."""
        return list(self._open.pop(key, ()))

    def counts(self) -> dict[str, int]:
        """How many are open per key (keys with none are not kept)."""
        return {key: len(items) for key, items in self._open.items()}

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._open))
