"""The idempotent-append helper the memory and context stores share (D5)."""

from __future__ import annotations

import pytest

from runstore.contract.errors import IdempotencyConflictError
from runstore.contract.model import AppendOutcome
from runstore.server.core import idempotency
from runstore.server.core.model import StoredAppend


def test_the_digest_tells_apart_lists_that_concatenate_alike() -> None:
    assert idempotency.digest([b"ab", b"c"]) != idempotency.digest([b"a", b"bc"])
    assert idempotency.digest([b"ab", b""]) != idempotency.digest([b"ab"])
    assert idempotency.digest([b"a", b"b"]) == idempotency.digest(iter([b"a", b"b"]))


def test_a_retry_with_the_same_content_answers_the_first_outcome() -> None:
    digest = idempotency.digest([b"one", b"two"])
    earlier = StoredAppend(digest, first_position=5, count=2)
    assert idempotency.replay(earlier, digest, {"key": "k"}) == AppendOutcome(5, 2, False)


def test_the_same_key_with_other_content_is_a_conflict_naming_the_request() -> None:
    earlier = StoredAppend(idempotency.digest([b"one"]), first_position=0, count=1)
    details = {"key": "conversation", "idempotency_key": "step-1"}
    with pytest.raises(IdempotencyConflictError) as raised:
        idempotency.replay(earlier, idempotency.digest([b"two"]), details)
    assert raised.value.details == details
