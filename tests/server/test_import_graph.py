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


SERVER_ROOT = Path(__file__).resolve().parents[2] / "server"
"""runstore-server's source tree: the package, its migrations and anything else."""

CLIENT_CONTRACT: frozenset[str] = frozenset({"runstore.contract", "runstore.v1"})
"""What the server may import from runstore-client: the contract modules it
shares with the client (the vocabulary, the errors, the wire codecs, the
transcript payload) and the generated protos."""

PLUGIN_INTERFACE: dict[str, frozenset[str]] = {
    "runstore.cli.plugins": frozenset({"runstore/server/cli.py"}),
    "runstore.cli.program": frozenset({"runstore/server/__main__.py"}),
}
"""The ``runstore`` program the server's commands plug into (entry points of
``runstore.commands``), each in the one module that plugs in."""


def client_imports(path: Path) -> set[str]:
    """Every ``runstore.*`` module outside runstore.server that ``path`` imports,
    wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
            if node.module == "runstore":
                names = [f"runstore.{alias.name}" for alias in node.names]
        found.update(
            name
            for name in names
            if (name == "runstore" or name.startswith("runstore."))
            and not (name == "runstore.server" or name.startswith("runstore.server."))
        )
    return found


def allowed(module: str, relative: str) -> bool:
    if any(module == ok or module.startswith(ok + ".") for ok in CLIENT_CONTRACT):
        return True
    return relative in PLUGIN_INTERFACE.get(module, frozenset())


def test_the_server_imports_only_the_contract_modules_of_the_client_package() -> None:
    """The console included: the client's adapters (``runstore.client``) are the
    client's own, never a dependency of the server."""
    sources = sorted(SERVER_ROOT.rglob("*.py"))
    assert len(sources) > 50, "the walk found the server's sources"
    wrong = {
        f"{path.relative_to(SERVER_ROOT)}: {module}"
        for path in sources
        for module in client_imports(path)
        if not allowed(module, path.relative_to(SERVER_ROOT).as_posix())
    }
    assert not wrong, sorted(wrong)


@pytest.mark.parametrize(
    ("text", "imports"),
    [
        ("from runstore.client.transcript import codec\n", {"runstore.client.transcript"}),
        ("def f():\n    import runstore.client\n", {"runstore.client"}),
        ("from runstore import client\n", {"runstore.client"}),
        (
            "from runstore.contract import errors\nimport runstore.server.app\n",
            {"runstore.contract"},
        ),
    ],
)
def test_the_scan_finds_client_imports_anywhere(
    tmp_path: Path, text: str, imports: set[str]
) -> None:
    source = tmp_path / "module.py"
    source.write_text(text)
    assert client_imports(source) == imports
    assert allowed("runstore.contract.errors", "runstore/server/x.py")
    assert not allowed("runstore.client.transcript", "runstore/server/console/render.py")
    assert not allowed("runstore.cli.plugins", "runstore/server/app.py")
