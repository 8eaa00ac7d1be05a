"""The clients' ``token=`` and ``tls=`` options, and refusals that are never retried."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from runstore.client import (
    ContextSnapshot,
    InvalidTokenError,
    PermissionDeniedError,
    RemoteContextStore,
    RemoteMemoryStore,
    RemoteSessionAdmin,
    RemoteStore,
    SyncRemoteSessionAdmin,
    SyncRemoteStore,
    TLSConfig,
    UnauthenticatedError,
    memory,
    read_token_file,
    records,
)
from runstore.client.errors import from_rpc_error
from runstore.server.app import RunningServer
from runstore.server.config import ServerConfig
from tests.certs import Authority
from tests.secured import Entry, running_server, write_auth_file
from tests.support import unique


@dataclass
class Served:
    running: RunningServer
    target: str
    auth_file: Path
    entries: dict[str, Entry]


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    entries = {"host": Entry("host"), "worker": Entry("worker"), "next-host": Entry("host")}
    auth_file = write_auth_file(tmp_path / "auth.toml", entries)
    config = ServerConfig(listen="127.0.0.1:0", database_url=database_url, auth_file=str(auth_file))
    async with running_server(config) as running:
        yield Served(running, f"127.0.0.1:{running.port}", auth_file, entries)


async def test_a_rotating_token_is_asked_for_before_every_call(served: Served) -> None:
    current = {"token": served.entries["host"].token}
    asked = itertools.count()

    def token() -> str:
        next(asked)
        return current["token"]

    async with RemoteSessionAdmin(served.target, token=token) as admin:
        session = await admin.create_session(unique("rotate"), records.now())
        # Rotate: the new token goes in, the old one is revoked, the client follows.
        current["token"] = served.entries["next-host"].token
        write_auth_file(served.auth_file, {"next-host": served.entries["next-host"]})
        assert served.running.security.principals is not None
        assert served.running.security.principals.reload()
        assert (await admin.load_session(session.id)).id == session.id
    assert next(asked) == 2


async def test_an_async_token_source_works(served: Served) -> None:
    async def token() -> str:
        return served.entries["worker"].token

    async with RemoteStore(served.target, token=token) as store:
        with pytest.raises(Exception) as missing:
            await store.load_run(unique("absent"))
        assert type(missing.value).__name__ == "RunNotFoundError"


async def test_refusals_are_their_classes_and_never_retried(served: Served) -> None:
    retries: list[object] = []
    async with (
        RemoteSessionAdmin(
            served.target, token="wrong", on_retry=lambda *a: retries.append(a)
        ) as stranger,
        RemoteSessionAdmin(
            served.target,
            token=served.entries["worker"].token,
            on_retry=lambda *a: retries.append(a),
        ) as worker,
        RemoteSessionAdmin(served.target, on_retry=lambda *a: retries.append(a)) as nobody,
    ):
        with pytest.raises(UnauthenticatedError) as unauthenticated:
            await stranger.end_session(unique("s"), records.now())
        with pytest.raises(PermissionDeniedError) as denied:
            await worker.end_session(unique("s"), records.now())
        with pytest.raises(UnauthenticatedError):
            await nobody.purge_session(unique("s"))
    assert retries == []
    assert unauthenticated.value.method == "/runstore.v1.SessionAdmin/EndSession"
    assert denied.value.method == "/runstore.v1.SessionAdmin/EndSession"
    assert unauthenticated.value.permanent and denied.value.permanent
    assert denied.value.status_code == "PERMISSION_DENIED"


async def test_memory_and_context_clients_take_a_token(served: Served) -> None:
    token = served.entries["worker"].token
    agent, run, key = unique("agent"), unique("run"), unique("ctx")
    async with (
        RemoteMemoryStore(served.target, token=token) as memories,
        RemoteContextStore(served.target, token=token) as contexts,
    ):
        outcome = await memories.append_events(
            agent, run, [memory.user_message("hi", timestamp=records.now())]
        )
        assert outcome.inserted
        assert (await memories.load_run(agent, run)).events[0].type == "user_message"
        assert await contexts.save_context(key, ContextSnapshot(system_prompt="s"), 0) == 1
    async with RemoteMemoryStore(served.target) as anonymous:
        with pytest.raises(UnauthenticatedError):
            await anonymous.load_run(agent, run)


async def test_the_sync_facades_take_tls_and_token(served: Served) -> None:
    # The facades block, so they run in a thread while this loop serves.
    await asyncio.to_thread(_sync_calls, served)


def _sync_calls(served: Served) -> None:
    with (
        SyncRemoteSessionAdmin(served.target, token=served.entries["host"].token) as admin,
        SyncRemoteStore(served.target, token=served.entries["worker"].token) as store,
        SyncRemoteSessionAdmin(served.target, token=served.entries["worker"].token) as worker,
    ):
        session = admin.create_session(unique("sync"), records.now())
        assert store.load_session_status(session.id).name == "ACTIVE"
        with pytest.raises(PermissionDeniedError):
            worker.end_session(session.id, records.now())
    with pytest.raises(ValueError, match="not both"):
        SyncRemoteStore(
            served.target,
            tls=TLSConfig(ca=Authority().pem),
            credentials=grpc.ssl_channel_credentials(),
        )


async def test_option_mistakes_are_errors() -> None:
    with pytest.raises(ValueError, match="cert and key go together"):
        TLSConfig(cert=b"x")
    with pytest.raises(ValueError, match="token= or an authorization"):
        RemoteStore("127.0.0.1:1", token="t", metadata=[("authorization", "Bearer u")])
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        with pytest.raises(ValueError, match="not with channel="):
            RemoteStore(channel=channel, tls=TLSConfig())
    finally:
        await channel.close()


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, UnauthenticatedError),
        (grpc.StatusCode.PERMISSION_DENIED, PermissionDeniedError),
    ],
)
def test_a_refusal_without_error_info_is_still_its_class(
    code: grpc.StatusCode, cls: type[Exception]
) -> None:
    """A proxy in front of runstore may refuse without runstore's ErrorInfo."""
    rebuilt = from_rpc_error(
        grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "proxy said no")
    )
    assert type(rebuilt) is cls


# --- tokens as they come from files and variables --------------------------------


async def test_a_token_read_from_a_file_with_its_newline_works(
    served: Served, tmp_path: Path
) -> None:
    """``open("host.token").read()`` keeps the newline; the client strips it."""
    token_file = tmp_path / "host.token"
    token_file.write_text(f"  {served.entries['host'].token}\n")
    async with RemoteSessionAdmin(served.target, token=token_file.read_text()) as admin:
        assert (await admin.create_session(unique("newline"), records.now())).id
    async with RemoteSessionAdmin(served.target, token=read_token_file(token_file)) as admin:
        assert (await admin.create_session(unique("file"), records.now())).id
    async with RemoteSessionAdmin(
        served.target, token=lambda: served.entries["host"].token + "\r\n"
    ) as rotating:
        assert (await rotating.create_session(unique("rotating"), records.now())).id


@pytest.mark.parametrize(
    ("token", "says"),
    [("", "token is empty"), (" \n", "token is empty"), ("ab\x00cd", "control or non-ASCII")],
    ids=["empty", "whitespace", "control-character"],
)
async def test_an_unusable_token_is_refused_before_any_call(
    served: Served, token: str, says: str
) -> None:
    with pytest.raises(InvalidTokenError, match=says):
        RemoteSessionAdmin(served.target, token=token)
    with pytest.raises(ValueError, match=says):  # InvalidTokenError is a ValueError
        SyncRemoteSessionAdmin(served.target, token=token)
    retries: list[object] = []
    async with RemoteSessionAdmin(
        served.target, token=lambda: token, on_retry=lambda *a: retries.append(a)
    ) as rotating:
        with pytest.raises(InvalidTokenError, match=says):
            await rotating.load_session("x")
    assert retries == []


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(InvalidTokenError, match=f"token file {empty} is empty"):
        read_token_file(empty)
