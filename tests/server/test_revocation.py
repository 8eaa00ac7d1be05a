"""Revocation reaches open streams: after SIGHUP, a Watch stream whose token or
client certificate the new auth file no longer admits ends at once with the
refusal a new call would get, while streams of principals still admitted go
on. A real ``runstore serve`` process, a real SIGHUP, open streams.

Every role may watch today, so a role change alone cannot refuse a Watch; the
last test narrows the table in an in-process server to show that a principal
whose new role may not call the method gets PERMISSION_DENIED the same way."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from runstore.client import TLSConfig
from runstore.server.auth import roles
from runstore.server.config import ServerConfig
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc
from tests.certs import Authority
from tests.processes import ServerProcess, server_process
from tests.secured import Entry, bearer, running_server, write_auth_file
from tests.support import failure_of, now_ms, run_start, ts, unique

WATCH_RUN = "/runstore.v1.RuntimeStore/WatchRunRecords"
REVOCATION_BOUND = 1.0
"""Seconds from SIGHUP by which a refused stream must have ended."""


@dataclass
class OpenStream:
    """A WatchRunRecords stream read by a task: the keys it received, and how it ended."""

    call: Any
    keys: list[str] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    ended: asyncio.Future[grpc.aio.AioRpcError] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    ended_at: float = 0.0

    async def read(self) -> None:
        try:
            async for response in self.call:
                async with self.arrived:
                    self.keys.extend(event.event_key for event in response.events)
                    self.arrived.notify_all()
        except grpc.aio.AioRpcError as error:
            self.ended_at = time.monotonic()
            self.ended.set_result(error)
            return
        raise AssertionError("the stream ended without a status")

    async def receives(self, key: str) -> None:
        async with asyncio.timeout(30), self.arrived:
            await self.arrived.wait_for(lambda: key in self.keys)


@asynccontextmanager
async def watching(
    channel: grpc.aio.Channel, run_id: str, token: str | None
) -> AsyncIterator[OpenStream]:
    call = rs_grpc.RuntimeStoreStub(channel).WatchRunRecords(
        rs.WatchRunRecordsRequest(run_id=run_id), metadata=bearer(token) if token else None
    )
    stream = OpenStream(call)
    reader = asyncio.ensure_future(stream.read())
    try:
        yield stream
    finally:
        call.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def _sighup(server: ServerProcess, expect: str) -> float:
    """Sends SIGHUP; returns when it was sent, once the server logged ``expect``."""
    mark = len(server.log)
    sent = time.monotonic()
    server.process.send_signal(signal.SIGHUP)
    async with asyncio.timeout(30):
        while expect.encode() not in server.log[mark:]:
            assert server.process.returncode is None, server.log.decode()
            await asyncio.sleep(0.02)
    return sent


async def _ended_with(stream: OpenStream, sent: float) -> tuple[grpc.StatusCode, str, str]:
    error = await asyncio.wait_for(asyncio.shield(stream.ended), REVOCATION_BOUND)
    assert stream.ended_at - sent < REVOCATION_BOUND
    print(f"\nstream ended {stream.ended_at - sent:.3f} s after the reload began")
    failure = failure_of(error)
    return failure.code, failure.reason, failure.metadata.get("method", "")


async def _run_with_record(channel: grpc.aio.Channel, host: Entry, worker: Entry) -> Any:
    session = unique("revoke")
    await sa_grpc.SessionAdminStub(channel).CreateSession(
        sa.CreateSessionRequest(session_id=session, created_at=ts(now_ms())),
        metadata=bearer(host.token),
    )
    run = run_start(session_id=session)
    runtime = rs_grpc.RuntimeStoreStub(channel)
    await runtime.StartRootRun(run.root_request(), metadata=bearer(worker.token))
    await runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("before")), metadata=bearer(worker.token)
    )
    return run


async def test_a_removed_token_ends_its_open_streams_at_sighup(tmp_path: Path) -> None:
    host, worker, gone, kept = Entry("host"), Entry("worker"), Entry("reader"), Entry("reader")
    everyone = {"host": host, "worker": worker, "gone": gone, "kept": kept}
    auth_file = write_auth_file(tmp_path / "auth.toml", everyone)
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with (
        server_process("--database-url", database, "--auth-file", str(auth_file)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        run = await _run_with_record(channel, host, worker)
        async with (
            watching(channel, run.id, gone.token) as revoked,
            watching(channel, run.id, kept.token) as carries_on,
        ):
            await revoked.receives("before")
            await carries_on.receives("before")

            write_auth_file(auth_file, {"host": host, "worker": worker, "kept": kept})
            sent = await _sighup(server, "reloaded: 3 principals")
            got = await _ended_with(revoked, sent)
            assert got == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", WATCH_RUN)

            await rs_grpc.RuntimeStoreStub(channel).AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record("after")),
                metadata=bearer(worker.token),
            )
            await carries_on.receives("after")
            assert "after" not in revoked.keys
            assert not carries_on.ended.done()
        assert b"stream ended, the reloaded auth file refuses it" in server.log


async def test_records_tail_follow_ends_when_its_token_is_removed(tmp_path: Path) -> None:
    """The operator's ``runstore records tail --follow``, left open with a token
    that is then removed, stops printing and exits saying why."""
    host, worker, tailer = Entry("host"), Entry("worker"), Entry("reader")
    auth_file = write_auth_file(
        tmp_path / "auth.toml", {"host": host, "worker": worker, "tailer": tailer}
    )
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with (
        server_process("--database-url", database, "--auth-file", str(auth_file)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        run = await _run_with_record(channel, host, worker)
        runstore = Path(sys.executable).with_name("runstore")
        tail = await asyncio.create_subprocess_exec(
            str(runstore),
            "records",
            "tail",
            "--run",
            run.id,
            "--follow",
            "--json",
            "--target",
            server.target,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "RUNSTORE_TOKEN": tailer.token},
        )
        try:
            assert tail.stdout is not None and tail.stderr is not None
            async with asyncio.timeout(30):
                while json.loads(await tail.stdout.readline()).get("event_key") != "before":
                    pass
            write_auth_file(auth_file, {"host": host, "worker": worker})
            sent = await _sighup(server, "reloaded: 2 principals")
            code = await asyncio.wait_for(tail.wait(), 10)
            ended = time.monotonic()
            await rs_grpc.RuntimeStoreStub(channel).AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record("after")),
                metadata=bearer(worker.token),
            )
            printed, complaint = await tail.stdout.read(), await tail.stderr.read()
        finally:
            if tail.returncode is None:
                tail.kill()
                await tail.wait()
        assert code != 0 and b"UNAUTHENTICATED" in complaint, complaint
        assert b'"after"' not in printed
        print(f"\nrecords tail --follow exited {ended - sent:.3f} s after SIGHUP")


async def test_a_certificate_no_longer_mapped_ends_its_open_streams_at_sighup(
    tmp_path: Path,
) -> None:
    ca = Authority()
    cert, key = ca.server().write(tmp_path, "server")
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    reader_identity, other_identity = "spiffe://test/reader", "spiffe://test/other"
    host, worker = Entry("host"), Entry("worker")
    mapped = Entry("reader", certificates=[reader_identity], with_token=False)
    other = Entry("reader", certificates=[other_identity], with_token=False)
    principals = {"host": host, "worker": worker, "mapped": mapped, "other": other}
    auth_file = write_auth_file(tmp_path / "auth.toml", principals)
    tls = (
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--tls-client-ca",
        str(tmp_path / "ca.crt"),
    )
    database = f"sqlite:///{tmp_path / 'runstore.db'}"

    def channel_as(identity: str) -> grpc.aio.Channel:
        pair = ca.client(identity.rsplit("/", 1)[-1], uri=identity)
        credentials = TLSConfig(ca=ca.pem, cert=pair.cert, key=pair.key).credentials()
        return grpc.aio.secure_channel(server.target, credentials)

    async with (
        server_process("--database-url", database, "--auth-file", str(auth_file), *tls) as server,
        channel_as(reader_identity) as reader_channel,
        channel_as(other_identity) as other_channel,
    ):
        run = await _run_with_record(reader_channel, host, worker)  # tokens beat certificates
        async with (
            watching(reader_channel, run.id, None) as revoked,
            watching(other_channel, run.id, None) as carries_on,
        ):
            await revoked.receives("before")
            await carries_on.receives("before")

            unmapped = Entry(
                "reader", certificates=["spiffe://test/someone-else"], with_token=False
            )
            write_auth_file(
                auth_file, {"host": host, "worker": worker, "mapped": unmapped, "other": other}
            )
            sent = await _sighup(server, "reloaded: 4 principals")
            got = await _ended_with(revoked, sent)
            assert got == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", WATCH_RUN)

            await rs_grpc.RuntimeStoreStub(reader_channel).AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record("after")),
                metadata=bearer(worker.token),
            )
            await carries_on.receives("after")
            assert "after" not in revoked.keys


@dataclass
class _InProcess:
    """An in-process server with an auth file of a host, a worker and a reader,
    and a run of the worker's with one record ("before")."""

    running: Any
    channel: grpc.aio.Channel
    auth_file: Path
    run: Any
    host: Entry
    worker: Entry
    reader: Entry


@asynccontextmanager
async def _in_process(tmp_path: Path) -> AsyncIterator[_InProcess]:
    host, worker, reader = Entry("host"), Entry("worker"), Entry("reader")
    auth_file = write_auth_file(
        tmp_path / "auth.toml", {"host": host, "worker": worker, "reader": reader}
    )
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{tmp_path / 'runstore.db'}",
        auth_file=str(auth_file),
    )
    async with (
        running_server(config) as running,
        grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        run = await _run_with_record(channel, host, worker)
        yield _InProcess(running, channel, auth_file, run, host, worker, reader)


async def test_a_role_that_may_no_longer_call_the_method_ends_its_open_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(roles.METHOD_ROLES, WATCH_RUN, frozenset({roles.ADMIN, roles.READER}))
    async with (
        _in_process(tmp_path) as server,
        watching(server.channel, server.run.id, server.reader.token) as demoted,
    ):
        await demoted.receives("before")
        demoted_entry = Entry("worker", token=server.reader.token)
        write_auth_file(
            server.auth_file,
            {"host": server.host, "worker": server.worker, "reader": demoted_entry},
        )
        sent = time.monotonic()
        assert server.running.security.principals is not None
        assert server.running.security.principals.reload()
        got = await _ended_with(demoted, sent)
        assert got == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", WATCH_RUN)


async def test_a_reload_before_the_stream_listens_still_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token is removed and the file reloaded after the Watch call was
    admitted but before its stream registered for reloads (the reload is made
    to land exactly there): the stream must still end, not outlive its token."""
    async with _in_process(tmp_path) as server:
        principals = server.running.security.principals
        assert principals is not None
        listen = principals.listen
        reloaded = asyncio.Event()
        sent = 0.0

        def reload_then_listen(listener: Any) -> None:
            nonlocal sent
            write_auth_file(server.auth_file, {"host": server.host, "worker": server.worker})
            sent = time.monotonic()
            assert principals.reload()
            reloaded.set()
            listen(listener)

        monkeypatch.setattr(principals, "listen", reload_then_listen)
        async with watching(server.channel, server.run.id, server.reader.token) as stream:
            await asyncio.wait_for(reloaded.wait(), 30)
            got = await _ended_with(stream, sent)
        assert got == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", WATCH_RUN)
        assert stream.keys == []
