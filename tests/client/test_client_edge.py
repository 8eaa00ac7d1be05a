"""The client's edge, against a real server: a wrong argument type is a
``TypeError`` naming the argument before any call, and a canceled terminal
built with ``records.run_terminal`` is one the server accepts, whether nobody
asked for the cancellation or somebody did (docs/clients/python.md)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from runstore.client import (
    NO_RETRY,
    RemoteSessionAdmin,
    RemoteStore,
    RunRecord,
    RunStart,
    RunStatus,
    records,
)
from runstore.contract import lifecycle
from tests.cli.test_admin_cli import runstore
from tests.support import Store, serving
from tests.test_docs import readme_worker


async def test_wrong_argument_types_name_the_argument(store: Store) -> None:
    async with RemoteStore(store.target, retry=NO_RETRY) as client:
        with pytest.raises(TypeError, match=r"^cursor must be a str: '' for the first page"):
            await client.list_run_records("run-1", 0, 100)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^limit must be an int, not str '100'"):
            await client.list_session_run_records("s", "", "100")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^run_id must be a str, not int 7"):
            await client.load_run(7)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^command must be a RunTerminal, not RunStatus"):
            await client.record_run_terminal(RunStatus.COMPLETED)  # type: ignore[arg-type]
        run = RunStart(run_id="r", agent_id="a", started_at=records.now())
        text_payload = RunRecord(
            event_key="k",
            run_id="r",
            agent_id="a",
            type="note",
            payload='{"note":"x"}',  # type: ignore[arg-type]
            timestamp=records.now(),
        )
        with pytest.raises(TypeError, match=r"^RunRecord.payload must be bytes"):
            await client.append_run_record(text_payload)
        with pytest.raises(TypeError, match=r"^records\[1\] must be a RunRecord, not RunStart"):
            await client.append_run_records(
                [records.run_started_record(run), run]  # type: ignore[list-item]
            )
        with pytest.raises(TypeError, match=r"^cursor must be a str"):
            client.watch_run_records("r", 5)  # type: ignore[arg-type]
    async with RemoteSessionAdmin(store.target, retry=NO_RETRY) as host:
        with pytest.raises(TypeError, match=r"^created_at must be a datetime"):
            await host.create_session("s", "2026-12-01")  # type: ignore[arg-type]


async def test_a_canceled_terminal_from_run_terminal_is_accepted(store: Store) -> None:
    async with (
        RemoteStore(store.target, retry=NO_RETRY) as client,
        RemoteSessionAdmin(store.target, retry=NO_RETRY) as host,
    ):
        session = await host.create_session(f"s-{uuid.uuid4().hex[:10]}", records.now())

        async def started() -> RunStart:
            run = RunStart(
                run_id=f"r-{uuid.uuid4().hex[:10]}",
                agent_id="a",
                session_id=session.id,
                started_at=records.now(),
            )
            await client.start_root_run(records.root_run_start(run))
            return run

        async def ends_canceled(terminal_of: object, expected_reason: str) -> None:
            terminal = records.run_terminal(terminal_of, RunStatus.CANCELED)  # type: ignore[arg-type]
            await client.record_run_terminal(terminal)
            meta = await client.load_run(terminal.run_id)
            assert meta.status is RunStatus.CANCELED
            payload = lifecycle.decode_run_completed(terminal.record.payload)
            assert payload.cancellation_reason == expected_reason

        # Nobody asked: engine_canceled.
        await ends_canceled(await started(), lifecycle.REASON_ENGINE_CANCELED)
        # Somebody asked: the run's metadata carries the reason the ending repeats.
        asked = await started()
        await client.record_run_cancellation(records.run_cancellation(asked, "user_requested"))
        await ends_canceled(await client.load_run(asked.run_id), "user_requested")
        # Or the reason is passed along with the run's start.
        passed = await started()
        cancellation = records.run_cancellation(passed, "deadline")
        await client.record_run_cancellation(cancellation)
        terminal = records.run_terminal(
            passed, RunStatus.CANCELED, cancellation_reason=cancellation.reason
        )
        await client.record_run_terminal(terminal)
        assert (await client.load_run(passed.run_id)).status is RunStatus.CANCELED


def test_record_timestamps_must_be_datetimes() -> None:
    from runstore.client import convert

    record = RunRecord(
        event_key="k",
        run_id="r",
        agent_id="a",
        type="note",
        payload=b"{}",
        timestamp=1_700_000_000,  # type: ignore[arg-type]
    )
    with pytest.raises(TypeError, match=r"^RunRecord.timestamp must be a datetime"):
        convert.record(record)
    assert isinstance(records.now(), datetime)


async def test_the_readme_payload_shows_as_json_in_listings_and_export(tmp_path: Path) -> None:
    """The README's worker, as written, on a server of its own: its note comes
    back as JSON from ``records list --json`` and ``export``; binary as base64."""
    async with serving(f"sqlite:///{tmp_path / 'readme.db'}") as server:
        script = readme_worker().replace('"127.0.0.1:50051"', repr(server.target))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
        )
        await process.communicate()
        assert process.returncode == 0
        async with RemoteStore(server.target, retry=NO_RETRY) as client:
            meta = await client.load_run("turn-1")
        listed = await runstore(server, "records", "list", "--run", meta.run_id, "--json")
        exported = await runstore(server, "export", "--run", meta.run_id)
    assert listed.code == exported.code == 0, listed.err + exported.err
    assert listed.lines() == exported.lines()
    (note,) = [line for line in listed.lines() if line["type"] == "planner_note"]
    assert note["payload"] == {"note": "check the weather"}
    assert "payload_base64" not in note
    assert records.json_payload({"a": "é", "b": [1]}) == '{"a":"é","b":[1]}'.encode()
