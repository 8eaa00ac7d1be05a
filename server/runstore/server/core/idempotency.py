"""Idempotent appends, shared by the memory and context stores (D5).

An append may carry an idempotency key. The first call with the key stores
its items and remembers a digest of them (``StoredAppend``); a retry with the
same key and the same items appends nothing and answers what the first call
did, and the same key with other items is a conflict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from runstore.contract.errors import IdempotencyConflictError
from runstore.contract.model import AppendOutcome
from runstore.server.core.model import StoredAppend


def digest(parts: Iterable[bytes]) -> bytes:
    """What a retry must repeat exactly: each part length-prefixed, so no two
    different lists of parts share a digest by concatenation."""
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(len(part).to_bytes(8, "big"))
        hashed.update(part)
    return hashed.digest()


def replay(earlier: StoredAppend, digest: bytes, details: Mapping[str, str]) -> AppendOutcome:
    """The first call's outcome for a retry with the same content; with other
    content an ``IdempotencyConflictError`` carrying ``details``."""
    if earlier.digest != digest:
        raise IdempotencyConflictError(details=dict(details))
    return AppendOutcome(earlier.first_position, earlier.count, False)
