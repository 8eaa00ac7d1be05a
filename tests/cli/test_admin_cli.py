"""The operator's commands against a live server, in both output formats.

Most commands run ``runstore.cli.program.main`` in a thread of the test process
(the server is a real one on a real port, reached over gRPC), with its own
stdin, stdout and stderr; a few run the installed entry point as a process to
check what an operator's shell sees: the exit code and no traceback.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import random
import socket
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.cli import program
from runstore.cli.jsonlines import record_from_line
from runstore.server.core import paging
from runstore.server.version import __version__ as server_version
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import types_pb2 as pb
from tests.support import Run, Store, now_ms, run_start, unique


@dataclass
class Result:
    code: int
    out: str
    err: str

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines()]


def _main(argv: list[str], stdin: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        mock.patch.object(sys, "stdin", io.StringIO(stdin)),
    ):
        try:
            code = program.main(argv)
        except SystemExit as exit_:  # argparse
            code = exit_.code if isinstance(exit_.code, int) else 2
    return Result(code, out.getvalue(), err.getvalue())


_one_at_a_time = asyncio.Lock()


async def runstore(store: Store, *argv: str, stdin: str = "") -> Result:
    """``runstore ARGV --target <the test server>``; stdout/stderr are process-wide,
    so commands take turns."""
    async with _one_at_a_time:
        return await asyncio.to_thread(_main, [*argv, "--target", store.target], stdin)


def seconds_window() -> int:
    return -4_000_000_000 + random.randrange(1_000_000) * 1000


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def create(store: Store, session_id: str, seconds: int) -> None:
    await store.admin.CreateSession(
        sa.CreateSessionRequest(session_id=session_id, created_at=Timestamp(seconds=seconds))
    )


async def started(store: Store, **fields: Any) -> Run:
    run = run_start(**fields)
    if run.start.session_id:
        await store.runtime.StartRootRun(run.root_request())
    else:
        await store.runtime.StartOneShotRun(run.one_shot_request())
    return run


# --- sessions ---------------------------------------------------------------------


async def test_sessions_list_in_both_formats_with_filters_and_pages(store: Store) -> None:
    base = seconds_window()
    ids = [unique("cli") for _ in range(5)]
    for offset, session_id in enumerate(ids):
        await create(store, session_id, base + offset)
    await store.admin.EndSession(sa.EndSessionRequest(session_id=ids[1], ended_at=Timestamp()))
    window = ["--created-after", iso(base), "--created-before", iso(base + 1000)]

    as_json = await runstore(store, "sessions", "list", *window, "--json")
    assert as_json.code == 0, as_json.err
    rows = as_json.lines()
    assert [row["id"] for row in rows] == ids
    assert rows[1]["status"] == "ended" and rows[1]["ended_at"] is not None
    assert rows[0]["created_at"] == iso(base).replace("Z", ".000Z")

    human = await runstore(store, "sessions", "list", *window)
    assert human.code == 0
    lines = human.out.splitlines()
    assert lines[0].split() == ["SESSION", "STATUS", "CREATED", "ENDED"]
    assert [line.split()[0] for line in lines[2:]] == ids

    ended = await runstore(store, "sessions", "list", *window, "--status", "ended", "--json")
    assert [row["id"] for row in ended.lines()] == [ids[1]]

    first = await runstore(store, "sessions", "list", *window, "--page-size", "2", "--json")
    assert [row["id"] for row in first.lines()] == ids[:2]
    token = first.err.split("--page-token ")[1].split()[0]
    second = await runstore(
        store, "sessions", "list", *window, "--page-size", "2", "--page-token", token, "--json"
    )
    assert [row["id"] for row in second.lines()] == ids[2:4]
    every = await runstore(store, "sessions", "list", *window, "--page-size", "2", "--all")
    assert [line.split()[0] for line in every.out.splitlines()[2:]] == ids
    assert "more:" not in every.err


async def test_sessions_show_has_the_session_and_its_runs(store: Store) -> None:
    session_id = unique("show")
    await create(store, session_id, 1_700_000_000)
    runs = [await started(store, session_id=session_id, agent_id="shown") for _ in range(2)]
    human = await runstore(store, "sessions", "show", session_id)
    assert human.code == 0, human.err
    assert f"session  {session_id}" in human.out
    for run in runs:
        assert run.id in human.out
    shown = (await runstore(store, "sessions", "show", session_id, "--json")).lines()
    assert len(shown) == 1
    assert shown[0]["id"] == session_id and shown[0]["status"] == "active"
    in_order = sorted(runs, key=lambda r: (r.start.started_at.ToNanoseconds(), r.id))
    assert [r["run_id"] for r in shown[0]["runs"]] == [r.id for r in in_order]


async def test_a_failed_call_is_exit_1_with_its_reason_and_no_traceback(store: Store) -> None:
    for output in ([], ["--json"]):
        result = await runstore(store, "sessions", "show", unique("missing"), *output)
        assert result.code == 1
        assert result.out == ""
        assert result.err.startswith("runstore: SESSION_NOT_FOUND: session not found")
        assert "Traceback" not in result.err


async def test_end_asks_first_and_does_nothing_unless_confirmed(store: Store) -> None:
    session_id = unique("end")
    await create(store, session_id, 1_700_000_000)
    for answer in ("n\n", "", "maybe\n"):
        declined = await runstore(store, "sessions", "end", session_id, stdin=answer)
        assert declined.code == 1
        assert f"End session {session_id}?" in declined.err and "[y/N]" in declined.err
        assert "nothing was changed" in declined.err
    loaded = await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))
    assert loaded.session.status == pb.SESSION_STATUS_ACTIVE

    confirmed = await runstore(store, "sessions", "end", session_id, "--json", stdin="y\n")
    assert confirmed.code == 0, confirmed.err
    assert confirmed.lines()[0]["status"] == "ended"
    loaded = await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))
    assert loaded.session.status == pb.SESSION_STATUS_ENDED

    other = unique("end")
    await create(store, other, 1_700_000_000)
    unasked = await runstore(
        store, "sessions", "end", other, "--yes", "--at", "2026-12-01T10:00:00Z"
    )
    assert unasked.code == 0 and "[y/N]" not in unasked.err
    assert "ended" in unasked.out and "2026-12-01T10:00:00.000Z" in unasked.out


async def test_purge_asks_first_reports_refusals_and_purges(store: Store) -> None:
    session_id = unique("purge")
    await create(store, session_id, 1_700_000_000)
    active = await runstore(store, "sessions", "purge", session_id, "--yes")
    assert active.code == 1
    assert active.err.startswith("runstore: SESSION_ACTIVE:")
    await store.admin.EndSession(sa.EndSessionRequest(session_id=session_id, ended_at=Timestamp()))
    declined = await runstore(store, "sessions", "purge", session_id, stdin="no\n")
    assert declined.code == 1 and "deleted for good" in declined.err
    assert (await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))).session

    purged = await runstore(store, "sessions", "purge", session_id, "--json", stdin="yes\n")
    assert purged.code == 0, purged.err
    assert purged.lines() == [{"id": session_id, "purged": True}]
    gone = await runstore(store, "sessions", "show", session_id)
    assert gone.code == 1 and gone.err.startswith("runstore: SESSION_PURGED:")
    human = await runstore(store, "sessions", "purge", session_id, "-y")  # idempotent
    assert human.code == 0 and human.out.strip() == f"purged session {session_id}"


# --- runs and records -------------------------------------------------------------


async def test_runs_list_filters_in_both_formats(store: Store) -> None:
    agent = unique("agent")
    session_id = unique("runs")
    await create(store, session_id, 1_700_000_000)
    in_session = [await started(store, session_id=session_id, agent_id=agent) for _ in range(3)]
    lone = await started(store, agent_id=agent)
    await store.runtime.RecordRunTerminal(in_session[0].terminal_request(pb.RUN_STATUS_FAILED))

    every = await runstore(store, "runs", "list", "--agent", agent, "--json")
    assert every.code == 0, every.err
    assert [r["run_id"] for r in every.lines()] == [*(r.id for r in in_session), lone.id]
    assert every.lines()[0]["status"] == "failed"
    sessionless = await runstore(store, "runs", "list", "--agent", agent, "--sessionless", "--json")
    assert [r["run_id"] for r in sessionless.lines()] == [lone.id]
    failed = await runstore(
        store, "runs", "list", "--session", session_id, "--status", "failed", "--json"
    )
    assert [r["run_id"] for r in failed.lines()] == [in_session[0].id]
    human = await runstore(store, "runs", "list", "--session", session_id, "--status", "running")
    lines = human.out.splitlines()
    assert lines[0].split() == [
        "RUN", "AGENT", "SESSION", "STATUS", "STARTED", "PARENT", "ENDED", "DURATION", "FAILURE"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[2:]] == [r.id for r in in_session[1:]]


async def test_runs_list_triage_flags(store: Store) -> None:
    agent = unique("triage")
    session_id = unique("runs")
    await create(store, session_id, 1_700_000_000)
    runs = [await started(store, session_id=session_id, agent_id=f"{agent}-{i}") for i in range(3)]
    await store.runtime.RecordRunTerminal(runs[1].terminal_request(pb.RUN_STATUS_FAILED))

    async def ids(*flags: str) -> list[str]:
        result = await runstore(store, "runs", "list", *flags, "--json")
        assert result.code == 0, result.err
        return [r["run_id"] for r in result.lines()]

    newest = await ids("--agent-prefix", agent, "--newest-first")
    assert newest == [r.id for r in reversed(runs)]
    assert await ids("--run", runs[2].id) == [runs[2].id]
    assert await ids("--run-prefix", runs[0].id) == [runs[0].id]
    assert await ids("--agent-prefix", agent, "--label", "site=one", "--root-only") == [
        r.id for r in runs
    ]
    assert await ids("--agent-prefix", agent, "--label", "site=two") == []
    failed = await runstore(store, "runs", "list", "--agent-prefix", agent, "--counts", "--json")
    row = next(r for r in failed.lines() if r["run_id"] == runs[1].id)
    assert row["failure"] == {"message": "boom", "kind": "internal", "code": "", "retryable": False}
    assert row["ended_at"] is not None
    assert "counts: running 2, suspended 0, completed 0, failed 1, canceled 0" in failed.err
    human = await runstore(store, "runs", "list", "--agent-prefix", agent, "--status", "failed")
    assert "internal: boom" in human.out
    bad = await runstore(store, "runs", "list", "--label", "nokey")
    assert bad.code != 0 and "KEY=VALUE" in bad.err
    both = await runstore(store, "runs", "list", "--run", "a", "--run-prefix", "a")
    assert both.code != 0


async def test_since_lists_what_started_within_a_duration(store: Store) -> None:
    agent = unique("since")
    old = await started(store, agent_id=agent, started_ms=now_ms() - 2 * 3_600_000)
    new = await started(store, agent_id=agent)
    recent = await runstore(store, "runs", "list", "--agent", agent, "--since", "1h", "--json")
    assert recent.code == 0, recent.err
    assert [r["run_id"] for r in recent.lines()] == [new.id]
    day = await runstore(store, "runs", "list", "--agent", agent, "--since", "1d", "--json")
    assert [r["run_id"] for r in day.lines()] == [old.id, new.id]
    both = await runstore(
        store, "runs", "list", "--since", "1h", "--started-after", "2026-01-01T00:00:00Z"
    )
    assert both.code != 0
    bad = await runstore(store, "sessions", "list", "--since", "soon")
    assert bad.code != 0 and "--since" in bad.err


async def test_sessions_list_triage_flags(store: Store) -> None:
    stem = unique("triage")
    for i in range(3):
        await create(store, f"{stem}-{i}", 1_700_000_000 + i)
    result = await runstore(
        store, "sessions", "list", "--session-prefix", stem, "--newest-first", "--counts", "--json"
    )
    assert result.code == 0, result.err
    assert [s["id"] for s in result.lines()] == [f"{stem}-{i}" for i in (2, 1, 0)]
    assert "counts: active 3, ended 0" in result.err
    exact = await runstore(store, "sessions", "list", "--session", f"{stem}-1", "--json")
    assert [s["id"] for s in exact.lines()] == [f"{stem}-1"]


async def test_runs_show_has_metadata_then_records_with_a_payload_preview(store: Store) -> None:
    session_id = unique("show")
    await create(store, session_id, 1_700_000_000)
    run = await started(store, session_id=session_id, agent_id="previewer")
    long_text = b'{"answer":"' + b"x" * 200 + b'"}'
    binary = bytes(range(256)) * 4
    for key, payload in (("long", long_text), ("binary", binary), ("line", b"a\nb")):
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record(key, payload=payload))
        )
    human = await runstore(store, "runs", "show", run.id)
    assert human.code == 0, human.err
    meta, _, records = human.out.partition("TYPE")
    assert f"run            {run.id}" in meta and "status         running" in meta
    assert "records        4" in meta
    rows = records.splitlines()[2:]
    assert [row.split()[0] for row in rows] == ["1", "2", "3", "4"]
    assert '{"answer":"xxxxx' in rows[1] and "…" in rows[1] and "x" * 100 not in rows[1]
    assert "0x000102030405" in rows[2]
    assert "a b" in rows[3]

    shown = (await runstore(store, "runs", "show", run.id, "--json")).lines()
    assert len(shown) == 1
    assert shown[0]["run_id"] == run.id and shown[0]["session_id"] == session_id
    payloads = [record_from_line(json.dumps(r)).payload for r in shown[0]["records"]]
    assert payloads[1:] == [long_text, binary, b"a\nb"]
    assert shown[0]["records"][1]["payload"] == {"answer": "x" * 200}  # JSON, as export has it
    missing = await runstore(store, "runs", "show", unique("nope"), "--json")
    assert missing.code == 1 and missing.err.startswith("runstore: RUN_NOT_FOUND:")


async def test_records_list_of_a_run_and_of_a_session(store: Store) -> None:
    session_id = unique("records")
    await create(store, session_id, 1_700_000_000)
    first = await started(store, session_id=session_id, agent_id="a")
    second = await started(store, session_id=session_id, agent_id="a")
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=first.record("k1")))
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=second.record("k2")))
    of_run = await runstore(store, "records", "list", "--run", first.id, "--json")
    assert of_run.code == 0, of_run.err
    assert [(r["id"], r["event_key"]) for r in of_run.lines()] == [("1", "started"), ("2", "k1")]
    of_session = await runstore(store, "records", "list", "--session", session_id, "--json")
    assert [(r["run_id"], r["event_key"]) for r in of_session.lines()] == [
        (first.id, "started"),
        (second.id, "started"),
        (first.id, "k1"),
        (second.id, "k2"),
    ]
    paged = await runstore(store, "records", "list", "--session", session_id, "--page-size", "3")
    assert len(paged.out.splitlines()) == 2 + 3
    cursor = paged.err.split("--page-token ")[1].split()[0]
    rest = await runstore(
        store, "records", "list", "--session", session_id, "--page-token", cursor, "--json"
    )
    assert [r["event_key"] for r in rest.lines()] == ["k2"]
    bad = await runstore(store, "records", "list", "--run", first.id, "--page-token", "x")
    assert bad.code == 1 and bad.err.startswith("runstore: INVALID_ARGUMENT_READ:")
    assert "(field cursor)" in bad.err


async def test_records_list_by_type_and_runs_list_by_parent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``records list --type`` reads on past stretches without a match (10,000
    records each; 2 here); ``runs list --parent`` lists exactly the children."""
    monkeypatch.setattr(paging, "TYPED_SCAN", 2)
    session_id = unique("typed")
    await create(store, session_id, 1_700_000_000)
    parent = await started(store, session_id=session_id, agent_id="a")
    kinds = ["x", "x", "x", "x", "wanted", "x", "wanted"]
    batch = [parent.record(f"k{i}", type=kind) for i, kind in enumerate(kinds)]
    await store.runtime.AppendRunRecords(rs.AppendRunRecordsRequest(records=batch))
    typed = await runstore(store, "records", "list", "--run", parent.id, "--type", "wanted")
    assert typed.code == 0, typed.err
    as_json = await runstore(
        store, "records", "list", "--run", parent.id, "--type", "wanted", "--all", "--json"
    )
    assert [(r["id"], r["type"]) for r in as_json.lines()] == [("6", "wanted"), ("8", "wanted")]
    two = await runstore(
        store, "records", "list", "--run", parent.id, "--type", "wanted", "--type", "run_started",
        "--all", "--json",
    )  # fmt: skip
    assert [r["id"] for r in two.lines()] == ["1", "6", "8"]
    no_run = await runstore(store, "records", "list", "--session", session_id, "--type", "x")
    assert no_run.code != 0 and "--run" in no_run.err

    child = run_start(session_id=session_id, agent_id="b", parent_run_id=parent.id)
    await store.runtime.StartChildRun(child.child_request("a"))
    await started(store, session_id=session_id, agent_id="c")  # a root: not a child
    children = await runstore(store, "runs", "list", "--parent", parent.id, "--json")
    assert children.code == 0, children.err
    assert [r["run_id"] for r in children.lines()] == [child.id]
    both = await runstore(store, "runs", "list", "--parent", parent.id, "--root-only")
    assert both.code != 0 and "--parent" in both.err


async def test_records_tail_prints_the_last_records(store: Store) -> None:
    session_id = unique("tail")
    await create(store, session_id, 1_700_000_000)
    run = await started(store, session_id=session_id, agent_id="a")
    for index in range(5):
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record(f"k{index}"))
        )
    tail = await runstore(store, "records", "tail", "--session", session_id, "-n", "3", "--json")
    assert tail.code == 0, tail.err
    assert [r["event_key"] for r in tail.lines()] == ["k2", "k3", "k4"]
    human = await runstore(store, "records", "tail", "--session", session_id, "-n", "2")
    assert "k3" in human.out and "k4" in human.out and "k2" not in human.out
    missing = await runstore(store, "records", "tail", "--session", unique("nope"))
    assert missing.code == 1 and missing.err.startswith("runstore: SESSION_NOT_FOUND:")


async def test_records_tail_follow_prints_each_record_once_as_it_commits(store: Store) -> None:
    """``--follow`` of a run ends with the run; records appended while the
    command runs appear exactly once, after the backlog, in order."""
    run = await started(store, session_id="", agent_id="a")
    following = asyncio.ensure_future(
        runstore(store, "records", "tail", "--run", run.id, "-n", "100", "--follow", "--json")
    )
    for index in range(5):
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record(f"live-{index}"))
        )
    await store.runtime.RecordRunTerminal(run.terminal_request())
    result = await asyncio.wait_for(following, 60)
    assert result.code == 0, result.err
    keys = [r["event_key"] for r in result.lines()]
    assert keys == [r.event_key for r in await store.records(run.id)]
    assert len(keys) == 7
    # Following a run that has already ended prints its tail and ends at once.
    again = await runstore(store, "records", "tail", "--run", run.id, "--follow", "--json")
    assert again.code == 0, again.err
    assert [r["event_key"] for r in again.lines()] == keys


async def test_health_in_both_formats(store: Store) -> None:
    human = await runstore(store, "health")
    assert (human.code, human.out.strip()) == (0, "SERVING")
    # The server's version, from the response's initial metadata (x-runstore-version).
    assert (await runstore(store, "health", "--json")).lines() == [
        {"service": "", "status": "SERVING", "server_version": server_version}
    ]
    unknown = await runstore(store, "health", "--service", "no.such.Service")
    assert unknown.code == 1 and unknown.err.startswith("runstore: NOT_FOUND")
    assert "the server has no service named 'no.such.Service'" in unknown.err
    assert len(unknown.err.splitlines()) == 1


# --- usage and connections -------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["records", "list"],
        ["records", "list", "--run", "r", "--session", "s"],
        ["sessions", "list", "--created-after", "yesterday"],
        ["sessions", "list", "--status", "paused"],
        ["runs", "list", "--session", "s", "--sessionless"],
        ["sessions", "show"],
        ["sessions", "list", "--token", "t", "--token-file", "/dev/null"],
        ["sessions", "list", "--tls-cert", "/dev/null"],
        ["sessions", "list", "--token-file", "/nonexistent/token"],
    ],
)
async def test_usage_errors_exit_2(store: Store, argv: list[str]) -> None:
    result = await runstore(store, *argv)
    assert result.code == 2, result
    assert "Traceback" not in result.err


async def test_a_token_on_the_command_line_warns(store: Store, tmp_path: Path) -> None:
    result = await runstore(store, "health", "--token", "secret-token")
    assert result.code == 0
    assert "warning: --token is visible to other users" in result.err
    token_file = tmp_path / "token"
    token_file.write_text("secret-token\n")
    quiet = await runstore(store, "health", "--token-file", str(token_file))
    assert quiet.code == 0 and quiet.err == ""


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_entry_point_against_no_server_and_a_usage_error() -> None:
    """What a shell sees: exit codes, one line on stderr, never a traceback."""
    target = f"127.0.0.1:{_free_port()}"
    down = subprocess.run(
        [sys.executable, "-m", "runstore.cli", "sessions", "list", "--target", target],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 1, down
    assert down.stderr.startswith("runstore: UNAVAILABLE:")
    assert "Traceback" not in down.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "runstore.cli", "runs", "show"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert usage.returncode == 2 and "usage: runstore runs show" in usage.stderr


# --- one output shape ------------------------------------------------------------


async def test_records_list_json_has_the_payload_as_export_has_it(store: Store) -> None:
    run = await started(store, session_id="", agent_id="a")
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("json", payload=b'{"answer":42}'))
    )
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=run.record("bytes", payload=b"\xff\x00"))
    )
    listed = await runstore(store, "records", "list", "--run", run.id, "--json")
    exported = await runstore(store, "export", "--run", run.id)
    assert listed.code == exported.code == 0, listed.err + exported.err
    assert listed.lines() == exported.lines()
    assert listed.lines()[1]["payload"] == {"answer": 42}
    assert listed.lines()[2]["payload_base64"] == base64.b64encode(b"\xff\x00").decode()


def _columns(header: str, names: list[str]) -> list[int]:
    return [header.index(name) for name in names]


async def test_follow_rows_line_up_with_the_header_and_times_read_one_way(store: Store) -> None:
    run = await started(store, session_id="", agent_id="a")
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record("before")))
    following = asyncio.ensure_future(
        runstore(store, "records", "tail", "--run", run.id, "-n", "100", "--follow")
    )
    for key in ("live-turnless", "live-a-much-longer-event-key-than-any-before"):
        await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=run.record(key)))
    await store.runtime.RecordRunTerminal(run.terminal_request())
    result = await asyncio.wait_for(following, 60)
    assert result.code == 0, result.err
    header, _rule, *rows = result.out.splitlines()
    assert all(row.strip() for row in rows), result.out  # no blank line for an empty turn
    assert len(rows) == 5
    names = ["ID", "TYPE", "TIMESTAMP", "RUN", "TURN", "EVENT KEY"]
    starts = _columns(header, names)
    for row in rows:
        # Each cell begins where its header does (the event key may push BYTES out).
        for start in starts:
            assert row[start] != " " and (start == 0 or row[start - 1] == " "), (row, header)
        turn = row[starts[4] :].split()[0]
        assert turn == "-"
    timestamp = rows[0][starts[2] :].split()[0]
    assert datetime.fromisoformat(timestamp).tzinfo is not None and timestamp.endswith("Z")
    assert len(timestamp) == len("2026-12-01T10:00:00.000Z")
    shown = await runstore(store, "runs", "show", run.id)
    started_line = next(line for line in shown.out.splitlines() if line.startswith("started"))
    assert started_line.split()[1] == timestamp  # show and the tables write times alike
