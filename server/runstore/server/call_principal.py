"""The principal of the call being served, for the access log.

Authentication (slot 3 of the interceptor chain) sets it once it knows who
calls; the access log (slot 2) reads it when the call ends. Empty when
authentication did not name anyone (it is off, or the call was refused
before a principal was known).
"""

from __future__ import annotations

from contextvars import ContextVar

from runstore.contract.auth_file import Principal

_CURRENT: ContextVar[str] = ContextVar("runstore_principal", default="")


def current() -> str:
    """The name of the principal this call runs as ("" when none is known)."""
    return _CURRENT.get()


def set_current(name: str) -> None:
    _CURRENT.set(name)


_ADMITTED: ContextVar[Principal | None] = ContextVar("runstore_principal_admitted", default=None)


def admitted() -> Principal | None:
    """The authenticated principal (its namespaces decide where the call may
    act); None when no principal was admitted (authentication off, or the call
    refused)."""
    return _ADMITTED.get()


def set_admitted(principal: Principal) -> None:
    _ADMITTED.set(principal)
