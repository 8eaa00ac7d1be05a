"""The namespace a call acts in (docs/namespaces.md): set once per call by the
interceptor chain (``interceptors.namespaces``), read where a call's keys are
built. Code outside a call (retention, background purges) sets it explicitly."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

DEFAULT: Final = "default"
"""The namespace that always exists; existing data migrates into it."""

_CURRENT: ContextVar[str] = ContextVar("runstore_namespace", default=DEFAULT)


def current() -> str:
    """The namespace of the call being served (``DEFAULT`` outside a call)."""
    return _CURRENT.get()


def set_current(namespace: str) -> None:
    _CURRENT.set(namespace)
