"""One page-token codec for every listing (AIP-158): a token round-trips only
with the filters and the listing that issued it; anything else is an invalid
``page_token``."""

from __future__ import annotations

import base64
import json

import pytest

from runstore.contract.errors import ReadArgumentError
from runstore.contract.model import RunFilter, SessionFilter, SessionStatus
from runstore.server.core import listing, namespaces, page_tokens


def _raw(data: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def test_a_token_round_trips_under_its_digest() -> None:
    digest = page_tokens.filter_digest("things", [1, "a"])
    token = page_tokens.encode(digest, {"t": 5, "id": "r1"})
    assert page_tokens.decode(digest, token, {"t": int, "id": str}) == {"t": 5, "id": "r1"}
    assert page_tokens.decode(digest, "", {"t": int}) is None
    assert "=" not in token and "+" not in token and "/" not in token


def test_the_digest_names_the_listing_and_its_filters() -> None:
    assert page_tokens.filter_digest("a", [1]) == page_tokens.filter_digest("a", [1])
    assert page_tokens.filter_digest("a", [1]) != page_tokens.filter_digest("b", [1])
    assert page_tokens.filter_digest("a", [1]) != page_tokens.filter_digest("a", [2])


def test_listing_tokens_keep_their_shape() -> None:
    """Tokens already handed out by ListSessions and ListRuns stay valid."""
    digest = listing.session_filter_digest(SessionFilter())
    old = _raw({"f": digest, "t": 7, "id": "s1"})
    assert listing.decode_token(digest, old) == (7, "s1")
    assert listing.decode_token(digest, listing.encode_token(digest, (7, "s1"))) == (7, "s1")


def test_a_namespace_token_round_trips() -> None:
    token = namespaces.encode_page_token("team-a")
    assert namespaces.decode_page_token(token) == "team-a"
    assert namespaces.decode_page_token("") == ""


_SESSIONS = listing.session_filter_digest(SessionFilter())
_ACTIVE = listing.session_filter_digest(SessionFilter(statuses=frozenset({SessionStatus.ACTIVE})))
_RUNS = listing.run_filter_digest(RunFilter())


@pytest.mark.parametrize(
    ("decode", "token", "message"),
    [
        # Not ours.
        (namespaces.decode_page_token, "not a token!", "invalid page_token"),
        (namespaces.decode_page_token, _raw("team-a")[:-1], "invalid page_token"),
        (namespaces.decode_page_token, _raw([1, 2]), "invalid page_token"),
        # The bare base64 of a name the namespace listing once used.
        (
            namespaces.decode_page_token,
            base64.urlsafe_b64encode(b"team-a").decode().rstrip("="),
            "invalid page_token",
        ),
        # Of the right shape but a bad name, or a field of the wrong type.
        (
            namespaces.decode_page_token,
            _raw({"f": namespaces.LISTING_DIGEST, "name": "Bad Name"}),
            "invalid page_token",
        ),
        (
            namespaces.decode_page_token,
            _raw({"f": namespaces.LISTING_DIGEST, "name": 3}),
            "invalid page_token",
        ),
        (
            namespaces.decode_page_token,
            _raw({"f": namespaces.LISTING_DIGEST, "name": "a", "extra": 1}),
            "invalid page_token",
        ),
        # Another listing's token: a session listing's sent to the namespaces.
        (
            namespaces.decode_page_token,
            listing.encode_token(_SESSIONS, (1, "team-a")),
            "invalid page_token",
        ),
        (
            namespaces.decode_page_token,
            _raw({"f": _SESSIONS, "name": "team-a"}),
            "issued for other filters",
        ),
        # ...and a namespace listing's sent to the sessions, a runs' one, other filters.
        (
            lambda token: listing.decode_token(_SESSIONS, token),
            namespaces.encode_page_token("team-a"),
            "invalid page_token",
        ),
        (
            lambda token: listing.decode_token(_SESSIONS, token),
            listing.encode_token(_RUNS, (1, "r")),
            "issued for other filters",
        ),
        (
            lambda token: listing.decode_token(_ACTIVE, token),
            listing.encode_token(_SESSIONS, (1, "s")),
            "issued for other filters",
        ),
        (
            lambda token: listing.decode_token(_SESSIONS, token),
            _raw({"f": _SESSIONS, "t": True, "id": "s"}),
            "invalid page_token",
        ),
    ],
)
def test_malformed_and_foreign_tokens_are_invalid_page_tokens(
    decode: object, token: str, message: str
) -> None:
    with pytest.raises(ReadArgumentError, match=message) as refused:
        decode(token)  # type: ignore[operator]
    assert refused.value.field == "page_token"
