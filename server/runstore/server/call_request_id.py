"""The id of the request being served, for logs and for the caller (ErrorInfo ``request_id``).

Set once per call by the request-id interceptor (slot 1 of the chain) from the
caller's ``x-request-id`` metadata, or generated; everything that runs for the
call (later interceptors, servicers, the status mapping) reads it here.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Final

METADATA_KEY: Final = "x-request-id"
"""Request and trailing metadata key of the request id."""

MAX_LENGTH: Final = 128
"""Longest request id taken from a caller; a longer one is replaced."""

_VALID = re.compile(rf"[A-Za-z0-9._:/+=@-]{{1,{MAX_LENGTH}}}")

log = logging.getLogger(__name__)

_CURRENT: ContextVar[str] = ContextVar("runstore_request_id", default="")


def current() -> str:
    """The id of the request this code serves ("" outside a call)."""
    return _CURRENT.get()


def set_current(request_id: str) -> None:
    _CURRENT.set(request_id)


def generate() -> str:
    """128 random bits in hex (what ``uuid4().hex`` gave, without building a UUID).

    From ``random``, seeded by the system at import and again in every forked
    worker, not ``os.urandom``: an id names a call and guards nothing, and
    ``os.urandom`` gives the interpreter lock away for its system call, once
    per call, to whichever thread wants it (docs/benchmarks.md, "Protections'
    cost")."""
    return f"{random.getrandbits(128):032x}"


def is_valid(value: str) -> bool:
    """Whether a caller's id is one the server takes as it is: 1 to
    ``MAX_LENGTH`` letters, digits and ``._:/+=@-``."""
    return _VALID.fullmatch(value) is not None


def from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The caller's ``x-request-id``, or a new id. An id the server cannot take
    as it is (other characters, too long) is replaced by a new one, never
    silently altered into a different id the caller would not recognise; the
    log says so, with the new id on the line (docs/observability.md)."""
    for key, value in metadata or ():
        if key == METADATA_KEY and isinstance(value, str) and value:
            if is_valid(value):
                return value
            fresh = generate()
            set_current(fresh)
            log.warning(
                "x-request-id %s is not 1 to %d of letters, digits and ._:/+=@-: replaced by %s",
                ascii(value[:64]) + ("..." if len(value) > 64 else ""),
                MAX_LENGTH,
                fresh,
            )
            return fresh
    return generate()
