"""Bearer tokens as callers hand them over: stripped of the surrounding
whitespace a file or an environment variable brings (``open(...).read()``
keeps the newline), and refused before any call when nothing is left or when
a character could not travel in a gRPC header (``docs/security.md#tokens``).
"""

from __future__ import annotations

from pathlib import Path


class InvalidTokenError(ValueError):
    """A bearer token that cannot be sent: empty, or with control characters."""


def clean_token(token: str, source: str = "token") -> str:
    """``token`` without surrounding whitespace; ``source`` names where it came
    from in the error (``--token-file worker.token``, ``RUNSTORE_TOKEN``).

    Raises:
        InvalidTokenError: nothing is left, or a control or non-ASCII character
            remains (gRPC metadata values are printable ASCII).
    """
    if not isinstance(token, str):
        raise InvalidTokenError(f"{source} must be a string, not {type(token).__name__}")
    stripped = token.strip()
    if not stripped:
        raise InvalidTokenError(f"{source} is empty")
    for position, character in enumerate(stripped):
        if not (" " <= character <= "~"):
            raise InvalidTokenError(
                f"{source} has a control or non-ASCII character ({character!r} at "
                f"position {position}); a token is printable ASCII"
            )
    return stripped


def read_token_file(path: str | Path) -> str:
    """The token in the file at ``path``, cleaned as ``clean_token`` does.

    Raises:
        InvalidTokenError: the file is empty or the token is unusable.
        OSError: the file cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return clean_token(text, f"token file {path}")
