"""Namespace names (docs/namespaces.md), shared by the server, the auth file and the CLI."""

from __future__ import annotations

import re
from typing import Final

DEFAULT: Final = "default"
"""The namespace that always exists; a principal without ``namespaces`` is bound to it."""

EVERY: Final = "*"
"""In a principal's ``namespaces``: bound to every namespace (alone in the list)."""

NAME_RULE: Final = "[a-z0-9][a-z0-9-]{0,62}"
"""What a namespace name looks like (at most 63 characters, a DNS label's length)."""

_NAME: Final = re.compile(NAME_RULE)


def is_valid_name(name: str) -> bool:
    """Whether ``name`` can name a namespace."""
    return _NAME.fullmatch(name) is not None


def binding_problem(namespaces: object) -> str | None:
    """Why ``namespaces`` cannot be a principal's binding (None when it can):
    a non-empty list of distinct valid names, or ``["*"]`` alone."""
    if not isinstance(namespaces, list | tuple) or not namespaces:
        return 'must be a non-empty list of namespace names, or ["*"]'
    if not all(isinstance(name, str) for name in namespaces):
        return "must hold strings only"
    if EVERY in namespaces and len(namespaces) > 1:
        return '"*" (every namespace) must be alone in the list'
    if len(set(namespaces)) != len(namespaces):
        return "names a namespace twice"
    for name in namespaces:
        if name != EVERY and not is_valid_name(name):
            return f"{name!r} is not a namespace name (rule {NAME_RULE})"
    return None
