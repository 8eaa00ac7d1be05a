"""The id of the request being served, for logs and for the caller (ErrorInfo ``request_id``).

Set once per call by the request-id interceptor (slot 1 of the chain) from the
caller's ``x-request-id`` metadata, or generated; everything that runs for the
call (later interceptors, servicers, the status mapping) reads it here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Final

METADATA_KEY: Final = "x-request-id"
"""Request and trailing metadata key of the request id."""

MAX_LENGTH: Final = 128
"""Longest request id taken from a caller; longer ones are cut."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._:/+=@-]")

_CURRENT: ContextVar[str] = ContextVar("runstore_request_id", default="")


def current() -> str:
    """The id of the request this code serves ("" outside a call)."""
    return _CURRENT.get()


def set_current(request_id: str) -> None:
    _CURRENT.set(request_id)


def generate() -> str:
    """128 random bits in hex (what ``uuid4().hex`` gave, without building a UUID)."""
    return os.urandom(16).hex()


def sanitize(value: str) -> str:
    """A caller's id made safe to log and echo: printable ASCII id characters
    only, at most ``MAX_LENGTH`` of them ("" when nothing is left)."""
    return _UNSAFE.sub("", value[: MAX_LENGTH * 4])[:MAX_LENGTH]


def from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The caller's ``x-request-id`` (sanitised), or a new id."""
    for key, value in metadata or ():
        if key == METADATA_KEY and isinstance(value, str):
            taken = sanitize(value)
            if taken:
                return taken
    return generate()
