"""The Python API reference (docs/clients/python-api.md) covers the client's
public surface: every name of ``runstore.client.__all__`` has a docstring (as
griffe reads it, which is what mkdocstrings renders) and its ``:::`` entry on
the page, the page names nothing else, and every public non-module name of
the package is exported."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import griffe

import runstore.client

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "clients" / "python-api.md"


def test_every_exported_name_has_a_docstring() -> None:
    package = griffe.load("runstore.client", search_paths=[ROOT / "client"], resolve_aliases=True)
    undocumented = [
        name
        for name in runstore.client.__all__
        if not (package[name].docstring and package[name].docstring.value.strip())
    ]
    assert undocumented == []


def test_the_reference_page_has_every_exported_name_and_no_other() -> None:
    entries = re.findall(r"^::: runstore\.client\.(\S+)$", PAGE.read_text(), re.MULTILINE)
    assert sorted(entries) == sorted(runstore.client.__all__)
    assert len(entries) == len(set(entries))


def test_every_public_name_is_exported() -> None:
    public = {
        name
        for name, value in vars(runstore.client).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public - set(runstore.client.__all__) == set()
    assert {"RunFailure", "ListPage", "RetryCallback"} <= set(runstore.client.__all__)
