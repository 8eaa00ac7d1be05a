"""``runstore namespaces`` and ``--namespace`` as an operator runs them: the
real program as a process against a real ``runstore serve`` with an auth file
(docs/namespaces.md)."""

from __future__ import annotations

import json
from pathlib import Path

from runstore.contract.auth_file import add_token
from tests.cli.test_operator_cli import Finished, shell
from tests.processes import server_process


async def test_an_operator_manages_namespaces_and_teams_act_in_theirs(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    operator = tmp_path / "operator.token"
    added = await shell(
        "auth", "add-token", "--auth-file", str(auth_file), "--name", "operator",
        "--role", "admin", "--namespace", "*", "--token-out", str(operator),
    )  # fmt: skip
    assert added.code == 0, added.err
    assert "namespaces *" in added.err
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with server_process("--database-url", database, "--auth-file", str(auth_file)) as server:
        as_operator = {"RUNSTORE_TARGET": server.target, "RUNSTORE_TOKEN": operator.read_text()}

        async def namespaces(*argv: str) -> Finished:
            return await shell("namespaces", *argv, env=as_operator)

        created = await namespaces(
            "create", "team-a", "--description", "Team A", "--retain-ended-sessions", "30d",
            "--quota-stored-bytes", "1000000", "--json",
        )  # fmt: skip
        assert created.code == 0, created.err
        shown = json.loads(created.out)
        assert (shown["name"], shown["state"]) == ("team-a", "active")
        assert shown["settings"]["retain_ended_sessions_s"] == 30 * 86400
        assert shown["settings"]["quota_stored_bytes"] == 1000000
        assert (await namespaces("create", "team-b")).code == 0
        again = await namespaces("create", "team-a")
        assert again.code == 1 and "NAMESPACE_ALREADY_EXISTS" in again.err
        bad = await namespaces("create", "Team_C")
        assert bad.code == 1 and "CONTRACT_VALIDATION" in bad.err and "namespace.name" in bad.err

        listed = await namespaces("list", "--page-size", "1", "--all", "--json")
        assert listed.code == 0, listed.err
        names = [json.loads(line)["name"] for line in listed.out.splitlines()]
        assert names == ["default", "team-a", "team-b"]
        table = await namespaces("list")
        assert table.out.split()[:4] == ["NAME", "STATE", "CREATED", "DESCRIPTION"]

        updated = await namespaces(
            "update", "team-a", "--quota-watch-streams", "5", "--clear", "description", "--json"
        )
        assert updated.code == 0, updated.err
        settings = json.loads(updated.out)["settings"]
        assert (settings["quota_watch_streams"], settings["description"]) == (5, "")
        assert settings["quota_stored_bytes"] == 1000000  # untouched: not in the mask
        show = await namespaces("show", "team-a")
        assert show.code == 0, show.err
        # Each setting under its flag's name and as the flag takes it: a
        # duration as a duration, a count as a whole number.
        fields = dict(line.split(None, 1) for line in show.out.splitlines() if line.split())
        fields = {name: value.strip() for name, value in fields.items()}
        assert fields["retain-ended-sessions"] == "30d"
        assert fields["retain-sessionless-runs"] == "-"
        assert fields["quota-stored-bytes"] == "1000000"
        assert fields["quota-watch-streams"] == "5"

        # A host token bound to team-a acts there without --namespace, and is
        # refused elsewhere; the operator (bound to "*") must say which.
        host = tmp_path / "host.token"
        host.write_text(add_token(auth_file, "team-a-host", "host", namespaces=["team-a"]))
        await server.reload(2)
        as_host = {"RUNSTORE_TARGET": server.target, "RUNSTORE_TOKEN": host.read_text()}
        assert (await shell("sessions", "list", env=as_host)).code == 0
        elsewhere = await shell("sessions", "list", env={**as_host, "RUNSTORE_NAMESPACE": "team-b"})
        assert elsewhere.code == 1 and "PERMISSION_DENIED" in elsewhere.err
        unnamed = await shell("sessions", "list", env=as_operator)
        assert unnamed.code == 1 and "NAMESPACE_REQUIRED" in unnamed.err
        named = await shell("sessions", "list", "--namespace", "team-b", env=as_operator)
        assert named.code == 0, named.err
        malformed = await shell("sessions", "list", "--namespace", "B!", env=as_operator)
        assert malformed.code == 2 and "--namespace must match" in malformed.err

        refused = await namespaces("delete", "default", "--yes")
        assert refused.code == 1 and "NAMESPACE_PROTECTED" in refused.err
        deleted = await namespaces("delete", "team-b", "--yes")
        assert deleted.code == 0, deleted.err
        assert "namespace team-b is deleting" in deleted.out
        gone = await shell("sessions", "list", "--namespace", "team-b", env=as_operator)
        assert gone.code == 1 and "NAMESPACE_NOT_FOUND" in gone.err


async def test_update_help_says_the_quotas_are_enforced() -> None:
    shown = await shell("namespaces", "update", "--help")
    assert shown.code == 0, shown.err
    assert "stored only" not in shown.out
    for flag in ("--quota-writes-per-s", "--quota-watch-streams", "--quota-stored-bytes"):
        assert flag in shown.out
    assert " ".join(shown.out.split()).count("refused QUOTA_EXCEEDED") == 4
