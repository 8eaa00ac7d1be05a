"""What a release is made of: each distribution's version in one file, the server
pinned to the client of the same release, the license and the documentation's
address in both (docs/development.md#releases). tests/deploy builds the wheels."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from runstore.client import version as client_version
from runstore.server import version as server_version

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = {"runstore-client": "client", "runstore-server": "server"}
VERSION_MODULES = {"runstore-client": client_version, "runstore-server": server_version}


def project(name: str) -> dict[str, Any]:
    with (ROOT / DISTRIBUTIONS[name] / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_the_version_is_written_once_in_the_package(name: str) -> None:
    """hatchling reads the version from the module the code imports it from."""
    pyproject = project(name)
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    source = ROOT / DISTRIBUTIONS[name] / pyproject["tool"]["hatch"]["version"]["path"]
    module = VERSION_MODULES[name]
    assert module.__file__ is not None and Path(module.__file__).resolve() == source.resolve()
    # hatchling's default pattern: the one assignment of __version__, a plain string.
    (found,) = re.findall(r'(?m)^__version__ = "([^"]+)"$', source.read_text(encoding="utf-8"))
    assert found == module.__version__
    # A release is MAJOR.MINOR.PATCH; main between releases carries the next one's .dev0.
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev0)?", found), "MAJOR.MINOR.PATCH[.dev0]"


def test_the_server_requires_exactly_the_client_of_its_release() -> None:
    """runstore-server is released with the runstore-client it was tested with."""
    pins = [
        requirement
        for requirement in project("runstore-server")["project"]["dependencies"]
        if requirement.startswith("runstore-client")
    ]
    assert pins == [f"runstore-client[cli]=={client_version.__version__}"]


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_the_installed_metadata_is_the_version_source(name: str) -> None:
    """An install older than the version file (an editable one made before a
    bump) names the wrong version: `make install` reinstalls when the file changes."""
    assert metadata.version(name) == VERSION_MODULES[name].__version__


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_each_distribution_ships_the_repository_license(name: str) -> None:
    pyproject = project(name)["project"]
    assert pyproject["license"] == "Apache-2.0"
    assert pyproject["license-files"] == ["LICENSE"]
    # A link, so there is one license text (the wheels carry it: tests/deploy).
    shipped = ROOT / DISTRIBUTIONS[name] / "LICENSE"
    assert shipped.is_symlink() and shipped.resolve() == (ROOT / "LICENSE").resolve()
    # PEP 639: an SPDX license expression and a License :: classifier exclude each other.
    assert not [c for c in pyproject["classifiers"] if c.startswith("License ::")]


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_the_documentation_url_is_the_sites(name: str) -> None:
    (site_url,) = re.findall(
        r"(?m)^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    )
    assert project(name)["project"]["urls"]["Documentation"] == site_url
