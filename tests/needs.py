"""What a test needs beyond the venv (Chromium, Node.js, libfuse, the bench
peers, /dev/fuse), and the suite's policy when it is missing.

Two kinds of absence:

- a package ``.ci/run`` installs (``fixable``): a skip on a developer's
  machine, but a failure naming it where ``RUNSTORE_REQUIRE_TOOLS`` is set (as
  ``.ci/run`` sets it), so CI never passes without running those tests;
- something the machine itself forbids (no ``/dev/fuse`` in a container): a
  skip everywhere, listed before pytest's closing line (tests/conftest.py).

PostgreSQL has its own switch, ``RUNSTORE_REQUIRE_POSTGRES`` (tests/pg_cluster.py).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import NoReturn

import pytest

REQUIRED = os.environ.get("RUNSTORE_REQUIRE_TOOLS", "") not in ("", "0")
"""CI installs every package these tests need: a missing one fails the test."""

MARKER = "needs"


@dataclass(frozen=True)
class Missing:
    what: str
    """The package or device, as .ci/run would name it: "chromium", "fuse3"."""
    reason: str
    fixable: bool

    def message(self) -> str:
        if self.fixable and REQUIRED:
            return (
                f"RUNSTORE_REQUIRE_TOOLS: {self.what} is missing ({self.reason}); "
                ".ci/run installs it, or fails naming it"
            )
        if not self.fixable:
            return f"{FORCED} {self.what}: {self.reason}"
        return f"needs {self.what}: {self.reason} (.ci/run installs it)"


FORCED = "the machine cannot provide"
"""How a skip the machine forces begins: tests/conftest.py lists those at the end."""


def unless(what: str, reason: str | None, *, fixable: bool = True) -> pytest.MarkDecorator:
    """A mark for a test or module: when ``reason`` says ``what`` is missing,
    it skips (or fails, as above) before the test's fixtures are set up."""
    if reason is None:
        return pytest.mark.needs(None)
    return pytest.mark.needs(Missing(what, reason, fixable))


def missing(what: str, reason: str, *, fixable: bool = True) -> NoReturn:
    """From inside a test or fixture: skips, or fails where CI requires ``what``."""
    gone = Missing(what, reason, fixable)
    if gone.fixable and REQUIRED:
        pytest.fail(gone.message(), pytrace=False)
    pytest.skip(gone.message())


def module(name: str, what: str) -> object:
    """``importlib.import_module(name)``, or ``missing(what)`` when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        reason = f"cannot import {name}: {error}"
    missing(what, reason)


def check(item: pytest.Item) -> None:
    """Applies the item's ``needs`` marks (tests/conftest.py's setup hook)."""
    for mark in item.iter_markers(MARKER):
        gone = mark.args[0] if mark.args else None
        if gone is None:
            continue
        assert isinstance(gone, Missing), mark
        missing(gone.what, gone.reason, fixable=gone.fixable)
