"""deploy/compose/*.yaml against the Compose Specification's JSON schema, the
one the reference implementation (compose-go, which `docker compose` is built
on) embeds: its Go module, pinned, from the Go module proxy (checksummed by
the Go checksum database). Then what the schema cannot say: every reference
resolves, the image is this version's, and the PostgreSQL file runs
`runstore migrate` once before its two replicas."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from runstore.server.version import __version__

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose"
FILES = ("compose.yaml", "compose.postgres.yaml")
COMPOSE_GO = "github.com/compose-spec/compose-go/v2@v2.17.0"
GO_TOOLCHAIN = "go1.27.3"
"""The project's Go (Makefile); compose-go 2.17 needs Go 1.26.11 or later."""


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must check the compose files: no go command for the schema")
        pytest.skip("no go command (the schema comes from the Go module proxy)")
    done = subprocess.run(
        [go, "mod", "download", "-json", COMPOSE_GO],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # outside any module
        env={**os.environ, "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", GO_TOOLCHAIN)},
    )
    downloaded = json.loads(done.stdout or "{}")
    assert done.returncode == 0 and "Dir" in downloaded, done.stdout + done.stderr
    loaded: dict[str, Any] = json.loads(
        (Path(downloaded["Dir"]) / "schema" / "compose-spec.json").read_text()
    )
    return loaded


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((COMPOSE / name).read_text())
    return loaded


def problems(schema: dict[str, Any], document: dict[str, Any]) -> list[str]:
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


@pytest.mark.parametrize("name", FILES)
def test_valid_compose_file(schema: dict[str, Any], name: str) -> None:
    document = load(name)
    assert problems(schema, document) == []

    # References the schema leaves to the implementation.
    services = document["services"]
    for service in services.values():
        for dependency in service.get("depends_on", {}):
            assert dependency in services
        for secret in service.get("secrets", []):
            assert secret in document.get("secrets", {})
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith(("/", ".")) or source in document.get("volumes", {})

    # Every runstore container: this version's image, as read-only as the image allows.
    for service in services.values():
        if "runstore" in service["image"]:
            assert service["image"] == f"${{RUNSTORE_IMAGE:-localhost/runstore:{__version__}}}"
            assert service["read_only"] is True
            assert service["tmpfs"] == ["/tmp"]
            assert service["cap_drop"] == ["ALL"]
            assert "user" not in service  # the image's own, 10001


def test_postgres_migrates_once_before_two_replicas() -> None:
    services = load("compose.postgres.yaml")["services"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["runstore"]["deploy"]["replicas"] == 2
    assert services["runstore"]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"
    }
    for name in ("migrate", "runstore"):
        environment = services[name]["environment"]
        assert environment["RUNSTORE_DATABASE_URL_FILE"] == "/run/secrets/database-url"
        assert "RUNSTORE_DATABASE_URL" not in environment  # no password in the environment


def test_the_schema_rejects_a_broken_file(schema: dict[str, Any]) -> None:
    """The check has teeth: the same file with a mistake an operator could make."""
    broken = copy.deepcopy(load("compose.postgres.yaml"))
    broken["services"]["runstore"]["depends_on"]["migrate"]["condition"] = "service_done"
    broken["services"]["runstore"]["restart_policy"] = "always"
    found = problems(schema, broken)
    assert any("service_done" in problem for problem in found), found
    assert any("restart_policy" in problem for problem in found), found


def test_every_image_tag_is_this_version() -> None:
    """The page and the deploy files name the image of this version, so a
    release that forgets one fails here."""
    tag = re.compile(r"runstore[:-](\d+\.\d+\.\d+(?:\.dev\d+)?)")
    places = [ROOT / "docs" / "deploy.md", *sorted((ROOT / "deploy").rglob("*.yaml"))]
    found = {(path.name, version) for path in places for version in tag.findall(path.read_text())}
    assert found, "no image tag found"
    assert {version for _, version in found} == {__version__}, sorted(found)
