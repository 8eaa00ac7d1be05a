"""``runstore.server`` has no import cycle, at module level or anywhere else.

Every ``import`` statement of every module counts, wherever it is written:
inside a function, or under ``if TYPE_CHECKING:``. A cycle hidden in either is
still two modules that cannot be read, tested or moved apart.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import runstore.server

PACKAGE = "runstore.server"


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (rooted at ``root``) by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in its text."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            targets.add(origin)
            # ``from package import module`` imports that module.
            targets.update(f"{origin}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in known and target != module}


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    known = modules(root, package)
    return {module: imported(module, path, known) for module, path in known.items()}


def test_runstore_server_has_no_import_cycle() -> None:
    root = Path(runstore.server.__file__).parent
    graph = import_graph(root, PACKAGE)
    assert len(graph) > 50, "the walk found the package's modules"
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        pytest.fail("import cycle: " + " -> ".join(error.args[1]))


def test_a_cycle_behind_type_checking_or_a_local_import_is_found(tmp_path: Path) -> None:
    """The walk sees the imports a module-level scan would miss."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from . import c\n")
    (package / "c.py").write_text("from .a import x\n")
    graph = import_graph(package, "pkg")
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg", "pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()
