"""Argument types checked at the client's edge, so a wrong type is a
``TypeError`` naming the argument and what it takes, not protobuf's message
about a field the caller never named. Only ``isinstance`` checks: they sit on
the append path."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


def _wrong(name: str, wanted: str, value: Any) -> TypeError:
    return TypeError(f"{name} must be {wanted}, not {type(value).__name__} {value!r:.60}")


def text(name: str, value: Any, wanted: str = "a str") -> str:
    """``value`` if it is a ``str``; else a ``TypeError`` naming ``name``."""
    if not isinstance(value, str):
        raise _wrong(name, wanted, value)
    return value


def cursor(name: str, value: Any) -> str:
    """A page cursor: ``""`` for the first page, then a page's ``next_cursor``."""
    return text(name, value, "a str: '' for the first page, then the last page's next_cursor")


def count(name: str, value: Any) -> int:
    """``value`` if it is an ``int`` (not a ``bool``); else a ``TypeError``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong(name, "an int", value)
    return value


def texts(name: str, value: Any) -> list[str]:
    """A collection of ``str`` (not one ``str``, which would be its characters)."""
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise _wrong(name, "a collection of str (a list or tuple)", value)
    return [text(f"{name}[{i}]", item) for i, item in enumerate(value)]


def moment(name: str, value: Any) -> datetime:
    """``value`` if it is a ``datetime``; else a ``TypeError``."""
    if not isinstance(value, datetime):
        raise _wrong(name, "a datetime (timezone-aware, UTC)", value)
    return value


def instance(name: str, value: T, kind: type[Any]) -> T:
    """``value`` if it is a ``kind``; else a ``TypeError`` naming both."""
    if not isinstance(value, kind):
        raise _wrong(name, f"a {kind.__name__}", value)
    return value


def payload(name: str, value: Any) -> bytes:
    """A record's payload: ``bytes`` (JSON as ``json.dumps(...).encode()``)."""
    if not isinstance(value, bytes):
        raise _wrong(name, "bytes (e.g. json.dumps(value).encode())", value)
    return value
