"""A server with the console on, seeded with every kind of screen, for the console tests.

The server runs in the test's event loop (``build_server`` with
``console_listen`` on port 0), so the HTTP client and the browser reach it over
a real socket, as a person's browser would (an in-process ASGI transport would
buffer a live stream whole).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc

from runstore.contract import lifecycle
from runstore.server.app import (
    RunningServer,
    Telemetry,
    build_server,
    create_stores,
    open_database,
    shutdown,
)
from runstore.server.config import ServerConfig
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.quotas import Quotas
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests.certs import Authority
from tests.secured import ROLES, Entry, channel_with_token, write_auth_file
from tests.support import Run, Store, now_ms, run_start, unique

SCRIPT_PAYLOAD: Final = b'{"text":"<script>window.__xss=1</script>"}'
IMG_PAYLOAD: Final = b'"\\"><img src=x onerror=\\"window.__xss=2\\">"'
"""A JSON string that closes an attribute and opens an image whose onerror runs."""
TOOL_INPUT_XSS: Final = "<img src=x onerror=window.__xss=3>"
FAILURE_MESSAGE: Final = "tool <b>fetch</b> timed out"
"""The seeded failed run's failure message: markup, to be shown as text."""
ELSEWHERE: Final = "reader-of-team-b"
"""The key in ``ConsoleUnderTest.tokens`` of a reader bound only to namespace team-b."""


@dataclass
class Seeded:
    """What the console must show (IDs of the seeded sessions and runs)."""

    session_id: str = ""
    root: Run | None = None
    child: Run | None = None
    failed: Run | None = None
    """A child of ``root`` that failed (its failure's message is hostile markup)."""
    suspended: Run | None = None
    successor: Run | None = None
    canceled: Run | None = None
    one_shot: Run | None = None
    transcript_run: Run | None = None


@dataclass
class ConsoleUnderTest:
    running: RunningServer
    base: str
    """http://127.0.0.1:PORT of the console."""
    store: Store
    """gRPC stubs; with authentication on, every call carries the admin token."""
    tokens: dict[str, str]
    """Role → bearer token (empty with authentication off)."""
    database: Path
    seeded: Seeded = field(default_factory=Seeded)

    def bearer(self, role: str = "reader") -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[role]}"}


@asynccontextmanager
async def console_server(
    directory: Path,
    *,
    auth: bool = True,
    tls: Authority | None = None,
    extra: Mapping[str, Entry] | None = None,
    telemetry: Telemetry | None = None,
    quota_clock: Callable[[], float] | None = None,
    access_log: bool | None = None,
    settings: Mapping[str, Any] | None = None,
) -> AsyncIterator[ConsoleUnderTest]:
    """The server with its console; with ``tls``, both listen with a certificate
    for localhost that ``tls`` issued (and its CA is ``directory / "ca.crt"``);
    ``extra`` principals beside one of each role (bound to ``default``);
    ``telemetry`` as ``build_server`` takes it; the quotas' rate buckets on
    ``quota_clock`` (a test moves it; the keeper never ticks); ``access_log``
    as ``--access-log`` sets it; ``settings``: more ``ServerConfig`` fields."""
    entries = {role: Entry(role) for role in ROLES}
    # A reader of another namespace: the console must refuse it ``default``'s pages.
    entries[ELSEWHERE] = Entry("reader", namespaces=["team-b"])
    entries.update(extra or {})
    cert = key = ""
    if tls is not None:
        cert_path, key_path = tls.server().write(directory, "server")
        (directory / "ca.crt").write_bytes(tls.pem)
        cert, key = str(cert_path), str(key_path)
    auth_file = write_auth_file(directory / "auth.toml", entries) if auth else None
    database = directory / "runstore.db"
    config = ServerConfig(
        listen="127.0.0.1:0",
        console_listen="127.0.0.1:0",
        database_url=f"sqlite:///{database}",
        auth_file=str(auth_file) if auth_file is not None else "",
        migrate=True,
        watch_poll_seconds=0.5,
        tls_cert=cert,
        tls_key=key,
        access_log=access_log,
        **(settings or {}),
    )
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        stores = create_stores(config, db)
        if quota_clock is not None:
            assert stores.namespaces is not None
            directory = stores.namespaces.directory
            stores = dataclasses.replace(
                stores,
                quotas=QuotaKeeper(
                    Quotas(directory, clock=quota_clock),
                    directory,
                    db.backend,
                    interval=3600,
                ),
            )
        running = await build_server(config, stores, telemetry=telemetry)
        stack.push_async_callback(shutdown, running, 0)
        assert running.console is not None
        target = f"127.0.0.1:{running.port}"
        channel = (
            channel_with_token(target, entries["admin"].token)
            if auth and tls is None
            else grpc.aio.insecure_channel(target)
        )
        stack.push_async_callback(channel.close, None)
        yield ConsoleUnderTest(
            running,
            f"{'https://localhost' if tls else 'http://127.0.0.1'}:{running.console.port}",
            Store(channel, target=target),
            {role: entry.token for role, entry in entries.items()} if auth else {},
            database,
        )


def transcript_payload(messages: list[dict[str, object]]) -> bytes:
    return json.dumps(messages).encode()


async def seed(under: ConsoleUnderTest) -> Seeded:
    """A session with a root run (hostile payloads), a child, a suspended run and
    its successor, a canceled run, a transcript with a tool call and its result,
    and a sessionless one-shot run."""
    store, seeded = under.store, under.seeded
    seeded.session_id = await store.session(unique("console-session"))
    root = seeded.root = await store.root(seeded.session_id, agent_id="planner")
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=root.record("xss-script", "note", SCRIPT_PAYLOAD))
    )
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=root.record("xss-img", "note", IMG_PAYLOAD))
    )
    big = json.dumps({"rows": [{"index": i, "text": "x" * 40} for i in range(200)]}).encode()
    await store.runtime.AppendRunRecord(
        rs.AppendRunRecordRequest(record=root.record("big", "tool_result_received", big))
    )
    child = seeded.child = run_start(
        session_id=seeded.session_id, parent_run_id=root.id, agent_id="searcher"
    )
    await store.runtime.StartChildRun(child.child_request(root.start.agent_id))
    failed = seeded.failed = run_start(
        session_id=seeded.session_id,
        parent_run_id=root.id,
        agent_id="fetcher",
        labels={"tier": "gold"},
    )
    await store.runtime.StartChildRun(
        failed.child_request(root.start.agent_id, link_key="linked-2", tool_call_id="c2")
    )
    await store.runtime.RecordRunTerminal(
        failed.terminal_request(
            pb.RUN_STATUS_FAILED,
            failure=lifecycle.RunFailure(
                message=FAILURE_MESSAGE, kind="timeout", code="E42", retryable=True
            ),
            at_ms=now_ms() + 1500,
        )
    )

    suspended = seeded.suspended = await store.root(seeded.session_id, agent_id="waiter")
    await store.runtime.RecordRunSuspension(
        suspended.suspension_request(data=b'{"pending":"approval"}')
    )
    successor = seeded.successor = run_start(
        session_id=seeded.session_id, agent_id="waiter", predecessor_run_id=suspended.id
    )
    await store.runtime.StartRootRun(successor.root_request())

    canceled = seeded.canceled = await store.root(seeded.session_id, agent_id="stopper")
    await store.runtime.RecordRunCancellation(
        canceled.cancellation_request(key="cancel-by-operator", reason="user_requested")
    )

    chat = seeded.transcript_run = await store.root(seeded.session_id, agent_id="chat")
    messages = [
        {"role": "user", "parts": [{"kind": "text", "text": "What is the weather?"}]},
        {
            "role": "assistant",
            "parts": [
                {
                    "kind": "tool_use",
                    "id": "tool-call-1",
                    "name": "weather.lookup",
                    "input": {"city": "Paris", "note": TOOL_INPUT_XSS},
                }
            ],
        },
    ]
    results = [
        {
            "role": "user",
            "parts": [
                {"kind": "tool_result", "tool_use_id": "tool-call-1", "content": {"sky": "clear"}}
            ],
        },
        {"role": "assistant", "parts": [{"kind": "text", "text": "Clear skies in Paris."}]},
    ]
    for key, body in (("seed", messages), ("append", results)):
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(
                record=chat.record(key, lifecycle.TRANSCRIPT_APPENDED, transcript_payload(body))
            )
        )
    seeded.one_shot = await store.one_shot(agent_id="batch-job")
    return seeded


def seed_long_run(database: Path, run: Run, count: int) -> None:
    """Adds ``count`` records to ``run`` straight into the SQLite file (one
    INSERT ... SELECT over a generated series), as the append path would store
    them: dense IDs and session positions after the run's existing ones."""
    with sqlite3.connect(database, timeout=30) as connection:
        (last_id,) = connection.execute(
            "SELECT COALESCE(MAX(record_id), 0) FROM records WHERE run_id = ?", (run.id,)
        ).fetchone()
        (last_position,) = connection.execute(
            "SELECT COALESCE(MAX(session_position), 0) FROM records WHERE session_id = ?",
            (run.start.session_id,),
        ).fetchone()
        at = now_ms()
        connection.execute(
            """
            WITH RECURSIVE series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM series WHERE n < ?)
            INSERT INTO records (run_id, record_id, event_key, agent_id, session_id, turn_id,
                                 type, payload, payload_size, timestamp_ms, session_position)
            SELECT ?, ? + n, 'bulk-' || (? + n), ?, ?, 'turn-' || (n / 100), 'tool_result_received',
                   CAST('{"n":' || n || '}' AS BLOB), LENGTH('{"n":' || n || '}'), ? + n,
                   ? + n
            FROM series
            """,
            (
                count,
                run.id,
                last_id,
                last_id,  # keys by record ID: a run seeded twice keeps them unique
                run.start.agent_id,
                run.start.session_id,
                at,
                last_position,
            ),
        )


def seed_session_runs(database: Path, model: Run, count: int) -> None:
    """Adds ``count`` runs to ``model``'s session straight into the SQLite file,
    copies of its row (one INSERT ... SELECT over a generated series) with
    their own IDs (``<model>-bulk-N``) and start times, one millisecond apart
    before the model's (so later tests' newest runs stay on their first pages)."""
    with sqlite3.connect(database, timeout=30) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(runs)")]
        chosen = {
            "run_id": "? || '-bulk-' || n",
            "started_at_ms": "started_at_ms - n",
            "start_key": "'started'",
        }
        picked = ", ".join(chosen.get(column, column) for column in columns)
        connection.execute(
            f"""
            WITH RECURSIVE series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM series WHERE n < ?)
            INSERT INTO runs ({", ".join(columns)})
            SELECT {picked} FROM runs, series WHERE run_id = ?
            """,
            (count, model.id, model.id),
        )
