"""Strings written the way Go writes them: one home for every quoter.

``quote`` is Go's ``%q`` (``strconv.Quote``), used in error messages, as
upstream's messages are. ``json_string`` is a JSON string literal: with
``go=True`` as Go's ``encoding/json`` writes it (HTML-safe escapes for ``<``,
``>``, ``&`` and U+2028/U+2029; lone surrogates left for the caller's UTF-8
encoder), so lifecycle payloads built here are byte-identical to a Go
worker's; with ``go=False`` in its plain form (only what JSON requires, lone
surrogates escaped so the text stays valid UTF-8), as transcript and memory
payloads are written.
"""

from __future__ import annotations

from typing import Final

_JSON_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    **{chr(code): f"\\u{code:04x}" for code in range(0x20) if chr(code) not in "\n\r\t\b\f"},
}
_GO_JSON_TABLE: Final = str.maketrans(
    {
        **_JSON_ESCAPES,
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)
_PLAIN_JSON_TABLE: Final = str.maketrans(
    {**_JSON_ESCAPES, **{chr(code): f"\\u{code:04x}" for code in range(0xD800, 0xE000)}}
)


def json_string(value: str, *, go: bool) -> str:
    """``value`` as a JSON string literal: Go's spelling (``go=True``) or the plain one."""
    return '"' + value.translate(_GO_JSON_TABLE if go else _PLAIN_JSON_TABLE) + '"'


_GO_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def quote(value: str) -> str:
    """``value`` quoted the way Go's ``%q`` does, as upstream messages are.

    Printable characters stay as they are; quotes, backslashes and control
    characters are escaped, so a message never breaks across lines.
    """
    out = ['"']
    for char in value:
        code = ord(char)
        if char in _GO_SHORT_ESCAPES:
            out.append(_GO_SHORT_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif not char.isprintable() and char != " ":
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)
