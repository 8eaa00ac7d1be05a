"""The one codec of every listing's page tokens (AIP-158).

A token is opaque to the caller: URL-safe base64 of a small JSON object that
holds where the next page starts (the last key returned) and a digest of the
request's filters (``f``). A token is only accepted with the filters that
produced it, and only by the listing that issued it (the digest names the
listing), so a token of ListSessions sent to ListNamespaces, one made up, or
one of other filters is INVALID_ARGUMENT with ErrorInfo naming ``page_token``,
never a page of something else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from runstore.contract.errors import ReadArgumentError

FIELD: Final = "page_token"
"""The request field every listing's token arrives in (what the errors name)."""

_DIGEST: Final = "f"


def filter_digest(listing: str, filters: object) -> str:
    """A short digest of ``listing``'s name and its request's ``filters``
    (anything JSON can write, in a stable order)."""
    text = json.dumps([listing, filters], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode(digest: str, position: Mapping[str, int | str]) -> str:
    """The token of the page after ``position`` (the last key returned), under
    the filters' ``digest``."""
    text = json.dumps({_DIGEST: digest, **position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(digest: str, token: str, shape: Mapping[str, type]) -> dict[str, Any] | None:
    """The position ``token`` holds, each of ``shape``'s fields of its type;
    None for the first page (no token).

    Raises:
        ReadArgumentError: ``token`` is not one of ours, or its fields are not
            of ``shape``, or it was issued for other filters or another listing.
    """
    if not token:
        return None
    invalid = ReadArgumentError("invalid page_token", field=FIELD)
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, TypeError) as exc:
        raise invalid from exc
    if not isinstance(data, dict) or not isinstance(data.get(_DIGEST), str):
        raise invalid
    position = {name: data.get(name) for name in shape}
    # ``type is``: a JSON true is no timestamp.
    if set(data) != {_DIGEST, *shape} or any(
        type(value) is not shape[name] for name, value in position.items()
    ):
        raise invalid
    if data[_DIGEST] != digest:
        raise ReadArgumentError(
            "page_token was issued for other filters; send the same filters on every page",
            field=FIELD,
        )
    return position
