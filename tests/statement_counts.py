"""What one call costs the database: the SQL statements a server sends, its
transactions and its round trips, counted at the driver on either backend.

``counting(backend)`` hooks every connection a served database opens
(SQLite's ``set_trace_callback``, asyncpg's query loggers on each pooled
connection it hands out) and yields a ``Tally``; ``Tally.during`` counts what
one awaited call sent. Serve with ``QUIET_SERVER`` so that no background
probe writes while a call is counted.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pytest

from runstore.server.db.postgres import PostgresDatabase
from runstore.server.db.sqlite import SqliteDatabase
from tests.backends import SQLITE

QUIET_SERVER: Final[dict[str, Any]] = {"health_probe_interval": 3600.0}
"""``served`` settings with no periodic database probe (SQLite's runs on the writer)."""

_BRACKETS = ("BEGIN", "COMMIT", "ROLLBACK")


@dataclass(frozen=True)
class Cost:
    """What one call sent to the database."""

    statements: int
    """SQL statements other than BEGIN, COMMIT and ROLLBACK."""
    transactions: int
    """BEGIN ... COMMIT blocks, and statements sent on their own (autocommit)."""
    round_trips: int
    """Everything sent, brackets included: on PostgreSQL each is a round trip."""
    sql: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return f"{self.statements} statements, {self.transactions} tx, {self.round_trips} trips"


def cost_of(sent: list[str]) -> Cost:
    """The ``Cost`` of ``sent``, the SQL of one call in the order sent."""
    statements = transactions = 0
    in_transaction = False
    for sql in sent:
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if head == "BEGIN":
            transactions += 1
            in_transaction = True
        elif head in _BRACKETS:
            in_transaction = False
        else:
            statements += 1
            if not in_transaction:
                transactions += 1
    return Cost(statements, transactions, len(sent), tuple(sent))


class Tally:
    """Every statement the hooked connections sent, while ``on``."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.on = False

    def saw(self, sql: str) -> None:
        if self.on:
            self.sent.append(sql)

    async def during(self, call: Awaitable[Any]) -> tuple[Any, Cost]:
        """``call``'s result and what it sent."""
        self.sent = []
        self.on = True
        try:
            result = await call
        finally:
            self.on = False
        return result, cost_of(self.sent)


@contextlib.contextmanager
def counting(backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tally]:
    """A ``Tally`` of every connection the databases opened meanwhile use."""
    tally = Tally()
    if backend == SQLITE:
        connect = SqliteDatabase._connect

        def traced(self: SqliteDatabase, *, read_only: bool) -> sqlite3.Connection:
            conn = connect(self, read_only=read_only)
            conn.set_trace_callback(tally.saw)
            return conn

        monkeypatch.setattr(SqliteDatabase, "_connect", traced)
    else:
        acquire = PostgresDatabase._acquire

        def logged(query: Any) -> None:
            tally.saw(query.query)

        async def acquire_logged(self: PostgresDatabase, pool: Any, until: float) -> Any:
            conn = await acquire(self, pool, until)
            conn.add_query_logger(logged)
            return conn

        monkeypatch.setattr(PostgresDatabase, "_acquire", acquire_logged)
    yield tally
