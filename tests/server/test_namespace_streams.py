"""A deleted namespace's open Watch streams end with NAMESPACE_NOT_FOUND, by
the namespace code, whether or not quotas are configured (docs/namespaces.md)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from runstore.client.namespaces import RemoteNamespaceAdmin
from runstore.client.retry import NO_RETRY
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.core.quotas import Quotas
from runstore.v1 import runtime_store_pb2 as rs
from tests import backends
from tests.support import Store, failure_of, run_start, unique, until


@dataclass
class Served:
    store: Store
    target: str
    quotas: Quotas | None


async def _serve(stack: AsyncExitStack, url: str, *, quotas: bool) -> Served:
    def without_quotas(stores: Any, db: Any) -> Any:
        return stores if quotas else dataclasses.replace(stores, quotas=None)

    # Watch streams re-read their cursor rarely: a stream ends because its
    # namespace went, not because a poll found its run purged.
    server = await stack.enter_async_context(
        backends.served(url, stores=without_quotas, watch_poll_seconds=600)
    )
    keeper = server.stores.quotas
    return Served(server.store, server.target, None if keeper is None else keeper.quotas)


@pytest.fixture(params=backends.BACKENDS)
async def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    async with backends.database(request.param, tmp_path_factory.mktemp("streams")) as url:
        yield url


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
            await until(lambda: held.open_streams(name) == 0, "the quota lease is released")
