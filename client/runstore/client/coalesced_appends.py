"""How ``RemoteStore`` hooks up append coalescing (``runstore.client.coalesce``,
docs/limits.md "Coalesced appends"): the coalescer's two senders over the
client's stub, and an append through the coalescer retried on its own like any
call."""

from __future__ import annotations

import grpc

from runstore.client.calls import Client
from runstore.client.coalesce import AppendCoalescer, AppendCoalescing
from runstore.client.retry import call_with_retry
from runstore.contract.errors import DeadlineExceededError
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc


def coalescer_for(
    client: Client, stub: rs_grpc.RuntimeStoreAsyncStub, coalescing: AppendCoalescing | None
) -> AppendCoalescer | None:
    """The coalescer of ``client``'s appends, sending with its metadata
    through ``stub``; None when ``coalescing`` is None (off). (``RuntimeStoreAsyncStub``
    exists only in the typing stubs: what ``RuntimeStoreStub`` over an aio channel is.)"""
    if coalescing is None:
        return None

    async def send_calls(
        request: rs.AppendRunRecordCallsRequest, seconds: float | None
    ) -> rs.AppendRunRecordCallsResponse:
        metadata = await client._call_metadata()
        return await stub.AppendRunRecordCalls(request, timeout=seconds, metadata=metadata or None)

    async def send_append(
        request: rs.AppendRunRecordRequest, seconds: float | None
    ) -> rs.AppendRunRecordResponse:
        metadata = await client._call_metadata()
        return await stub.AppendRunRecord(request, timeout=seconds, metadata=metadata or None)

    return AppendCoalescer(coalescing, send_calls, send_append)


async def coalesced_append(
    client: Client, coalescer: AppendCoalescer, request: rs.AppendRunRecordRequest
) -> rs.AppendRunRecordResponse:
    """One append through ``coalescer``, retried on its own like any call."""

    async def attempt(seconds: float | None) -> rs.AppendRunRecordResponse:
        try:
            return await coalescer.append(request, seconds)
        except grpc.aio.AioRpcError as error:
            raise await client._rebuilt(error) from error
        except TimeoutError as error:  # the queued-bytes bound outlasted the attempt
            raise DeadlineExceededError(
                "the append waited for room in the coalescing queue past its deadline"
            ) from error

    return await call_with_retry(
        attempt,
        client.retry,
        attempt_timeout=client.timeout,
        clock=client._clock,
        on_retry=client._on_retry,
    )
