"""The principal of the call being served, for the access log.

Authentication (slot 3 of the interceptor chain) sets it once it knows who
calls; the access log (slot 2) reads it when the call ends. Empty when
authentication did not name anyone (it is off, or the call was refused
before a principal was known).
"""

from __future__ import annotations

from contextvars import ContextVar

_CURRENT: ContextVar[str] = ContextVar("runstore_principal", default="")


def current() -> str:
    """The name of the principal this call runs as ("" when none is known)."""
    return _CURRENT.get()


def set_current(name: str) -> None:
    _CURRENT.set(name)


_NAMESPACES: ContextVar[tuple[str, ...] | None] = ContextVar(
    "runstore_principal_namespaces", default=None
)


def namespaces() -> tuple[str, ...] | None:
    """The namespaces the authenticated principal is bound to; None when no
    principal was admitted (authentication off, or the call refused)."""
    return _NAMESPACES.get()


def set_namespaces(bound: tuple[str, ...]) -> None:
    _NAMESPACES.set(bound)
