"""Every response's initial metadata names the server's version
(``x-runstore-version``): unary and streamed, success and error, a refusal by a
concern of the chain as well as by the store, and the health and reflection
services too (docs/observability.md#the-servers-version)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from runstore.contract.metadata import VERSION_KEY
from runstore.server.version import __version__
from runstore.v1 import runtime_store_pb2 as rs
from tests.support import Store, fails_with, run_start, serving

ANNOUNCED = (VERSION_KEY, __version__)


@pytest.fixture(scope="module")
async def store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Store]:
    """A server of this module's own (the header does not depend on the backend)."""
    path: Path = tmp_path_factory.mktemp("version-header") / "runstore.db"
    async with serving(f"sqlite:///{path}") as store:
        yield store


def announced(metadata: Any) -> list[str]:
    """Every value of the version header in ``metadata`` (exactly one is expected)."""
    return [value for key, value in metadata or () if key == VERSION_KEY]


async def test_a_unary_success_carries_the_version(store: Store) -> None:
    run = run_start(session_id=await store.session())
    call = store.runtime.StartRootRun(run.root_request())
    await call
    assert announced(await call.initial_metadata()) == [__version__]
    assert ANNOUNCED not in tuple(await call.trailing_metadata())


async def test_an_error_from_the_store_carries_the_version(store: Store) -> None:
    call = store.runtime.LoadRun(rs.LoadRunRequest(run_id="no-such-run"))
    await fails_with(call, grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")
    assert announced(await call.initial_metadata()) == [__version__]


async def test_a_refusal_by_the_chain_carries_the_version(store: Store) -> None:
    """A body that does not parse is refused by a concern before any servicer runs."""
    raw: Any = store.channel.unary_unary(
        "/runstore.v1.RuntimeStore/LoadRun", request_serializer=None, response_deserializer=None
    )
    call = raw(b"\xff")
    await fails_with(call, grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    assert announced(await call.initial_metadata()) == [__version__]


async def test_a_watch_stream_carries_the_version_before_its_first_batch(store: Store) -> None:
    run = await store.root()
    stream = store.runtime.WatchRunRecords(rs.WatchRunRecordsRequest(run_id=run.id))
    try:
        # Known as soon as the stream is open, with the stream still running.
        assert announced(await stream.initial_metadata()) == [__version__]
        first = await stream.read()
        assert first is not grpc.aio.EOF and [r.run_id for r in first.events] == [run.id]
    finally:
        stream.cancel()


async def test_health_and_reflection_carry_the_version(store: Store) -> None:
    health: Any = health_pb2_grpc.HealthStub(store.channel)
    check = health.Check(health_pb2.HealthCheckRequest())
    assert (await check).status == health_pb2.HealthCheckResponse.SERVING
    assert announced(await check.initial_metadata()) == [__version__]

    reflection: Any = reflection_pb2_grpc.ServerReflectionStub(store.channel)
    info = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = [s.name async for r in info for s in r.list_services_response.service]
    assert "runstore.v1.RuntimeStore" in names
    assert announced(await info.initial_metadata()) == [__version__]
