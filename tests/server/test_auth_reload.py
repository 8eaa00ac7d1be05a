"""``runstore auth reload``: SIGHUP to the server found by its pid file
(docs/security.md#reloading), on one process and on every worker of
``serve --workers 2``; a pid file nobody holds is refused, not signalled."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import grpc
import pytest

from runstore.contract import pid_file
from runstore.contract.auth_file import add_token, read_auth_file
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from tests import postgres
from tests.cli.test_operator_cli import shell
from tests.processes import run_module, server_process
from tests.server.test_workers import _established, workers

REVOKED = "revoked-token-0123456789abcdef0123456789abcdef"
KEPT = "kept-token-0123456789abcdef0123456789abcdef01"


def _auth_file(tmp_path: Path) -> Path:
    path = tmp_path / "auth.toml"
    add_token(path, "dashboards", "reader", REVOKED)
    add_token(path, "ops", "admin", KEPT)
    return path


async def _list_sessions(channel: grpc.aio.Channel, token: str) -> grpc.StatusCode:
    try:
        await sa_grpc.SessionAdminStub(channel).ListSessions(
            sa.ListSessionsRequest(), metadata=(("authorization", f"Bearer {token}"),), timeout=10
        )
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def _until_refused(channels: list[grpc.aio.Channel], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while True:
        codes = [await _list_sessions(channel, REVOKED) for channel in channels]
        if all(code is grpc.StatusCode.UNAUTHENTICATED for code in codes):
            return
        assert time.monotonic() < deadline, f"still admitted after the reload: {codes}"
        await asyncio.sleep(0.05)


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_reload_reaches_every_worker_through_the_default_pid_file(tmp_path: Path) -> None:
    """The default pid file (named after --listen's port, in $TMPDIR) holds the
    parent's pid; the parent passes SIGHUP to both workers, so a principal
    removed from the file is refused on connections held by either."""
    auth_file = _auth_file(tmp_path)
    env = {"TMPDIR": str(tmp_path)}
    os.environ["TMPDIR"] = str(tmp_path)  # the workers' parent inherits it
    try:
        async with postgres.fresh_database("runstore_reload") as url:
            code, _, stderr = await run_module("runstore.server", "migrate", "--database-url", url)
            assert code == 0, stderr
            async with workers(url, 2, "--auth-file", str(auth_file)) as served:
                path = tmp_path / f"runstore-{served.port}.pid"
                assert pid_file.running_pid(path) == served.process.pid
                pids = served.pids()
                # A connection of its own for each channel, held by one worker.
                channels = [
                    grpc.aio.insecure_channel(
                        f"127.0.0.1:{served.port}", options=[("grpc.use_local_subchannel_pool", 1)]
                    )
                    for _ in range(16)
                ]
                try:
                    for channel in channels:
                        assert await _list_sessions(channel, REVOKED) is grpc.StatusCode.OK
                    held = [_established(pid, served.port) for pid in pids]
                    assert sum(held) == 16 and min(held) >= 1, held  # both workers serve

                    removed = await shell(
                        "auth", "remove", "--auth-file", str(auth_file), "--name", "dashboards"
                    )
                    assert removed.code == 0, removed.err
                    assert "runstore auth reload" in removed.err
                    # Still admitted: nothing reloaded yet.
                    assert await _list_sessions(channels[0], REVOKED) is grpc.StatusCode.OK

                    mark = len(served.log)
                    reloaded = await shell(
                        "auth", "reload", "--listen", f"0.0.0.0:{served.port}", env=env
                    )
                    assert reloaded.code == 0, reloaded.err
                    assert f"pid {served.process.pid}, from {path}" in reloaded.one_line_error()
                    await _until_refused(channels)
                    for channel in channels:  # the other principal carries on
                        assert await _list_sessions(channel, KEPT) is grpc.StatusCode.OK
                    assert served.log[mark:].count(b"reloaded: 1 principals") == 2
                    assert [_established(pid, served.port) for pid in pids] == held
                finally:
                    for channel in channels:
                        await channel.close()
            assert not path.exists()  # removed when the parent stops
    finally:
        del os.environ["TMPDIR"]


async def test_reload_by_pid_file_and_a_stale_one_refused(tmp_path: Path) -> None:
    auth_file = _auth_file(tmp_path)
    pid_path = tmp_path / "run" / "runstore.pid"
    pid_path.parent.mkdir()
    async with server_process(
        "--database-url",
        f"sqlite:///{tmp_path / 'runstore.db'}",
        "--auth-file",
        str(auth_file),
        "--pid-file",
        str(pid_path),
    ) as server:
        assert pid_path.read_text() == f"{server.process.pid}\n"
        channel = grpc.aio.insecure_channel(server.target)
        try:
            assert await _list_sessions(channel, REVOKED) is grpc.StatusCode.OK
            removed = await shell(
                "auth", "remove", "--auth-file", str(auth_file), "--name", "dashboards"
            )
            assert removed.code == 0, removed.err
            reloaded = await shell("auth", "reload", env={"RUNSTORE_PID_FILE": str(pid_path)})
            assert reloaded.code == 0, reloaded.err
            await _until_refused([channel])
        finally:
            await channel.close()
        # A second server with the same pid file is refused in one line.
        code, _, stderr = await run_module(
            "runstore.server",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            f"sqlite:///{tmp_path / 'other.db'}",
            "--pid-file",
            str(pid_path),
        )
        assert code == 2, stderr
        [line] = stderr.decode().strip().splitlines()
        assert f"the pid file {pid_path} (--pid-file) is held by another runstore serve" in line
        assert pid_path.read_text() == f"{server.process.pid}\n"

    # Killed: the file stays, held by no one, and is not trusted.
    assert pid_path.read_text() == f"{server.process.pid}\n"
    stale = await shell("auth", "reload", "--pid-file", str(pid_path))
    assert stale.code == 2
    assert stale.one_line_error() == f"runstore: {pid_path} is stale: no runstore serve holds it"
    missing = await shell("auth", "reload", "--pid-file", str(tmp_path / "none.pid"))
    assert missing.code == 2 and "no pid file" in missing.one_line_error()
    assert [p.name for p in read_auth_file(auth_file)] == ["ops"]


def test_a_default_pid_file_that_cannot_be_written_only_costs_the_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A default path (no --pid-file) in a directory that is not there: one
    warning and the server serves; a --pid-file given there stops it."""
    path = tmp_path / "missing" / "runstore-50051.pid"
    with contextlib.ExitStack() as stack:
        pid_file.hold(stack, path, required=False)
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(f"cannot write the pid file {path} (--pid-file)")
    assert "runstore auth reload will not find this server" in warning
    with pytest.raises(pid_file.Unwritable), contextlib.ExitStack() as stack:
        pid_file.hold(stack, path, required=True)
