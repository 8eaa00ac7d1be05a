"""A deleted namespace's open Watch streams end with NAMESPACE_NOT_FOUND, by
the namespace code, whether or not quotas are configured (docs/namespaces.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

import grpc
import pytest

from runstore.client.namespaces import RemoteNamespaceAdmin
from runstore.client.retry import NO_RETRY
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.app import build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.core.quotas import Quotas
from runstore.v1 import runtime_store_pb2 as rs
from tests import postgres
from tests.support import Store, failure_of, run_start, unique


@dataclass
class Served:
    store: Store
    target: str
    quotas: Quotas | None


async def _serve(stack: AsyncExitStack, url: str, *, quotas: bool) -> Served:
    # Watch streams re-read their cursor rarely: a stream ends because its
    # namespace went, not because a poll found its run purged.
    config = ServerConfig(
        listen="127.0.0.1:0", database_url=url, migrate=True, watch_poll_seconds=600
    )
    db = await stack.enter_async_context(open_database(config))
    stores = create_stores(config, db)
    if not quotas:
        stores = dataclasses.replace(stores, quotas=None)
    running = await build_server(config, stores)
    stack.push_async_callback(running.server.stop, None)
    if stores.quotas is not None:
        stack.push_async_callback(stores.quotas.stop)
    assert stores.namespaces is not None
    stack.push_async_callback(stores.namespaces.close)
    target = f"127.0.0.1:{running.port}"
    channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
    return Served(
        Store(channel, target=target),
        target,
        None if stores.quotas is None else stores.quotas.quotas,
    )


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ],
)
async def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('streams') / 'runstore.db'}"
        return
    async with postgres.fresh_database() as url:
        yield url


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("quotas", [False, True], ids=["quotas-off", "quotas-on"])
async def test_deleting_a_namespace_ends_its_watch_streams(database_url: str, quotas: bool) -> None:
    async with AsyncExitStack() as stack:
        served = await _serve(stack, database_url, quotas=quotas)
        name = unique("ns")[:40]
        metadata = ((NAMESPACE_KEY, name),)
        async with RemoteNamespaceAdmin(served.target, retry=NO_RETRY) as admin:
            await admin.create_namespace(name)
        run = run_start()
        await served.store.runtime.StartOneShotRun(run.one_shot_request(), metadata=metadata)
        stream = served.store.runtime.WatchRunRecords(
            rs.WatchRunRecordsRequest(run_id=run.id), metadata=metadata
        )
        first = await asyncio.wait_for(stream.read(), 10)
        assert first is not grpc.aio.EOF  # the stream is open, waiting for more
        async with RemoteNamespaceAdmin(served.target, retry=NO_RETRY) as admin:
            await admin.delete_namespace(name)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await asyncio.wait_for(stream.read(), 10)
        failure = failure_of(caught.value)
        assert (failure.code, failure.reason) == (grpc.StatusCode.NOT_FOUND, "NAMESPACE_NOT_FOUND")
        assert failure.metadata["namespace"] == name
        if served.quotas is not None:
            held = served.quotas
            await _until(lambda: held.open_streams(name) == 0, "the quota lease is released")
