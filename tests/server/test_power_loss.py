"""Power loss on SQLite: what an acknowledged write survives when the machine
loses every write not yet synced.

Killing the server process proves nothing here: the kernel keeps the page
cache, so a killed process loses nothing at any ``synchronous`` level. These
tests put the database on ``tests/power_loss_fs.py``, a FUSE layer that keeps
every write in memory until it is synced and drops all of it on a simulated
power cut, run a real ``runstore serve`` on it under concurrent writers, cut
the power with calls in flight, kill the server, and open the file the disk
kept with a fresh server and with sqlite itself.

- ``FULL`` (the default): every acknowledged record is there, byte for byte,
  and the file passes ``PRAGMA integrity_check``.
- ``NORMAL``: the file is intact and what is lost is the tail of each run's
  acknowledged records, those with no sync after them (the last acknowledged
  commits), as docs/operating.md says.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes.util
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from runstore.server.db import migrate
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import types_pb2 as pb
from tests import needs
from tests.processes import server_process
from tests.support import Store, run_start, unique

WRITERS = 8
CUT_AFTER = 160
"""Acknowledged appends before the power fails (with every writer in flight)."""
FS = Path(__file__).parents[1] / "power_loss_fs.py"


def _fuse_mark() -> pytest.MarkDecorator:
    """No /dev/fuse is the machine's (a container without the device); a
    missing libfuse or fusermount3 is a package .ci/run installs (fuse3)."""
    if not Path("/dev/fuse").exists():
        return needs.unless("/dev/fuse", "no /dev/fuse on this machine", fixable=False)
    if ctypes.util.find_library("fuse3") is None and ctypes.util.find_library("fuse") is None:
        return needs.unless("fuse3", "no libfuse")
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return needs.unless("fuse3", "not root and no fusermount3")
    return needs.unless("fuse3", None)


pytestmark = _fuse_mark()


class PowerLossDisk:
    """The FUSE layer's process: a mount over ``backing`` that can lose power."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing, self.mountpoint = backing, mountpoint
        self.process = subprocess.Popen(
            [sys.executable, str(FS), str(backing), str(mountpoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def _ask(self, command: str) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        word, number = self.process.stdout.readline().split()
        assert word == command
        return int(number)

    def cut(self) -> int:
        """The power fails; returns how many unsynced bytes were dropped."""
        return self._ask("cut")

    def syncs(self) -> int:
        return self._ask("syncs")

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        subprocess.run(["umount", "-l", str(self.mountpoint)], check=False, capture_output=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerLossDisk]:
    backing, mountpoint = tmp_path / "disk", tmp_path / "mnt"
    backing.mkdir()
    mountpoint.mkdir()
    disk = PowerLossDisk(backing, mountpoint)
    try:
        for _ in range(400):  # bounded wait for the mount to appear
            if os.path.ismount(mountpoint):
                break
            assert disk.process.poll() is None, "the FUSE layer exited"
            time.sleep(0.025)
        assert os.path.ismount(mountpoint)
        yield disk
    finally:
        disk.close()


@dataclass
class Ledger:
    """Every append the server acknowledged, per run, in order."""

    acked: dict[str, list[tuple[str, str, bytes]]] = field(default_factory=dict)
    count: int = 0
    cut: bool = False
    reached: asyncio.Event = field(default_factory=asyncio.Event)


async def _writer(store: Store, ledger: Ledger, index: int) -> None:
    """One session, one run, appends one after another until the power fails;
    before the cut every call must succeed."""
    session = await store.session(unique(f"power-{index}"))
    run = run_start(session_id=session)
    await store.runtime.StartRootRun(run.root_request())
    acked = ledger.acked.setdefault(run.id, [])
    for number in range(100_000):
        record = run.record(f"r{number:05d}", payload=b'{"n":%d,"pad":"%s"}' % (number, b"x" * 200))
        try:
            response = await store.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=record), timeout=30
            )
        except grpc.aio.AioRpcError:
            if ledger.cut:
                return  # the disk is gone: this call was never acknowledged
            raise
        acked.append((record.event_key, response.id, record.payload))
        ledger.count += 1
        if ledger.count >= CUT_AFTER:
            ledger.reached.set()


async def _stored(
    store: Store, run_id: str, *, run_may_be_lost: bool = False
) -> dict[str, tuple[str, bytes]]:
    """The run's stored records by key (none when its start was lost too and
    ``run_may_be_lost``)."""
    records: dict[str, tuple[str, bytes]] = {}
    cursor = ""
    while True:
        try:
            page = await store.runtime.ListRunRecords(
                rs.ListRunRecordsRequest(run_id=run_id, cursor=cursor, limit=1000), timeout=30
            )
        except grpc.aio.AioRpcError as err:
            if run_may_be_lost and err.code() == grpc.StatusCode.NOT_FOUND and not cursor:
                return {}
            raise
        records.update({r.event_key: (r.id, r.payload) for r in page.events})
        if not page.next_cursor:
            return records
        cursor = page.next_cursor


@contextlib.asynccontextmanager
async def _server(
    url: str, synchronous: str
) -> AsyncIterator[tuple[Store, asyncio.subprocess.Process]]:
    async with (
        server_process("--database-url", url, "--sqlite-synchronous", synchronous) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        yield Store(channel, target=server.target), server.process


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


async def _power_cut_under_load(disk: PowerLossDisk, synchronous: str) -> tuple[Ledger, int]:
    """Writers append through a real server on the disk; the power fails with
    their calls in flight; the server is killed. Returns what was acknowledged
    and the unsynced bytes the cut dropped."""
    await migrate.ensure_schema(f"sqlite:///{disk.backing / 'power.db'}", migrate=True)
    ledger = Ledger()
    async with _server(f"sqlite:///{disk.mountpoint / 'power.db'}", synchronous) as (
        store,
        process,
    ):
        writers = [asyncio.ensure_future(_writer(store, ledger, i)) for i in range(WRITERS)]
        try:
            await asyncio.wait(
                [asyncio.ensure_future(ledger.reached.wait()), *writers],
                return_when=asyncio.FIRST_COMPLETED,
            )
            for writer in writers:
                if writer.done():
                    writer.result()  # a writer failed before the cut
            ledger.cut = True
            dropped = disk.cut()
            process.kill()
            await process.wait()
            await asyncio.wait_for(asyncio.gather(*writers), 60)
        finally:
            for writer in writers:
                writer.cancel()
            await asyncio.gather(*writers, return_exceptions=True)
    disk.close()
    return ledger, dropped


async def test_full_keeps_every_acknowledged_record_through_a_power_cut(
    disk: PowerLossDisk,
) -> None:
    ledger, dropped = await _power_cut_under_load(disk, "FULL")
    assert ledger.count >= CUT_AFTER
    path = disk.backing / "power.db"
    assert _integrity(path) == "ok"
    async with _server(f"sqlite:///{path}", "FULL") as (store, _):
        for run_id, acked in ledger.acked.items():
            stored = await _stored(store, run_id)
            missing = [key for key, _, _ in acked if key not in stored]
            assert not missing, f"{len(missing)} acknowledged records of {run_id} lost"
            for key, record_id, payload in acked:
                assert stored[key] == (record_id, payload)
            run = (await store.runtime.LoadRun(rs.LoadRunRequest(run_id=run_id))).run
            assert run.status == pb.RUN_STATUS_RUNNING
    assert _integrity(path) == "ok"
    print(
        f"\npower cut under FULL: {ledger.count} acknowledged records, all kept; "
        f"{dropped} unsynced bytes dropped"
    )


async def test_normal_loses_the_acknowledged_tail_not_yet_synced(disk: PowerLossDisk) -> None:
    """Under NORMAL a commit is acknowledged before any sync: the power cut
    takes the records acknowledged since the last checkpoint (a tail of each
    run), and nothing else; the file stays intact."""
    await migrate.ensure_schema(f"sqlite:///{disk.backing / 'power.db'}", migrate=True)
    url = f"sqlite:///{disk.mountpoint / 'power.db'}"
    async with _server(url, "NORMAL") as (store, process):
        ledger = Ledger()
        await asyncio.gather(*(_appends(store, ledger, i, 40) for i in range(WRITERS)))
        # One more record, acknowledged, with no sync between its write and the
        # cut (a checkpoint in between syncs it: then try once more).
        for attempt in range(5):
            before = disk.syncs()
            tail_run = await _appends(store, ledger, WRITERS + attempt, 1)
            if disk.syncs() == before:
                break
        else:
            raise AssertionError("every attempt was followed by a checkpoint")
        disk.cut()
        process.kill()
        await process.wait()
    disk.close()
    path = disk.backing / "power.db"
    assert _integrity(path) == "ok"
    lost = 0
    async with _server(f"sqlite:///{path}", "NORMAL") as (store, _):
        for run_id, acked in ledger.acked.items():
            stored = await _stored(store, run_id, run_may_be_lost=True)
            kept = [key in stored for key, _, _ in acked]
            # What survives is a prefix of each run's acknowledged records.
            assert kept == sorted(kept, reverse=True), f"{run_id} lost a record before a kept one"
            for key, record_id, payload in acked:
                if key in stored:
                    assert stored[key] == (record_id, payload)
            lost += kept.count(False)
        tail = await _stored(store, tail_run, run_may_be_lost=True)
        assert not any(key in tail for key, _, _ in ledger.acked[tail_run])
    acked = sum(len(records) for records in ledger.acked.values())
    print(f"\npower cut under NORMAL: {lost} of {acked} acknowledged records lost")
    assert lost > 0


async def _appends(store: Store, ledger: Ledger, index: int, count: int) -> str:
    session = await store.session(unique(f"normal-{index}"))
    run = run_start(session_id=session)
    await store.runtime.StartRootRun(run.root_request())
    acked = ledger.acked.setdefault(run.id, [])
    for number in range(count):
        record = run.record(f"r{number:05d}", payload=b'{"n":%d}' % number)
        response = await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=record))
        acked.append((record.event_key, response.id, record.payload))
    return run.id
