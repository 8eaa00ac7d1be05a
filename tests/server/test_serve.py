"""``runstore serve`` as a real process: start-up, and a clean stop on SIGTERM.

The processes run as ``python -m runstore.server``, so that entry point is
exercised by every test here.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection

from runstore.contract.namespaces import DEFAULT
from runstore.server import app
from runstore.server.app import build_server, create_stores, open_database, shutdown
from runstore.server.call_scope import acting_in
from runstore.server.config import ServerConfig
from runstore.v1 import runtime_store_pb2 as rs
from tests.processes import serve_process
from tests.support import Store, outcome, run_start


async def test_sigterm_lets_in_flight_calls_finish(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with serve_process("--database-url", database) as (process, target):
        async with grpc.aio.insecure_channel(target) as channel:
            store = Store(channel, target=target)
            run = await store.root()
            requests = [rs.AppendRunRecordRequest(record=run.record(f"k{i}")) for i in range(200)]
            calls = [
                asyncio.ensure_future(outcome(store.runtime.AppendRunRecord(r))) for r in requests
            ]
            await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
            process.send_signal(signal.SIGTERM)
            results = await asyncio.gather(*calls)
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0

    tally = collections.Counter(results)
    # Calls the server had started finished; calls it had not yet picked up
    # were refused (CANCELLED or UNAVAILABLE: safe to retry, nothing written).
    assert set(tally) <= {"ok", "CANCELLED", "UNAVAILABLE"}, tally
    assert tally["ok"] >= 1
    succeeded = {f"k{i}" for i, result in enumerate(results) if result == "ok"}

    # Exactly what was acknowledged is stored, with dense IDs.
    async with (
        serve_process("--database-url", database) as (_, target),
        grpc.aio.insecure_channel(target) as channel,
    ):
        records = await Store(channel, target=target).records(run.id)
    assert {r.event_key for r in records} - {"started"} == succeeded
    assert [int(r.id) for r in records] == list(range(1, len(records) + 1))


async def test_serve_creates_the_schema_of_a_new_sqlite_file(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with serve_process("--database-url", database) as (process, target):
        async with grpc.aio.insecure_channel(target) as channel:
            run = run_start()
            store = Store(channel, target=target)
            await store.runtime.StartOneShotRun(run.one_shot_request())
            assert (await store.load(run.id)).run_id == run.id
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
    assert (tmp_path / "runstore.db").exists()


class GatedDatabase:
    """Holds every write at a gate, so calls are surely in flight."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.expected = 0

    async def _pass_gate(self) -> None:
        self.waiting += 1
        if self.waiting == self.expected:
            self.all_waiting.set()
        await self.gate.wait()

    async def write(self, fn: Any) -> Any:
        await self._pass_gate()
        return await self.inner.write(fn)

    async def append_if_writable(self, record: Any) -> Any:
        await self._pass_gate()
        return await self.inner.append_if_writable(record)

    async def start_if_new(self, run: Any, started: Any) -> Any:
        await self._pass_gate()
        return await self.inner.start_if_new(run, started)

    async def end_if_running(self, ending: Any) -> Any:
        await self._pass_gate()
        return await self.inner.end_if_running(ending)

    async def start_child_if_new(self, run: Any, link: Any, started: Any) -> Any:
        await self._pass_gate()
        return await self.inner.start_child_if_new(run, link, started)

    async def change_if_running(self, change: Any) -> Any:
        await self._pass_gate()
        return await self.inner.change_if_running(change)

    async def read(self, fn: Any) -> Any:
        return await self.inner.read(fn)

    def __getattr__(self, name: str) -> Any:
        """What is not gated is the inner database's."""
        return getattr(self.inner, name)


async def test_shutdown_finishes_in_flight_calls_and_refuses_new_ones(tmp_path: Path) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        # What is tested is the stop, not the calls' database budget: on a
        # loaded machine the held calls must not run out of it first.
        db_operation_timeout=120.0,
    )
    async with open_database(config) as db:
        gated = GatedDatabase(db.calls)
        gated.gate.set()
        running = await build_server(
            config,
            create_stores(config, dataclasses.replace(db, calls=gated)),  # type: ignore[arg-type]
        )
        target = f"127.0.0.1:{running.port}"
        async with grpc.aio.insecure_channel(target) as channel:
            store = Store(channel, target=target)
            run = await store.root()
            gated.gate.clear()
            gated.waiting, gated.expected = 0, 20
            calls = [
                asyncio.ensure_future(
                    outcome(store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=r)))
                )
                for r in (run.record(f"k{i}") for i in range(20))
            ]
            await gated.all_waiting.wait()  # all 20 handlers are inside the store
            stopping = asyncio.ensure_future(shutdown(running, grace=30))
            refused = ""
            while not refused or refused == "ok":  # until the server refuses new calls
                refused = await outcome(store.runtime.LoadRun(rs.LoadRunRequest(run_id=run.id)))
            gated.gate.set()
            results = await asyncio.gather(*calls)
            await stopping
    assert results == ["ok"] * 20
    async with open_database(config) as db:
        reopened = create_stores(config, db).runtime
        with acting_in(DEFAULT):  # read as a call in default would
            page = await reopened.list_run_records(run.id, "", 100)
    keys = [record.event_key for record in page.events]
    # Every call in flight was stored; the 20 concurrent calls may commit in any order.
    assert keys[0] == "started"
    assert sorted(keys[1:]) == sorted(f"k{i}" for i in range(20))


def test_version_is_the_installed_distribution_version() -> None:
    """``runstore --version`` and ``python -m runstore.server --version`` name the
    installed runstore-client (the program) and runstore-server (its commands)."""
    script = Path(sys.executable).with_name("runstore")
    expected = (
        f"runstore (runstore-client {metadata.version('runstore-client')}, "
        f"runstore-server {metadata.version('runstore-server')})"
    )
    for command in ([str(script)], [sys.executable, "-m", "runstore.server"]):
        done = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60, check=True
        )
        assert done.stdout.strip() == expected


class _RecordingServer:
    """What ``app._add_services`` hands the gRPC server, recorded."""

    def __init__(self) -> None:
        self.generic: list[grpc.GenericRpcHandler] = []
        self.registered: list[str] = []

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.registered.append(service)


@dataclasses.dataclass(frozen=True)
class _Details(grpc.HandlerCallDetails):  # type: ignore[misc]
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


def test_every_method_is_served_by_generic_handlers_and_none_is_registered() -> None:
    """grpcio's asyncio server waits on one future per registered method for
    every call it takes, so runstore registers none (``app._GenericHandlersOnly``),
    and its generic handlers alone serve every method of every service."""
    recording = _RecordingServer()
    stores = SimpleNamespace(
        runtime=None, watch=None, memory=None, context=None, namespaces=object()
    )
    app._add_services(cast(Any, recording), cast(Any, stores), ())
    assert recording.registered == []
    services = [
        *app.SERVICE_NAMES,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    ]
    unserved = []
    for service in services:
        descriptor = descriptor_pool.Default().FindServiceByName(service)
        assert descriptor.methods, service
        for method in descriptor.methods:
            path = f"/{service}/{method.name}"
            if not any(handler.service(_Details(path)) for handler in recording.generic):
                unserved.append(path)
    assert unserved == []
