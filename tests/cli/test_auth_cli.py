"""``runstore auth list | add-token | add-cert | rotate | remove`` as an operator
runs them: the real program as a process, and a real ``runstore serve`` with
mTLS that loads each change on SIGHUP (docs/security.md#managing-principals)."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runstore.contract.auth_file import (
    AuthFileError,
    add_certificates,
    add_token,
    hash_token,
    read_auth_file,
    remove_principal,
    rotate_token,
)
from tests.certs import Authority
from tests.cli.test_operator_cli import Finished, shell
from tests.processes import ServerProcess, server_process
from tests.support import unique


def _auth(*argv: str, auth_file: Path) -> list[str]:
    action, *rest = argv
    return ["auth", action, "--auth-file", str(auth_file), *rest]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@dataclass
class Secured:
    """A ``runstore serve`` with mTLS and an auth file, for the module's tests:
    each adds principals of its own and reloads."""

    server: ServerProcess
    auth_file: Path
    directory: Path
    ca: Authority
    anyone: tuple[Path, Path]
    """A client certificate no principal maps (its CN is ``anyone``)."""

    def as_client(self, pair: tuple[Path, Path]) -> dict[str, str]:
        return {
            "RUNSTORE_TLS_CA": str(self.directory / "ca.crt"),
            "RUNSTORE_TLS_CERT": str(pair[0]),
            "RUNSTORE_TLS_KEY": str(pair[1]),
        }

    async def sessions(self, pair: tuple[Path, Path], *token: str) -> Finished:
        """``runstore sessions list`` with the client certificate ``pair``."""
        target = ("--target", self.server.target)
        return await shell("sessions", "list", *target, *token, env=self.as_client(pair))

    async def auth(self, *argv: str) -> Finished:
        return await shell(*_auth(*argv, auth_file=self.auth_file))

    async def reload(self) -> None:
        """SIGHUP, waiting until the server has read every principal of the file."""
        await self.server.reload(len(read_auth_file(self.auth_file)))

    def certificate(self, common_name: str) -> tuple[Path, Path]:
        return self.ca.client(common_name).write(self.directory, common_name)


@pytest.fixture(scope="module")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    directory = tmp_path_factory.mktemp("auth-cli")
    auth_file = directory / "auth.toml"
    add_token(auth_file, "first", "admin")  # the server needs one principal to start
    ca = Authority()
    cert, key = ca.server().write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    anyone = ca.client("anyone").write(directory, "anyone")
    async with server_process(
        "--database-url", f"sqlite:///{directory / 'runstore.db'}",
        "--auth-file", str(auth_file),
        "--tls-cert", str(cert), "--tls-key", str(key),
        "--tls-client-ca", str(directory / "ca.crt"),
    ) as server:  # fmt: skip
        yield Secured(server, auth_file, directory, ca, anyone)


async def test_add_token_writes_the_token_to_a_private_file_and_it_authenticates(
    secured: Secured,
) -> None:
    name, token = unique("ops"), secured.directory / f"{unique('ops')}.token"
    added = await secured.auth(
        "add-token", "--name", name, "--role", "admin", "--token-out", str(token)
    )
    assert added.code == 0, added.err
    assert added.out == ""  # the token went to the file, not the terminal
    assert f"the token is in {token} (mode 0600)" in added.err
    assert _mode(token) == 0o600 and _mode(secured.auth_file) == 0o600
    await secured.reload()
    by_token = await secured.sessions(secured.anyone, "--token-file", str(token))
    assert by_token.code == 0, by_token.err


async def test_add_cert_maps_a_certificates_common_name_to_a_principal(secured: Secured) -> None:
    common_name = unique("dashboards")
    reader = secured.certificate(common_name)
    unmapped = await secured.sessions(reader)
    assert unmapped.code == 1 and "UNAUTHENTICATED" in unmapped.err
    mapped = await secured.auth(
        "add-cert", "--name", unique("dashboards"), "--role", "reader", "--identity", common_name
    )
    assert mapped.code == 0, mapped.err
    await secured.reload()
    assert (await secured.sessions(reader)).code == 0


async def test_rotate_stops_the_old_token_and_starts_the_new_one(secured: Secured) -> None:
    name = unique("rotated")
    old_file, new_file = secured.directory / f"{name}.token", secured.directory / f"{name}-2.token"
    added = await secured.auth(
        "add-token", "--name", name, "--role", "host", "--token-out", str(old_file)
    )
    assert added.code == 0, added.err
    await secured.reload()
    assert (await secured.sessions(secured.anyone, "--token-file", str(old_file))).code == 0
    rotated = await secured.auth("rotate", "--name", name, "--token-out", str(new_file))
    assert rotated.code == 0, rotated.err
    await secured.reload()
    refused = await secured.sessions(secured.anyone, "--token-file", str(old_file))
    assert refused.code == 1 and "UNAUTHENTICATED" in refused.err
    assert (await secured.sessions(secured.anyone, "--token-file", str(new_file))).code == 0


async def test_list_shows_names_roles_and_kinds_never_a_token_or_hash(secured: Secured) -> None:
    by_token, by_cert, common_name = unique("listed"), unique("listed-cert"), unique("cn")
    token_file = secured.directory / f"{by_token}.token"
    assert (
        await secured.auth(
            "add-token", "--name", by_token, "--role", "admin", "--token-out", str(token_file)
        )
    ).code == 0
    assert (
        await secured.auth(
            "add-cert", "--name", by_cert, "--role", "reader", "--identity", common_name
        )
    ).code == 0
    listed = await secured.auth("list")
    assert listed.code == 0, listed.err
    header, *rows = listed.out.splitlines()
    assert header.split() == ["NAME", "ROLE", "KIND", "NAMESPACES", "CERTIFICATES"]
    ours = [row.split() for row in rows if row.split()[0] in (by_token, by_cert)]
    assert ours == [
        [by_token, "admin", "token", "default", "-"],
        [by_cert, "reader", "cert", "default", common_name],
    ]
    token = token_file.read_text().strip()
    for secret in (token, hash_token(token)):
        assert secret not in listed.out + listed.err


async def test_remove_refuses_the_principals_certificate_again(secured: Secured) -> None:
    name, common_name = unique("removed"), unique("removed-cn")
    pair = secured.certificate(common_name)
    assert (
        await secured.auth(
            "add-cert", "--name", name, "--role", "reader", "--identity", common_name
        )
    ).code == 0
    await secured.reload()
    assert (await secured.sessions(pair)).code == 0
    removed = await secured.auth("remove", "--name", name)
    assert removed.code == 0, removed.err
    await secured.reload()
    gone = await secured.sessions(pair)
    assert gone.code == 1 and "UNAUTHENTICATED" in gone.err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rotate", "--name", "nobody"], "no principal named 'nobody'"),
        (["remove", "--name", "nobody"], "no principal named 'nobody'"),
        (["add-token", "--name", "ops", "--role", "admin"], "'ops' already exists"),
        (["add-token", "--name", "x", "--role", "root"], "--role must be one of admin, host"),
        (["add-cert", "--name", "x", "--role", "root", "--identity", "a"], "--role must be"),
        (["add-cert", "--name", "new", "--identity", "a"], "give --role to add one"),
        (["add-cert", "--name", "ops", "--role", "reader", "--identity", "a"], "has role admin"),
        (["add-cert", "--name", "c", "--role", "reader", "--identity", "ops-cn"], "already mapped"),
        (["add-cert", "--name", "c", "--role", "reader", "--identity", "a b"], "without spaces"),
        (["rotate", "--name", "certified"], "has no token to rotate"),
        (
            ["add-token", "--name", "x", "--role", "host", "--namespace", "Team_A"],
            "'Team_A' is not a namespace name",
        ),
        (
            ["add-token", "--name", "x", "--role", "host", "--namespace", "*", "--namespace", "a"],
            '"*" (every namespace) must be alone',
        ),
        (
            ["add-cert", "--name", "certified", "--identity", "z", "--namespace", "team-a"],
            "edit its namespaces by hand",
        ),
    ],
)
async def test_mistakes_are_one_line_and_exit_2_and_leave_the_file_alone(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    auth_file = tmp_path / "auth.toml"
    add_token(auth_file, "ops", "admin")
    add_certificates(auth_file, "certified", "worker", ["ops-cn"])
    before = auth_file.read_bytes()
    result = await shell(*_auth(*argv, auth_file=auth_file))
    assert result.code == 2, result
    assert says in result.one_line_error()
    assert auth_file.read_bytes() == before


async def test_token_out_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    token_file = tmp_path / "ops.token"
    token_file.write_text("keep me\n")
    refused = await shell(
        *_auth("add-token", "--name", "ops", "--role", "admin", auth_file=auth_file),
        "--token-out",
        str(token_file),
    )
    assert refused.code == 2
    assert "exists; pass --force to overwrite it" in refused.one_line_error()
    assert token_file.read_text() == "keep me\n" and not auth_file.exists()
    forced = await shell(
        *_auth("add-token", "--name", "ops", "--role", "admin", auth_file=auth_file),
        "--token-out",
        str(token_file),
        "--force",
    )
    assert forced.code == 0, forced.err
    token = token_file.read_text().strip()
    assert _mode(token_file) == 0o600
    assert read_auth_file(auth_file)[0].token_digest.hex() == hash_token(token)
    # A failed change leaves an existing --token-out file as it was.
    duplicate = await shell(
        *_auth("add-token", "--name", "ops", "--role", "admin", auth_file=auth_file),
        "--token-out",
        str(token_file),
        "--force",
    )
    assert duplicate.code == 2 and token_file.read_text().strip() == token
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary left


async def test_writes_are_atomic_keep_the_mode_and_the_comments_elsewhere(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(
        "# managed by ops: ask #infra before editing\n\n"
        '[[principal]]\nname = "a"\nrole = "reader"\n'
        'token_sha256 = "' + hash_token("t-a") + '"\n\n'
        "# the chat host\n"
        '[[principal]]\nname = "b"\nrole = "host"\n'
        'token_sha256 = "' + hash_token("t-b") + '"\n'
    )
    os.chmod(auth_file, 0o640)
    inode = auth_file.stat().st_ino
    rotated = await shell(*_auth("rotate", "--name", "b", auth_file=auth_file))
    assert rotated.code == 0, rotated.err
    new = rotated.out.strip()
    assert "shown only now" in rotated.err and new not in rotated.err
    assert _mode(auth_file) == 0o640
    assert auth_file.stat().st_ino != inode  # replaced by rename, never rewritten in place
    text = auth_file.read_text()
    assert text.startswith("# managed by ops: ask #infra before editing\n")
    assert hash_token(new) in text and hash_token("t-b") not in text
    removed = await shell(*_auth("remove", "--name", "a", auth_file=auth_file))
    assert removed.code == 0, removed.err
    assert [p.name for p in read_auth_file(auth_file)] == ["b"]
    assert auth_file.read_text().startswith("# managed by ops")
    assert _mode(auth_file) == 0o640
    as_json = await shell(*_auth("list", auth_file=auth_file), "--json")
    assert (
        as_json.out.strip() == '{"name": "b", "role": "host", "kind": "token", '
        '"namespaces": ["default"], "certificates": []}'
    )


def test_an_edit_keeps_the_comments_inside_the_edited_table(tmp_path: Path) -> None:
    """The table a command rewrites keeps its own comments and untouched lines;
    only the changed value's line changes."""
    auth_file = tmp_path / "auth.toml"
    header = "# managed by ops\n\n"
    table_b = (
        "# the chat host, rotated monthly\n"
        "[[principal]]\n"
        'name = "b"  # owned by the chat team\n'
        "# host: starts and ends runs\n"
        'role = "host"\n'
        'token_sha256 = "{digest}"  # see the runbook\n'
        'certificates = ["chat.internal"]\n'
    )
    table_a = (
        '[[principal]]\nname = "a"\nrole = "reader"  # dashboards\ntoken_sha256 = "{digest}"\n'
    )
    auth_file.write_text(
        header
        + table_a.format(digest=hash_token("t-a"))
        + "\n"
        + table_b.format(digest=hash_token("t-b"))
    )
    rotate_token(auth_file, "b", "t-b2")
    assert auth_file.read_text() == (
        header
        + table_a.format(digest=hash_token("t-a"))
        + "\n"
        + table_b.format(digest=hash_token("t-b2"))
    )
    add_certificates(auth_file, "b", None, ["chat-2.internal"])
    text = auth_file.read_text()
    assert "# host: starts and ends runs\n" in text and "# owned by the chat team" in text
    assert "# see the runbook" in text
    assert [p.certificates for p in read_auth_file(auth_file) if p.name == "b"] == [
        ("chat.internal", "chat-2.internal")
    ]
    remove_principal(auth_file, "a")
    text = auth_file.read_text()
    assert text.startswith(header) and "# dashboards" not in text
    assert "# host: starts and ends runs\n" in text
    assert [p.name for p in read_auth_file(auth_file)] == ["b"]


def test_a_principal_written_inline_is_left_for_a_human(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    before = f'principal = [{{name = "a", role = "reader", token_sha256 = "{hash_token("t")}"}}]\n'
    auth_file.write_text(before)
    with pytest.raises(AuthFileError, match=r"\[\[principal\]\] tables; edit it by hand"):
        rotate_token(auth_file, "a")
    assert auth_file.read_text() == before
