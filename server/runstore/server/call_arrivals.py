"""The calls of one AppendRunRecordCalls message, on their way to the database.

A message's carried calls each pass the interceptor chain in a task of its
own (``carried_calls``), so they reach the database a few event-loop turns
apart. ``db.append_groups`` waits for the rest of a message before starting a
group while they are still coming, so that what arrived together commits
together (docs/scaling.md, "Group commit"); it stops waiting as soon as a
turn passes with none of them arriving or ending (one blocked elsewhere,
e.g. on a quota or the database bound, never holds the others).
"""

from __future__ import annotations

import contextvars
from typing import Final


class Together:
    """The calls of one message: how many are still on their way."""

    __slots__ = ("on_the_way", "progress")

    def __init__(self, calls: int) -> None:
        self.on_the_way = calls
        """Calls that have neither reached a group nor ended."""
        self.progress = 0
        """Counts every arrival and every end (what a waiting group watches)."""


class Arriving:
    """One carried call of a message (``Together``), in its own task."""

    __slots__ = ("_counted", "together")

    def __init__(self, together: Together) -> None:
        self.together = together
        self._counted = False

    def arrive(self) -> bool:
        """Counts this call as arrived (once); whether others are still coming."""
        self._done()
        return self.together.on_the_way > 0

    def end(self) -> None:
        """The call ended (answered, refused, or it never reached a group)."""
        self._done()

    def _done(self) -> None:
        if not self._counted:
            self._counted = True
            self.together.on_the_way -= 1
            self.together.progress += 1


CURRENT: Final[contextvars.ContextVar[Arriving | None]] = contextvars.ContextVar(
    "runstore_call_arriving", default=None
)
"""The carried call of the running task (None: a call that came alone)."""
