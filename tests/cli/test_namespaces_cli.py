"""``runstore namespaces`` and ``--namespace`` as an operator runs them: the
real program as a process against a real ``runstore serve`` with an auth file
(docs/namespaces.md). One server for the module; each test acts on
namespaces of its own."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runstore.contract.auth_file import add_token
from tests.cli.test_operator_cli import Finished, shell
from tests.processes import ServerProcess, server_process
from tests.support import unique


@dataclass
class Operated:
    server: ServerProcess
    auth_file: Path
    directory: Path
    as_operator: dict[str, str]
    """The environment of the operator, an admin bound to every namespace ("*")."""

    async def namespaces(self, *argv: str) -> Finished:
        return await shell("namespaces", *argv, env=self.as_operator)


@pytest.fixture(scope="module")
async def operated(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Operated]:
    directory = tmp_path_factory.mktemp("namespaces-cli")
    auth_file = directory / "auth.toml"
    operator = directory / "operator.token"
    added = await shell(
        "auth", "add-token", "--auth-file", str(auth_file), "--name", "operator",
        "--role", "admin", "--namespace", "*", "--token-out", str(operator),
    )  # fmt: skip
    assert added.code == 0, added.err
    assert "namespaces *" in added.err
    database = f"sqlite:///{directory / 'runstore.db'}"
    async with server_process("--database-url", database, "--auth-file", str(auth_file)) as server:
        as_operator = {"RUNSTORE_TARGET": server.target, "RUNSTORE_TOKEN": operator.read_text()}
        yield Operated(server, auth_file, directory, as_operator)


def _name(prefix: str) -> str:
    """A namespace name no other test of the module uses."""
    return unique(prefix)


async def test_create_shows_the_settings_and_refuses_a_taken_or_malformed_name(
    operated: Operated,
) -> None:
    name = _name("team-a")
    created = await operated.namespaces(
        "create", name, "--description", "Team A", "--retain-ended-sessions", "30d",
        "--quota-stored-bytes", "1000000", "--json",
    )  # fmt: skip
    assert created.code == 0, created.err
    shown = json.loads(created.out)
    assert (shown["name"], shown["state"]) == (name, "active")
    assert shown["settings"]["retain_ended_sessions_s"] == 30 * 86400
    assert shown["settings"]["quota_stored_bytes"] == 1000000
    again = await operated.namespaces("create", name)
    assert again.code == 1 and "NAMESPACE_ALREADY_EXISTS" in again.err
    bad = await operated.namespaces("create", "Team_C")
    assert bad.code == 1 and "CONTRACT_VALIDATION" in bad.err and "namespace.name" in bad.err


async def test_list_pages_through_every_namespace_in_name_order(operated: Operated) -> None:
    names = sorted(_name(f"listed-{index}") for index in range(2))
    for name in names:
        assert (await operated.namespaces("create", name)).code == 0
    listed = await operated.namespaces("list", "--page-size", "1", "--all", "--json")
    assert listed.code == 0, listed.err
    every = [json.loads(line)["name"] for line in listed.out.splitlines()]
    assert every == sorted(set(every)) and every[0] == "default"  # one page each, none twice
    assert set(names) <= set(every)
    table = await operated.namespaces("list")
    assert table.out.split()[:4] == ["NAME", "STATE", "CREATED", "DESCRIPTION"]


async def test_update_changes_only_the_named_settings_and_show_prints_them_as_flags(
    operated: Operated,
) -> None:
    name = _name("updated")
    created = await operated.namespaces(
        "create", name, "--description", "before", "--retain-ended-sessions", "30d",
        "--quota-stored-bytes", "1000000",
    )  # fmt: skip
    assert created.code == 0, created.err
    updated = await operated.namespaces(
        "update", name, "--quota-watch-streams", "5", "--clear", "description", "--json"
    )
    assert updated.code == 0, updated.err
    settings = json.loads(updated.out)["settings"]
    assert (settings["quota_watch_streams"], settings["description"]) == (5, "")
    assert settings["quota_stored_bytes"] == 1000000  # untouched: not in the mask
    show = await operated.namespaces("show", name)
    assert show.code == 0, show.err
    # Each setting under its flag's name and as the flag takes it: a
    # duration as a duration, a count as a whole number.
    fields = dict(line.split(None, 1) for line in show.out.splitlines() if line.split())
    fields = {field: value.strip() for field, value in fields.items()}
    assert fields["retain-ended-sessions"] == "30d"
    assert fields["retain-sessionless-runs"] == "-"
    assert fields["quota-stored-bytes"] == "1000000"
    assert fields["quota-watch-streams"] == "5"


async def test_a_host_acts_in_its_one_namespace_and_the_operator_names_one(
    operated: Operated,
) -> None:
    """A host token bound to one namespace acts there without --namespace, and
    is refused elsewhere; the operator (bound to "*") must say which."""
    home, other = _name("home"), _name("other")
    for name in (home, other):
        assert (await operated.namespaces("create", name)).code == 0
    host = operated.directory / "host.token"
    host.write_text(add_token(operated.auth_file, "host", "host", namespaces=[home]))
    await operated.server.reload(2)
    as_host = {**operated.as_operator, "RUNSTORE_TOKEN": host.read_text()}
    assert (await shell("sessions", "list", env=as_host)).code == 0
    elsewhere = await shell("sessions", "list", env={**as_host, "RUNSTORE_NAMESPACE": other})
    assert elsewhere.code == 1 and "PERMISSION_DENIED" in elsewhere.err
    unnamed = await shell("sessions", "list", env=operated.as_operator)
    assert unnamed.code == 1 and "NAMESPACE_REQUIRED" in unnamed.err
    named = await shell("sessions", "list", "--namespace", other, env=operated.as_operator)
    assert named.code == 0, named.err
    malformed = await shell("sessions", "list", "--namespace", "B!", env=operated.as_operator)
    assert malformed.code == 2 and "--namespace must match" in malformed.err


async def test_delete_refuses_default_and_ends_a_namespace(operated: Operated) -> None:
    name = _name("deleted")
    assert (await operated.namespaces("create", name)).code == 0
    refused = await operated.namespaces("delete", "default", "--yes")
    assert refused.code == 1 and "NAMESPACE_PROTECTED" in refused.err
    deleted = await operated.namespaces("delete", name, "--yes")
    assert deleted.code == 0, deleted.err
    assert f"namespace {name} is deleting" in deleted.out
    gone = await shell("sessions", "list", "--namespace", name, env=operated.as_operator)
    assert gone.code == 1 and "NAMESPACE_NOT_FOUND" in gone.err


async def test_update_help_says_the_quotas_are_enforced() -> None:
    shown = await shell("namespaces", "update", "--help")
    assert shown.code == 0, shown.err
    assert "stored only" not in shown.out
    for flag in ("--quota-writes-per-s", "--quota-watch-streams", "--quota-stored-bytes"):
        assert flag in shown.out
    assert " ".join(shown.out.split()).count("refused QUOTA_EXCEEDED") == 4
