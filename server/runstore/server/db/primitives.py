"""What every SQL operation of a transaction runs on: the statement primitives
a backend provides over its driver's connection, and the scope each statement
binds as ``namespace`` (docs/namespaces.md, "For developers")."""

from __future__ import annotations

from typing import Any

from runstore.server.call_scope import AllNamespaces, NamespaceUnset, Scope
from runstore.server.db.compiled import Compiled


class StatementPrimitives:
    """The primitives (``_one``, ``_all``, ``_run``, ``_many``) a backend's
    transaction implements, once for every family of operations mixed into
    ``SqlTransaction``; ``scope`` is what its statements act on."""

    scope: Scope
    """The namespace every statement binds as ``namespace``, or
    ``ALL_NAMESPACES`` for work over the whole database, where a statement
    keyed by namespace raises ``NamespaceUnset``."""

    @property
    def namespace(self) -> str:
        """The one namespace this transaction acts in.

        Raises:
            NamespaceUnset: it acts on ``ALL_NAMESPACES``.
        """
        scope = self.scope
        if isinstance(scope, AllNamespaces):
            raise NamespaceUnset("work in one namespace inside ALL_NAMESPACES: name the namespace")
        return scope

    @namespace.setter
    def namespace(self, namespace: str) -> None:
        self.scope = namespace

    def _scoped(self, statement: Compiled, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the transaction's namespace bound as ``namespace``."""
        scope = self.scope
        if type(scope) is str:
            params["namespace"] = scope
        elif statement.namespaced:
            raise NamespaceUnset(
                "a statement keyed by namespace inside ALL_NAMESPACES: name the namespace"
            )
        return params

    async def _one(self, statement: Compiled, **params: Any) -> Any:
        """The first row of ``statement``, or None."""
        raise NotImplementedError

    async def _all(self, statement: Compiled, **params: Any) -> list[Any]:
        """Every row of ``statement``."""
        raise NotImplementedError

    async def _run(self, statement: Compiled, **params: Any) -> None:
        """Executes ``statement`` for its effect."""
        raise NotImplementedError

    async def _many(self, statement: Compiled, rows: list[dict[str, Any]]) -> None:
        """Executes ``statement`` once per parameter set."""
        raise NotImplementedError
