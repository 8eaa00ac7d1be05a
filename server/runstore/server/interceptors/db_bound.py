"""Marks when each call starts, so its database work is bounded from then on
(``db.bound``)."""

from __future__ import annotations

import contextvars
from typing import Any

from runstore.server.db import bound
from runstore.server.interceptors.handlers import Context, Handler, Steps, admits_nothing


def _marked(request: Any, context: Context) -> contextvars.Token[float | None]:
    return bound.mark_call_start()


def _ended(token: contextvars.Token[float | None], response: Any, context: Context) -> Any:
    bound.end_call(token)
    return response


def _failed(token: contextvars.Token[float | None], exc: BaseException, context: Context) -> None:
    bound.end_call(token)


_STEPS = Steps(enter=_marked, after=_ended, fail=_failed)


class DatabaseBound:
    """Marks every unary method's start; streams keep the per-operation bound."""

    admit = admits_nothing

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if handler.unary_unary is None:
            return None
        return _STEPS
