"""The one strict JSON reader behind every payload codec (lifecycle records,
transcripts, memory events).

Strict as the contract asks (docs/contract.md §5.1): a repeated object key and
the non-JSON constants ``NaN``/``Infinity`` are errors, and numbers go to the
caller's parsers so that none is rounded. Each codec keeps its own error type
and wording; this module only builds the decoders and names JSON kinds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any


class NumberText(str):
    """A JSON number kept as its literal text (a codec subclasses it per kind)."""


class Members(list[tuple[str, Any]]):
    """An object read leniently: its members in order, repeated keys kept."""


def decoder(
    *,
    parse_int: Callable[[str], Any],
    parse_float: Callable[[str], Any],
    duplicate_key: Callable[[str], Exception] | None,
    constant: Callable[[str], Exception],
) -> json.JSONDecoder:
    """A decoder that raises ``duplicate_key(key)`` on a repeated key (or, with
    None, keeps every member as ``Members``) and ``constant(name)`` on NaN,
    Infinity and -Infinity."""

    def reject_constant(name: str) -> Any:
        raise constant(name)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                assert duplicate_key is not None
                raise duplicate_key(key)
            obj[key] = value
        return obj

    return json.JSONDecoder(
        object_pairs_hook=Members if duplicate_key is None else unique,
        parse_float=parse_float,
        parse_int=parse_int,
        parse_constant=reject_constant,
    )


def json_kind(value: Any) -> str:
    """The JSON kind of a decoded value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, NumberText | int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list) and not isinstance(value, Members):
        return "array"
    return "object"
