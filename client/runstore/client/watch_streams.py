"""The record watches of ``RemoteStore`` (docs/contract.md §9.9): one stream,
reopened from the last cursor received after an outage or a refusal, every
wait reported (``runstore.client.retry``), for as long as it is iterated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc

from runstore.client import convert
from runstore.client.calls import Client
from runstore.client.model import RunRecord
from runstore.client.retry import (
    backoff_delay,
    is_refusal,
    is_retryable,
    refused_too_long,
    report_retry,
)
from runstore.contract.errors import OverloadedError, QuotaExceededError, UnavailableError

Req = TypeVar("Req")


async def reconnecting_watch(
    client: Client,
    method: grpc.aio.UnaryStreamMultiCallable[Req, Any],
    request: Callable[[str], Req],
    cursor: str,
    silence_timeout: float | None,
) -> AsyncIterator[RunRecord]:
    """The records ``method`` streams from ``cursor`` on, reconnecting as
    ``RemoteStore.watch_session_run_records`` describes, under ``client``'s
    retry policy, clock and metadata."""
    caps, reconnects, failing_since = client.retry.backoff_caps(), 0, 0.0
    refused_since: float | None = None
    while True:
        call = method(request(cursor), metadata=(await client._call_metadata()) or None)
        try:
            while True:
                try:
                    batch: Any = await asyncio.wait_for(call.read(), silence_timeout)
                except TimeoutError:
                    raise UnavailableError("watch stream went silent") from None
                except grpc.aio.AioRpcError as error:
                    raise await client._rebuilt(error) from error
                if batch is grpc.aio.EOF:
                    return
                # It works: start over.
                caps, reconnects, refused_since = client.retry.backoff_caps(), 0, None
                cursor = batch.next_cursor
                for message in batch.events:
                    yield convert.from_record(message)
        except (UnavailableError, QuotaExceededError, OverloadedError) as error:
            # An outage, or a refusal (a namespace at its watch_streams
            # quota): back off and reconnect, reporting every refusal.
            if not is_retryable(error):
                raise
            now = client._clock.monotonic()
            if reconnects == 0:
                failing_since = now
            reconnects += 1
            refusal = is_refusal(error)
            if not refusal:
                refused_since = None
            elif refused_since is None:
                refused_since = now
            policy = client.retry
            if policy.max_attempts is not None and reconnects >= policy.max_attempts:
                raise
            if (
                not refusal
                and policy.deadline is not None
                and now - failing_since >= policy.deadline
            ):
                raise
            delay = backoff_delay(error, client._clock.uniform(0.0, next(caps)))
            if refused_since is not None and refused_too_long(policy, now - refused_since, delay):
                raise
            report_retry(error, reconnects, delay, client._on_retry)
            await client._clock.sleep(delay)
        finally:
            call.cancel()
