"""Structured logs: JSON line by line, one access line per call, the request id
everywhere a call leaves a trace, and never a payload or a token."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from runstore.server import logs
from runstore.server.app import build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests.processes import server_process
from tests.support import Store, failure_of, run_start, ts, unique

PAYLOAD_MARKER = "PAYLOAD-MARKER-4f1c"
TOKEN = "TOKEN-SECRET-9b2e"
LOAD_RUN = "/runstore.v1.RuntimeStore/LoadRun"
APPEND = "/runstore.v1.RuntimeStore/AppendRunRecord"


def trailing(err: grpc.aio.AioRpcError) -> dict[str, Any]:
    return dict(err.trailing_metadata() or ())


def error_info(err: grpc.aio.AioRpcError) -> dict[str, str]:
    """The metadata of the failed call's one ErrorInfo, ``request_id`` included."""
    status = rpc_status.from_call(err)
    assert status is not None
    (detail,) = status.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    return dict(info.metadata)


async def test_json_logs_parse_line_by_line_and_name_each_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # grpc's C core says something on stderr at this verbosity: it must come out as JSON too.
    monkeypatch.setenv("GRPC_VERBOSITY", "debug")
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    secret = (("authorization", f"Bearer {TOKEN}"),)
    async with server_process("--database-url", database, "--log-format", "json") as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            store = Store(channel, target=server.target)
            run = await store.root()
            payload = json.dumps({"text": PAYLOAD_MARKER}).encode()
            await store.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record("k1", payload=payload)),
                metadata=secret,
            )
            # A failing call with the caller's request id (and a token and a payload).
            stranger = run_start(run_id=unique("missing"))
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await store.runtime.AppendRunRecord(
                    rs.AppendRunRecordRequest(record=stranger.record("k1", payload=payload)),
                    metadata=(("x-request-id", "caller-chose-this-1"), *secret),
                )
            # A failing call without one: the server makes one up.
            with pytest.raises(grpc.aio.AioRpcError) as generated:
                await store.runtime.LoadRun(rs.LoadRunRequest(run_id=unique("missing")))
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), timeout=30) == 0
        await asyncio.sleep(0)
    text = server.log.decode()

    lines = [json.loads(line) for line in text.splitlines()]  # every line is JSON
    assert lines
    for line in lines:
        assert {"timestamp", "level", "logger", "message"} <= line.keys(), line
        assert line["timestamp"].endswith("Z")
    loggers = {line["logger"] for line in lines}
    assert "grpc.core" in loggers, loggers  # the C core's own lines, wrapped
    assert "runstore.server.db.migrate" in loggers  # the new file's schema
    assert not any(name.startswith("alembic") for name in loggers)  # quiet at INFO
    assert "runstore.server.app" in loggers

    # The failing call: the request id in its ErrorInfo, its trailers and its log lines.
    assert failure_of(failed.value).reason == "RUN_NOT_FOUND"
    assert error_info(failed.value)["request_id"] == "caller-chose-this-1"
    assert trailing(failed.value)["x-request-id"] == "caller-chose-this-1"
    own = [line for line in lines if line.get("request_id") == "caller-chose-this-1"]
    access = [line for line in own if line["logger"] == logs.ACCESS_LOGGER]
    assert len(access) == 1, own
    entry = access[0]
    assert entry["method"] == APPEND
    assert entry["code"] == "NotFound"
    assert entry["reason"] == "RUN_NOT_FOUND"
    assert entry["duration_ms"] > 0
    assert entry["peer"].startswith("ipv4:127.0.0.1:")
    assert entry["principal"] is None  # authentication is off
    assert entry["level"] == "INFO"
    assert entry["message"] == f"{APPEND} NotFound"

    made_up = trailing(generated.value)["x-request-id"]
    assert len(made_up) >= 16
    assert error_info(generated.value)["request_id"] == made_up
    (load,) = [line for line in lines if line.get("request_id") == made_up]
    assert (load["method"], load["code"], load["reason"]) == (LOAD_RUN, "NotFound", "RUN_NOT_FOUND")

    # One access line per call: CreateSession, StartRootRun, AppendRunRecord ×2, LoadRun.
    calls = [line for line in lines if line["logger"] == logs.ACCESS_LOGGER]
    assert [line["method"].rsplit("/", 1)[1] for line in calls] == [
        "CreateSession",
        "StartRootRun",
        "AppendRunRecord",
        "AppendRunRecord",
        "LoadRun",
    ]
    assert len({line["request_id"] for line in calls}) == 5
    # Nothing of what callers sent besides ids: no payload, no token.
    assert PAYLOAD_MARKER not in text
    assert TOKEN not in text


async def test_text_logs_take_the_access_log_when_asked(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with server_process("--database-url", database, "--access-log") as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await Store(channel).runtime.LoadRun(
                    rs.LoadRunRequest(run_id="nope"), metadata=(("x-request-id", "text-id-7"),)
                )
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), timeout=30) == 0
    (line,) = [line for line in server.log.decode().splitlines() if "text-id-7" in line]
    assert " INFO runstore.access: /runstore.v1.RuntimeStore/LoadRun NotFound reason=" in line
    assert "reason=RUN_NOT_FOUND" in line
    assert "principal=- " in line
    assert line.endswith("request_id=text-id-7")


async def test_an_invalid_request_id_is_replaced_and_the_log_says_so(tmp_path: Path) -> None:
    """``has spaces`` used to come back as ``hasspaces``: an id the caller never
    chose, silently. Now it is a fresh one, and the log line names both."""
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    too_long = "x" * 129
    async with server_process("--database-url", database, "--log-format", "json") as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            replaced: list[str] = []
            for sent in ("has spaces", too_long, "semi;colon"):
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await Store(channel).runtime.LoadRun(
                        rs.LoadRunRequest(run_id="nope"), metadata=(("x-request-id", sent),)
                    )
                fresh = trailing(failed.value)["x-request-id"]
                assert len(fresh) == 32 and int(fresh, 16) >= 0, fresh
                assert error_info(failed.value)["request_id"] == fresh
                replaced.append(fresh)
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), timeout=30) == 0
    lines = [json.loads(line) for line in server.log.decode().splitlines()]
    warnings = [line for line in lines if "replaced by" in line["message"]]
    assert [line["request_id"] for line in warnings] == replaced
    assert warnings[0]["message"].startswith("x-request-id 'has spaces' is not 1 to 128 of")
    assert warnings[0]["level"] == "WARNING"
    # The access line of each call carries the fresh id, not an altered one.
    access = [line for line in lines if line["logger"] == logs.ACCESS_LOGGER]
    assert [line["request_id"] for line in access] == replaced


async def test_json_logs_without_an_access_log_when_turned_off(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    args = ("--database-url", database, "--log-format", "json", "--no-access-log")
    async with server_process(*args) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            await Store(channel).session()
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), timeout=30) == 0
    lines = [json.loads(line) for line in server.log.decode().splitlines()]
    assert not [line for line in lines if line["logger"] == logs.ACCESS_LOGGER]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []
        self.setFormatter(logs.JsonFormatter())
        self.addFilter(logs.RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@contextmanager
def captured() -> Iterator[_Records]:
    handler = _Records()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_server_side_errors_are_logged_under_the_request_id(tmp_path: Path) -> None:
    """A database failure is logged by the server (the caller only learns
    UNAVAILABLE): that line carries the call's request id like its access line."""
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{tmp_path / 'runstore.db'}",
        log_format="json",
    )
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))
        stack.push_async_callback(running.server.stop, None)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
        )
        await db.backend.close()  # the database goes away under the server
        with captured() as records, pytest.raises(grpc.aio.AioRpcError) as failed:
            await Store(channel).runtime.LoadRun(
                rs.LoadRunRequest(run_id="r"), metadata=(("x-request-id", "db-trouble-3"),)
            )
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(failed.value)["request_id"] == "db-trouble-3"
    caused = [line for line in records.lines if line.get("request_id") == "db-trouble-3"]
    assert {line["logger"] for line in caused} == {
        "runstore.server.error_status",
        logs.ACCESS_LOGGER,
    }
    (warning,) = [line for line in caused if line["level"] == "WARNING"]
    assert "UnavailableError" in warning["message"]
    # Every line runstore logged while the call ran is the call's.
    ours = [line for line in records.lines if line["logger"].startswith("runstore")]
    assert all(line.get("request_id") == "db-trouble-3" for line in ours), ours


async def test_the_access_log_names_the_principal_and_never_the_token(tmp_path: Path) -> None:
    token = f"{TOKEN}-worker"
    auth_file = tmp_path / "auth.toml"
    digest = hashlib.sha256(token.encode()).hexdigest()
    auth_file.write_text(
        f'[[principal]]\nname = "worker-eu-1"\nrole = "worker"\ntoken_sha256 = "{digest}"\n'
    )
    auth_file.chmod(0o600)
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    args = ("--database-url", database, "--log-format", "json", "--auth-file", str(auth_file))
    bearer = (("authorization", f"Bearer {token}"),)
    async with server_process(*args) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            store = Store(channel)
            with pytest.raises(grpc.aio.AioRpcError):  # a worker may not create sessions
                await store.admin.CreateSession(
                    sa.CreateSessionRequest(session_id="s", created_at=ts(1)),
                    metadata=(*bearer, ("x-request-id", "denied-1")),
                )
            with pytest.raises(grpc.aio.AioRpcError):  # no credential at all
                await store.runtime.LoadRun(
                    rs.LoadRunRequest(run_id="r"), metadata=(("x-request-id", "anonymous-1"),)
                )
            with pytest.raises(grpc.aio.AioRpcError):  # allowed, but no such run
                await store.runtime.LoadRun(
                    rs.LoadRunRequest(run_id="r"), metadata=(*bearer, ("x-request-id", "ok-1"))
                )
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), timeout=30) == 0
    text = server.log.decode()
    lines = [json.loads(line) for line in text.splitlines()]
    access = {line["request_id"]: line for line in lines if line["logger"] == logs.ACCESS_LOGGER}
    assert (access["denied-1"]["code"], access["denied-1"]["reason"]) == (
        "PermissionDenied",
        "PERMISSION_DENIED",
    )
    assert access["denied-1"]["principal"] == "worker-eu-1"
    assert (access["anonymous-1"]["code"], access["anonymous-1"]["reason"]) == (
        "Unauthenticated",
        "UNAUTHENTICATED",
    )
    assert access["anonymous-1"]["principal"] is None
    assert access["ok-1"]["principal"] == "worker-eu-1"
    assert access["ok-1"]["reason"] == "RUN_NOT_FOUND"
    assert token not in text


async def test_a_stalled_log_reader_never_stalls_calls_and_loses_no_line(tmp_path: Path) -> None:
    """The access log is written by a thread of its own: while nobody reads the
    server's stderr (its pipe full after a few hundred lines), calls still
    complete; once it is read again, every line comes out, in order, flushed
    at SIGTERM. A line written on the event loop would block it at the first
    full pipe, and every later call with it."""
    import os
    import sys

    from tests.processes import _PORT_LINE

    calls = 2000  # ~250 bytes a line: 500 KB, far over a pipe's 64 KiB
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.server",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        f"sqlite:///{tmp_path / 'runstore.db'}",
        "--log-format",
        "json",
        "--access-log",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    try:
        log = bytearray()
        while (match := _PORT_LINE.search(log)) is None:
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
            assert line, f"server exited before serving:\n{log.decode()}"
            log.extend(line)
        # From here nobody reads stderr until every call has returned.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{int(match.group(1))}") as channel:
            runtime = Store(channel).runtime

            async def load_all() -> None:
                for number in range(calls):
                    with pytest.raises(grpc.aio.AioRpcError):
                        await runtime.LoadRun(
                            rs.LoadRunRequest(run_id="nope"),
                            metadata=(("x-request-id", f"stalled-{number}"),),
                        )

            await asyncio.wait_for(load_all(), timeout=120)
        process.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(process.stderr.read(), timeout=60)
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lines = [json.loads(line) for line in (bytes(log) + rest).decode().splitlines()]
    ids = [
        entry["request_id"]
        for entry in lines
        if entry.get("logger") == logs.ACCESS_LOGGER
        and str(entry.get("request_id", "")).startswith("stalled-")
    ]
    assert ids == [f"stalled-{number}" for number in range(calls)]


def test_the_sink_writes_every_line_in_order_and_flush_waits_for_them() -> None:
    written: list[str] = []
    sink = logs.BufferedSink(written.append, logging.Formatter("%(message)s"))
    logger = logging.getLogger("runstore.test.sink")
    logger.propagate = False
    logger.addHandler(sink)
    try:
        for number in range(5000):
            logger.warning("line %d", number)
        sink.flush()
        assert "".join(written).splitlines() == [f"line {n}" for n in range(5000)]
        logger.warning("last")
    finally:
        logger.removeHandler(sink)
        sink.close()
    assert "".join(written).splitlines()[-1] == "last"


def test_lines_are_written_whole_in_pipe_sized_writes() -> None:
    """Writes of at most 4096 bytes (a pipe keeps those whole when several
    workers share stderr), each of whole lines; a longer line goes alone."""
    lines = [f"{n:04d}" + "x" * 95 for n in range(100)] + ["y" * 5000, "é" * 3000]
    chunks = list(logs._chunks(lines))
    assert "".join(chunks).splitlines() == lines
    assert all(chunk.endswith("\n") for chunk in chunks)
    assert all(len(chunk.encode()) <= 4096 for chunk in chunks[:-2])
    assert chunks[-2:] == ["y" * 5000 + "\n", "é" * 3000 + "\n"]


def test_the_writer_lingers_so_lines_logged_together_go_out_in_one_write() -> None:
    """Once the writer has taken a batch's first line it waits for the others
    instead of waking for each (a wake per call takes the interpreter lock
    from the event loop): the first line and the 99 logged after it are one
    write, and ``flush`` does not wait out the linger."""
    writes: list[str] = []
    sink = logs.BufferedSink(writes.append, logging.Formatter("%(message)s"), linger=600)
    logger = logging.getLogger("runstore.test.linger")
    logger.propagate = False
    logger.addHandler(sink)
    try:
        logger.warning("line 0")
        _until_taken(sink)
        for number in range(1, 100):
            logger.warning("line %d", number)
        flushed = threading.Thread(target=sink.flush, daemon=True)
        flushed.start()
        flushed.join(timeout=30)
        assert not flushed.is_alive(), "flush waited for the linger"
        assert writes == ["".join(f"line {n}\n" for n in range(100))]
    finally:
        logger.removeHandler(sink)
        closed = threading.Thread(target=sink.close, daemon=True)
        closed.start()
        closed.join(timeout=30)
    assert not closed.is_alive(), "close waited for the linger"


def test_close_writes_the_lines_of_a_lingering_batch() -> None:
    writes: list[str] = []
    sink = logs.BufferedSink(writes.append, logging.Formatter("%(message)s"), linger=600)
    logger = logging.getLogger("runstore.test.linger-close")
    logger.propagate = False
    logger.addHandler(sink)
    logger.warning("first")
    _until_taken(sink)
    logger.warning("second")
    logger.removeHandler(sink)
    closed = threading.Thread(target=sink.close, daemon=True)
    closed.start()
    closed.join(timeout=30)
    assert not closed.is_alive(), "close waited for the linger"
    assert "".join(writes) == "first\nsecond\n"


def _until_taken(sink: logs.BufferedSink) -> None:
    """Returns once the writer thread has taken what was queued (it is then
    lingering, since nothing asked it to hurry)."""
    deadline = time.monotonic() + 30
    while not sink._queue.empty():
        assert time.monotonic() < deadline, "the writer never took the line"
        time.sleep(0.001)
