"""The auth file: what parses, what is refused and why, and ``runstore auth add-token``."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import grpc
import pytest

from runstore.cli import program
from runstore.contract.auth_file import AuthFileError, add_token, hash_token
from runstore.server.auth import Security, SecurityError, is_loopback
from runstore.server.auth.principals import PrincipalsFile, parse_principals
from runstore.server.config import ServerConfig
from runstore.v1 import session_admin_pb2 as sa
from tests.secured import Entry, bearer, channel_with_token, running_server, write_auth_file
from tests.support import Store, now_ms, ts

HASH = hash_token("a-token")


_HOST = f'[[principal]]\nname = "x"\nrole = "host"\ntoken_sha256 = "{HASH}"\n'


def test_a_principal_is_bound_to_its_namespaces_or_to_default() -> None:
    principals = parse_principals(
        f"""
        [[principal]]
        name = "team-a-host"
        role = "host"
        token_sha256 = "{HASH}"
        namespaces = ["team-a", "team-b"]

        [[principal]]
        name = "operator"
        role = "admin"
        certificates = ["operator"]
        namespaces = ["*"]

        [[principal]]
        name = "old"
        role = "worker"
        certificates = ["old"]
        """
    )
    bound = {principal.name: principal.namespaces for principal in principals}
    assert bound == {
        "team-a-host": ("team-a", "team-b"),
        "operator": ("*",),
        "old": ("default",),
    }
    by_name = {principal.name: principal for principal in principals}
    may_act = {
        name: {ns for ns in ("default", "team-a", "team-b", "team-c", "*") if p.bound_to(ns)}
        for name, p in by_name.items()
    }
    assert may_act == {
        "team-a-host": {"team-a", "team-b"},
        "operator": {"default", "team-a", "team-b", "team-c", "*"},  # "*": bound to every one
        "old": {"default"},
    }


def test_a_principal_is_found_by_its_token_or_its_certificate() -> None:
    principals = parse_principals(
        f"""
        [[principal]]
        name = "host"
        role = "host"
        token_sha256 = "{HASH.upper()}"

        [[principal]]
        name = "worker"
        role = "worker"
        certificates = ["spiffe://x/worker", "worker.example"]
        """
    )
    assert len(principals) == 2
    host = principals.by_token("a-token")
    assert host is not None and (host.name, host.role) == ("host", "host")
    assert principals.by_token("a-token ") is None
    assert principals.by_token("") is None
    worker = principals.by_certificate(["unknown", "worker.example"])
    assert worker is not None and worker.name == "worker"
    assert principals.by_certificate(["CN=worker"]) is None


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('[[principal]]\nname = "x"\nrole = "x', "not valid TOML"),
        ('[[principal]]\nname = "x"\nrole = "root"\ntoken_sha256 = "' + HASH + '"', "'role'"),
        ('[[principal]]\nrole = "host"\ntoken_sha256 = "' + HASH + '"', "'name'"),
        ('[[principal]]\nname = "x"\nrole = "host"\ntoken_sha256 = "abc"', "64 hex digits"),
        ('[[principal]]\nname = "x"\nrole = "host"\ntoken = "plain"', "never the token"),
        ('[[principal]]\nname = "x"\nrole = "host"', "needs 'token_sha256' or 'certificates'"),
        ('[[principal]]\nname = "x"\nrole = "host"\ncertificate = ["a"]', "unknown key"),
        ("principals = []", "unknown top-level key"),
        (f'{_HOST}namespaces = "team-a"', "'namespaces' must be a non-empty list"),
        (f"{_HOST}namespaces = []", "'namespaces' must be a non-empty list"),
        (f'{_HOST}namespaces = ["Team_A"]', "'Team_A' is not a namespace name"),
        (f'{_HOST}namespaces = ["*", "team-a"]', "must be alone in the list"),
        (f'{_HOST}namespaces = ["a", "a"]', "names a namespace twice"),
        (
            f'[[principal]]\nname = "x"\nrole = "host"\ntoken_sha256 = "{HASH}"\n'
            f'[[principal]]\nname = "x"\nrole = "reader"\ncertificates = ["c"]',
            "used twice",
        ),
        (
            f'[[principal]]\nname = "x"\nrole = "host"\ntoken_sha256 = "{HASH}"\n'
            f'[[principal]]\nname = "y"\nrole = "reader"\ntoken_sha256 = "{HASH}"',
            "another principal",
        ),
        (
            '[[principal]]\nname = "x"\nrole = "host"\ncertificates = ["c"]\n'
            '[[principal]]\nname = "y"\nrole = "reader"\ncertificates = ["c"]',
            "mapped twice",
        ),
    ],
)
def test_a_bad_file_is_refused_with_the_reason(text: str, complaint: str) -> None:
    with pytest.raises(AuthFileError, match=complaint):
        parse_principals(text)


def test_a_broken_file_keeps_the_last_good_principals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_auth_file(tmp_path / "auth.toml", {"a": Entry("admin", token="t1")})
    principals = PrincipalsFile(path)
    path.write_text("[[principal]\n")
    with caplog.at_level(logging.ERROR):
        assert not principals.reload()
    assert "not valid TOML" in caplog.text and "keeping 1 principals" in caplog.text
    assert principals.current.by_token("t1") is not None
    path.unlink()
    assert not principals.reload()
    assert principals.current.by_token("t1") is not None


def test_add_token_creates_a_private_file_and_stores_only_the_hash(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    first = add_token(path, "chat-host", "host")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = add_token(path, "worker-1", "worker")
    text = path.read_text()
    assert first not in text and second not in text
    assert hash_token(first) in text and hash_token(second) in text
    principals = parse_principals(text)
    found = principals.by_token(second)
    assert found is not None and (found.name, found.role) == ("worker-1", "worker")
    with pytest.raises(AuthFileError, match="already exists"):
        add_token(path, "chat-host", "admin")
    with pytest.raises(AuthFileError, match="role must be one of"):
        add_token(path, "other", "root")
    assert parse_principals(path.read_text()).by_token(first) is not None


def test_add_token_keeps_comments_and_refuses_to_break_a_file(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    path.write_text("# managed by ops\n")
    add_token(path, "a", "reader")
    assert path.read_text().startswith("# managed by ops\n")
    path.write_text("principal = []\n")  # an inline array cannot take [[principal]]
    with pytest.raises(AuthFileError):
        add_token(path, "b", "reader")
    assert path.read_text() == "principal = []\n"


def test_the_add_token_command_prints_the_token_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "auth.toml"
    args = ["auth", "add-token", "--auth-file", str(path), "--name", "ops", "--role", "admin"]
    assert program.main(args) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert len(token) >= 40 and token not in err
    assert parse_principals(path.read_text()).by_token(token) is not None
    assert program.main(args) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.10.0.1:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/run/runstore.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.0.0.5:50051", False),
        ("runstore.internal:50051", False),
    ],
)
def test_which_addresses_are_loopback(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


def test_tls_flags_go_together(tmp_path: Path) -> None:
    with pytest.raises(SecurityError, match="go together"):
        Security.from_config(ServerConfig(tls_cert=str(tmp_path / "c")))
    with pytest.raises(SecurityError, match="needs --tls-cert"):
        Security.from_config(ServerConfig(tls_client_ca=str(tmp_path / "ca")))
    with pytest.raises(SecurityError, match="cannot read"):
        Security.from_config(ServerConfig(auth_file=str(tmp_path / "missing.toml")))


async def test_end_and_purge_are_logged_with_the_principal(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host, worker = Entry("host"), Entry("worker")
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=database_url,
        auth_file=str(write_auth_file(tmp_path / "a.toml", {"chat-host": host, "w-1": worker})),
    )
    async with running_server(config) as running:
        target = f"127.0.0.1:{running.port}"
        async with (
            channel_with_token(target, host.token) as channel,
            grpc.aio.insecure_channel(target) as plain,
        ):
            store = Store(channel)
            session_id = await store.session()
            with caplog.at_level(logging.INFO, logger="runstore.server.interceptors.auth"):
                with pytest.raises(grpc.aio.AioRpcError):  # still active
                    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id))
                await store.end(session_id)
                await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session_id))
                with pytest.raises(grpc.aio.AioRpcError):
                    await Store(plain).admin.EndSession(
                        sa.EndSessionRequest(session_id=session_id, ended_at=ts(now_ms())),
                        metadata=bearer(worker.token),
                    )
    lines = [r.getMessage() for r in caplog.records if "by principal" in r.getMessage()]
    by_host = f"session_id={session_id!r} by principal 'chat-host' (role host)"
    assert lines[0] == f"PurgeSession {by_host}: failed (FAILED_PRECONDITION)"
    assert lines[1] == f"EndSession {by_host}: ok"
    assert lines[2] == f"PurgeSession {by_host}: ok"
    assert lines[3] == "EndSession by principal 'w-1' (role worker): refused (PERMISSION_DENIED)"
    assert len(lines) == 4


async def test_end_and_purge_are_logged_without_authentication_too(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = await store.session()
    with caplog.at_level(logging.INFO, logger="runstore.server.interceptors.auth"):
        await store.end(session_id)
    assert f"EndSession session_id={session_id!r} by principal 'anonymous'" in caplog.text
