"""Marks when each call starts, so its database work is bounded from then on
(``db.bound``)."""

from __future__ import annotations

from typing import Any

import grpc

from runstore.server.db import bound
from runstore.server.interceptors.handlers import Context, Handler, Unary, wrapped


def _bounded(behaviour: Unary) -> Unary:
    """``behaviour`` with its start marked."""

    async def call(request: Any, context: Context) -> Any:
        token = bound.mark_call_start()
        try:
            return await behaviour(request, context)
        finally:
            bound.end_call(token)

    return call


class DatabaseBound:
    """Marks every unary method's start; streams keep the per-operation bound."""

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        pass

    def wrap(self, method: str, handler: Handler) -> Handler:
        if handler.unary_unary is None:
            return handler
        return wrapped(handler, unary=_bounded)
