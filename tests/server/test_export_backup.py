"""``runstore export`` and ``runstore backup`` against a live server.

Export: every JSON line decodes back to the stored record byte for byte, JSON
payloads inline and every other payload as base64. Backup: a copy taken while
writers keep appending opens and holds every record acknowledged before it began.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runstore.cli.jsonlines import record_from_line, record_line
from runstore.client import RunRecord
from runstore.server.db import backup
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from tests.cli.test_admin_cli import _main, runstore
from tests.seeds import Upload, declaration, part, synchronous_request
from tests.support import Store, now_ms, run_start, serving, started_record, unique

PAYLOADS = [
    b'{"ok":true,"n":[1,2.5,-3e-07],"s":"x"}',  # compact JSON: inline
    '{"é":"ü\u2028","nested":{"a":null}}'.encode(),  # non-ASCII compact JSON: inline
    b'{ "ok": true }',  # JSON with spaces: base64 keeps the bytes
    b'{"a":"\\u003c"}',  # an escape a compact encoding would undo: base64
    b'{"a":1,"a":2}',  # duplicate keys: base64
    b"NaN",  # not JSON: base64
    b"\xff\x00\x01binary",  # not UTF-8: base64
    b'"text"',  # a JSON string: inline
]


async def test_export_lines_decode_to_the_stored_records_byte_for_byte(store: Store) -> None:
    session_id = await store.session()
    first = await store.root(session_id)
    second = await store.root(session_id)
    base = now_ms()
    for index, payload in enumerate(PAYLOADS):
        run = (first, second)[index % 2]
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(
                record=run.record(f"k{index}", payload=payload, at_ms=base + index * 7 + 1)
            )
        )
    stored = await store.session_records(session_id)
    assert len(stored) == len(PAYLOADS) + 2  # with each run's started record

    result = await runstore(store, "export", "--session", session_id)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert len(lines) == len(stored)
    for line, event in zip(lines, stored, strict=True):
        decoded = record_from_line(line)
        assert decoded.payload == event.payload
        assert decoded.timestamp == event.timestamp.ToDatetime(tzinfo=decoded.timestamp.tzinfo)
        assert (decoded.id, decoded.event_key, decoded.run_id, decoded.agent_id) == (
            event.id,
            event.event_key,
            event.run_id,
            event.agent_id,
        )
        assert (decoded.session_id, decoded.turn_id, decoded.type) == (
            event.session_id,
            event.turn_id,
            event.type,
        )
        assert line.count('"payload') == 1
    by_key = {record_from_line(line).event_key: line for line in lines}
    assert '"payload":{"ok":true' in by_key["k0"]
    assert '"payload":"text"' in by_key["k7"]
    for key in ("k2", "k3", "k4", "k5", "k6"):
        assert '"payload_base64":' in by_key[key]
    assert '"payload":{"é":"ü\\u2028"' in by_key["k1"]  # UTF-8, only U+2028 escaped

    one_run = await runstore(store, "export", "--run", first.id)
    assert one_run.code == 0, one_run.err
    assert [record_from_line(line).run_id for line in one_run.out.splitlines()] == [first.id] * (
        1 + len(PAYLOADS[::2])
    )


async def test_export_of_a_seed_writes_its_history_then_its_preparation(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    await upload.history(b'[{"role":"user","parts":[{"text":"hi"}]}]')
    await upload.append(part(unique("p"), str(upload.end), b"\xff\x00", final=False))
    await upload.append(part(unique("p"), str(upload.end), b'"tail"]', final=True))
    await upload.compiled(b"compiled start")
    await upload.publish()
    run = run_start(run_id=upload.run_id, seed_end_id=str(upload.seed_end))
    await store.runtime.StartSynchronousRun(
        sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    )
    result = await runstore(store, "export", "--seed", run.id)
    assert result.code == 0, result.err
    lines = [json.loads(line) for line in result.out.splitlines()]
    assert [line["id"] for line in lines] == ["1", "2", "3", "4"]
    assert {line["seed_of"] for line in lines} == {run.id}
    assert lines[0]["messages"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert lines[1]["literal_part"] == {"final": False, "data_base64": "/wA="}
    assert lines[2]["literal_part"] == {"final": True, "data_base64": "InRhaWwiXQ=="}
    assert lines[3]["prepared_base64"] == base64.b64encode(b"compiled start").decode()
    assert [line["key"] for line in lines] == upload.keys
    unseeded = await runstore(store, "export", "--seed", (await store.one_shot()).id)
    assert unseeded.code == 1 and "started without a seed" in unseeded.err


async def test_export_of_an_unknown_run_fails_with_its_reason(store: Store) -> None:
    result = await runstore(store, "export", "--run", "no-such-run")
    assert result.code == 1
    assert "RUN_NOT_FOUND" in result.err
    assert result.out == ""


def test_record_line_has_rfc3339_milliseconds() -> None:
    record = RunRecord(
        event_key="k",
        run_id="r",
        agent_id="a",
        type="t",
        payload=b"{}",
        timestamp=datetime(2026, 12, 1, 10, 0, 0, 5000, tzinfo=UTC),
        id="1",
    )
    line = record_line(record)
    assert '"timestamp":"2026-12-01T10:00:00.005Z"' in line
    assert record_from_line(line) == record


# --- backup ---------------------------------------------------------------------


@pytest.fixture
async def sqlite_server(tmp_path: Path) -> AsyncIterator[tuple[Store, str]]:
    """A server of its own over a new SQLite file (backup is SQLite's alone)."""
    url = f"sqlite:///{tmp_path / 'served.db'}"
    async with serving(url) as store:
        yield store, url


async def test_backup_under_concurrent_writes_holds_every_acknowledged_record(
    sqlite_server: tuple[Store, str], tmp_path: Path
) -> None:
    store, database_url = sqlite_server
    writers = 8
    runs = [await store.root() for _ in range(writers)]
    acknowledged: set[tuple[str, str]] = set()
    backing_up = asyncio.Event()
    enough = asyncio.Event()
    during = 0  # acknowledged after the backup began

    async def write(run_index: int) -> None:
        nonlocal during
        run = runs[run_index]
        for index in range(400):  # bounded; stops soon after the backup is done
            key = f"w{index}"
            await store.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record(key, payload=b'{"i":%d}' % index))
            )
            acknowledged.add((run.id, key))
            if len(acknowledged) >= 300:
                enough.set()
            if backing_up.is_set():
                during += 1
                if during > 200:
                    return

    tasks = [asyncio.create_task(write(i)) for i in range(writers)]
    await enough.wait()
    target = tmp_path / "copy.db"
    before = set(acknowledged)
    backing_up.set()
    result = await asyncio.to_thread(backup.backup_sqlite, database_url, target)
    await asyncio.gather(*tasks)
    assert len(acknowledged) > len(before)  # writers went on while the copy was taken

    copy = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
    try:
        held = set(copy.execute("SELECT run_id, event_key FROM records").fetchall())
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        copy.close()
    assert before <= held
    assert result.records == len(held)
    assert not target.with_name(target.name + ".partial").exists()


async def test_a_backup_holds_seeds_and_preparations_and_serves_them(
    sqlite_server: tuple[Store, str], tmp_path: Path
) -> None:
    """Seeds, preparations and synchronous starts are in the copy (every table
    is): a server over the copy loads them as the original did."""
    store, database_url = sqlite_server
    request = await synchronous_request(store.runtime)
    await store.runtime.StartSynchronousRun(request)
    open_attempt = Upload(store.runtime, declaration())
    await open_attempt.begin()
    await open_attempt.history()
    await open_attempt.compiled()
    published = await Upload(store.runtime, declaration()).published()
    seed = sd.LoadRunSeedRequest(run_id=request.run.run_id, end_id="1")
    before = await store.runtime.LoadRunSeed(seed)
    result = await asyncio.to_thread(backup.backup_sqlite, database_url, tmp_path / "copy.db")
    assert result.seed_records == 2 + 2 + 2  # each upload's history and prepared part
    tables = ("seed_records", "seed_attempts", "seed_operations", "synchronous_runs")
    original = sqlite3.connect(f"file:{tmp_path / 'served.db'}?mode=ro", uri=True)
    copied = sqlite3.connect(f"file:{tmp_path / 'copy.db'}?mode=ro", uri=True)
    try:
        for table in tables:
            rows = f"SELECT * FROM {table} ORDER BY 1, 2"
            assert copied.execute(rows).fetchall() == original.execute(rows).fetchall(), table
            assert original.execute(rows).fetchall(), table
    finally:
        original.close()
        copied.close()
    async with serving(f"sqlite:///{tmp_path / 'copy.db'}", migrate=False) as copy:
        assert await copy.runtime.LoadRunSeed(seed) == before
        for attempt in (open_attempt, published):
            found = await copy.runtime.FindRunPreparation(attempt.find())
            assert found == await store.runtime.FindRunPreparation(attempt.find())
        run = await copy.runtime.LoadRun(rs.LoadRunRequest(run_id=request.run.run_id))
        assert run.run.seed_end_id == "1"


async def test_backup_command_refuses_postgres_and_an_existing_target(
    sqlite_server: tuple[Store, str], tmp_path: Path
) -> None:
    _, database_url = sqlite_server
    existing = tmp_path / "there.db"
    existing.write_bytes(b"keep")
    refused = _main(
        ["backup", "--database-url", "postgresql://u@127.0.0.1/x", "--to", str(tmp_path / "a.db")],
        "",
    )
    assert refused.code == 2 and "pg_dump" in refused.err
    kept = _main(["backup", "--database-url", database_url, "--to", str(existing)], "")
    assert kept.code == 2 and "exists" in kept.err
    assert existing.read_bytes() == b"keep"
    fresh = _main(["backup", "--database-url", database_url, "--to", str(tmp_path / "new.db")], "")
    assert fresh.code == 0, fresh.err
    assert "verified" in fresh.out


async def test_backup_reads_its_database_url_from_a_file_as_serve_does(
    sqlite_server: tuple[Store, str], tmp_path: Path
) -> None:
    _, database_url = sqlite_server
    url_file = tmp_path / "database-url"
    url_file.write_text(f"{database_url}\n")
    copy = tmp_path / "from-file.db"
    made = _main(["backup", "--database-url-file", str(url_file), "--to", str(copy)], "")
    assert made.code == 0, made.err
    assert "verified" in made.out and copy.exists()
    both = _main(
        ["backup", "--database-url", database_url, "--database-url-file", str(url_file),
         "--to", str(tmp_path / "both.db")],
        "",
    )  # fmt: skip
    assert both.code == 2 and "not allowed with argument" in both.err
    url_file.write_text("\n")
    empty_argv = ["backup", "--database-url-file", str(url_file), "--to", str(tmp_path / "e.db")]
    empty = _main(empty_argv, "")
    assert empty.code == 2 and empty.err == f"runstore: --database-url-file {url_file} is empty\n"
