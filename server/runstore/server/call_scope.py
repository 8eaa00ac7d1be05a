"""What a call (or a background task) acts on, for the code below it: its
namespace and whether its reads may lag (docs/namespaces.md, "For developers").

Fails closed: there is no default namespace. Every entry point names one
(``acting_in``): the interceptor chain per call, the console per request,
retention, seed expiry and a namespace's purge per namespace; a task over the
whole database (the quota keeper's recount, the namespace directory, backup
and migrations) names ``ALL_NAMESPACES``, in which a statement keyed by
namespace raises. Code that reads the namespace with none named raises
``NamespaceUnset`` instead of acting on ``default``.

The values live in context variables, so an asyncio task started inside a
scope keeps it and one started outside has none.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any, Final, ParamSpec, TypeVar, final

P = ParamSpec("P")
T = TypeVar("T")


@final
class AllNamespaces:
    """The scope of a task over the whole database: no one namespace."""

    _instance: AllNamespaces | None = None

    def __new__(cls) -> AllNamespaces:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ALL_NAMESPACES"


ALL_NAMESPACES: Final = AllNamespaces()
"""The scope of backup, migrations, the quota keeper, the namespace directory
and other work on every namespace at once."""

Scope = str | AllNamespaces
"""A namespace's name, or ``ALL_NAMESPACES``."""


class NamespaceUnset(RuntimeError):
    """Database work with no namespace named (a bug in the entry point that
    started it), or work in one namespace inside ``ALL_NAMESPACES``."""


_SCOPE: ContextVar[Scope] = ContextVar("runstore_namespace")  # no default: fails closed
_LAGGING: ContextVar[bool] = ContextVar("runstore_lagging_reads", default=False)


def scope() -> Scope:
    """The namespace (or ``ALL_NAMESPACES``) the current code acts on.

    Raises:
        NamespaceUnset: no entry point named one.
    """
    try:
        return _SCOPE.get()
    except LookupError:
        raise NamespaceUnset(
            "no namespace: database work must run inside call_scope.acting_in(...) "
            "(a namespace, or ALL_NAMESPACES for work on every namespace)"
        ) from None


def namespace() -> str:
    """The one namespace the current code acts in.

    Raises:
        NamespaceUnset: none is named, or the code runs in ``ALL_NAMESPACES``.
    """
    current = scope()
    if isinstance(current, AllNamespaces):
        raise NamespaceUnset("work in one namespace inside ALL_NAMESPACES: name the namespace")
    return current


@contextlib.contextmanager
def acting_in(scope: Scope) -> Iterator[None]:
    """The code (and the tasks it starts) inside this block acts on ``scope``."""
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def over_all_namespaces(
    fn: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """``fn`` (a coroutine function over the whole database) acting on
    ``ALL_NAMESPACES`` whoever calls it."""

    @functools.wraps(fn)
    async def scoped(*args: P.args, **kwargs: P.kwargs) -> T:
        with acting_in(ALL_NAMESPACES):
            return await fn(*args, **kwargs)

    return scoped


def named() -> str | None:
    """The one namespace named for the current code; None when none is, or
    it acts on ``ALL_NAMESPACES``. For labels and logs, never for data."""
    current = _SCOPE.get(None)
    return current if isinstance(current, str) else None


def enter_call(scope: Scope) -> None:
    """Names the scope of the call being served, for the rest of the
    call's own task (the interceptor chain, once it decided it): grpc.aio runs
    each call in a task of its own, so it ends with the call."""
    _SCOPE.set(scope)


@contextlib.contextmanager
def lagging_reads() -> Iterator[None]:
    """The reads awaited inside this block may be served by a standby.

    Code that can live with a result a little behind the last commits (an
    operator's listing, an export, a console page) runs its reads in it. With
    ``--read-database-url`` those reads go to a standby; without one, or on
    SQLite, nothing changes. A worker's reads never do: the contract promises
    that a worker reads its own writes (docs/failover.md).
    """
    token = _LAGGING.set(True)
    try:
        yield
    finally:
        _LAGGING.reset(token)


def lag_tolerated() -> bool:
    """Whether the read being made now may lag."""
    return _LAGGING.get()
