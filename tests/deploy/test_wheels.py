"""What the wheels a release uploads carry: the version from its one file, the
license text, the SPDX license, the classifiers and the project's addresses."""

from __future__ import annotations

import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from runstore.client import version as client_version
from runstore.server import version as server_version
from tests.deploy.conftest import ROOT

pytestmark = pytest.mark.slow

VERSIONS = {
    "runstore-client": client_version.__version__,
    "runstore-server": server_version.__version__,
}


@pytest.mark.parametrize("name", VERSIONS)
def test_each_wheel_carries_its_version_license_and_addresses(
    name: str, current_wheels: dict[str, Path]
) -> None:
    wheel = current_wheels[name]
    info = f"{name.replace('-', '_')}-{VERSIONS[name]}.dist-info"
    assert wheel.name == f"{name.replace('-', '_')}-{VERSIONS[name]}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        fields = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert fields["Version"] == VERSIONS[name]
    assert fields["License-Expression"] == "Apache-2.0"
    assert fields.get_all("License-File") == ["LICENSE"]
    classifiers = set(fields.get_all("Classifier") or ())
    assert {
        "Framework :: AsyncIO",
        "Topic :: Database",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Typing :: Typed",
    } <= classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    urls = dict(url.split(", ", 1) for url in fields.get_all("Project-URL") or ())
    assert urls["Documentation"] == "https://runstore.github.io/runstore/"
    if name == "runstore-server":
        assert f"runstore-client[cli]=={client_version.__version__}" in fields.get_all(
            "Requires-Dist"
        )
