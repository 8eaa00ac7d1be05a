"""Statements compiled once per dialect into SQL text and the order of their
parameters, then run on the driver's own connection (sqlite3, asyncpg): the
hot path pays neither SQLAlchemy's execution layer nor an ORM."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement compiled for one dialect: SQL text and how to bind it.

    Named-parameter dialects (sqlite3) take the parameter mapping as it is;
    positional ones (asyncpg) take a tuple in ``names`` order.
    """

    sql: str
    names: tuple[str, ...]
    """Parameter order for positional dialects; empty for named ones."""
    defaults: Mapping[str, Any]
    """Values of the statement's constants (binds that are not parameters)."""
    _getter: Callable[[Mapping[str, Any]], Any] | None = None
    positional: bool = False
    """Whether the driver takes a tuple (asyncpg): one without parameters
    takes ``()`` whatever ``params`` holds (every call binds ``namespace``)."""
    namespaced: bool = False
    """Whether the statement binds ``namespace`` (is keyed by the namespace
    it runs in: ``db.primitives``)."""

    def args(self, params: Mapping[str, Any]) -> Any:
        """The driver's arguments for ``params``: a mapping or a tuple."""
        merged = {**self.defaults, **params} if self.defaults else params
        if self._getter is None:
            return () if self.positional else merged
        values = self._getter(merged)
        return values if len(self.names) > 1 else (values,)


def compile_for(statement: ClauseElement, dialect: Dialect) -> Compiled:
    """Compiles ``statement``; constants keep their values as defaults."""
    compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
    names = tuple(compiled.positiontup or ())
    defaults = {
        compiled.bind_names[bind]: bind.effective_value
        for bind in compiled.binds.values()
        if not bind.required
    }
    getter = operator.itemgetter(*names) if names else None
    namespaced = "namespace" in compiled.bind_names.values()
    return Compiled(str(compiled), names, defaults, getter, bool(compiled.positional), namespaced)
