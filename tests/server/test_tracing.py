"""Tracing with an in-memory exporter: a server span per RPC, continuing the
client's trace, and a child span per database transaction."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import AsyncExitStack

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from runstore.client import RemoteSessionAdmin, RemoteStore, RunStart, records
from runstore.contract.errors import RunNotFoundError
from runstore.server import tracing
from runstore.server.app import Telemetry, build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from tests.support import unique


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_a_span_per_rpc_continuing_the_callers_trace_and_one_per_transaction(
    database_url: str,
) -> None:
    server_provider, server_spans = _provider()
    client_provider, client_spans = _provider()
    config = ServerConfig(listen="127.0.0.1:0", database_url=database_url, migrate=True)
    telemetry = Telemetry(tracer_provider=server_provider)
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config, telemetry))
        running = await build_server(config, create_stores(config, db), telemetry=telemetry)
        stack.push_async_callback(running.server.stop, None)
        target = f"127.0.0.1:{running.port}"
        host = await stack.enter_async_context(
            RemoteSessionAdmin(target, tracer_provider=client_provider)
        )
        store = await stack.enter_async_context(
            RemoteStore(target, tracer_provider=client_provider)
        )
        session = await host.create_session(unique("traced"), records.now())
        run = RunStart(
            run_id=unique("run"), agent_id="a", session_id=session.id, started_at=records.now()
        )
        await store.start_root_run(records.root_run_start(run))
        with pytest.raises(RunNotFoundError):
            await store.load_run(unique("missing"))

    client = {span.name: span for span in client_spans.get_finished_spans()}
    finished = server_spans.get_finished_spans()
    calls = [span for span in finished if span.kind == SpanKind.SERVER]
    transactions = [span for span in finished if span.name.startswith("db.")]
    assert [span.name for span in calls] == [
        "/runstore.v1.SessionAdmin/CreateSession",
        "/runstore.v1.RuntimeStore/StartRootRun",
        "/runstore.v1.RuntimeStore/LoadRun",
    ]
    assert len(client) == 3
    for call in calls:
        # The server span continues the client's: same trace, the client span as parent.
        caller = client[call.name]
        assert caller.kind == SpanKind.CLIENT
        assert call.context.trace_id == caller.context.trace_id
        assert call.parent is not None and call.parent.span_id == caller.context.span_id

    def children(call: ReadableSpan) -> list[str]:
        return [
            span.name
            for span in transactions
            if span.parent is not None and span.parent.span_id == call.context.span_id
        ]

    assert children(calls[0]) == ["db.write"]  # CreateSession
    assert children(calls[1]) == ["db.write"]  # StartRootRun
    assert children(calls[2]) == ["db.read"]  # LoadRun of a missing run
    assert len(transactions) == 3  # every transaction is a child of its call
    system = "sqlite" if database_url.startswith("sqlite") else "postgresql"
    assert {span.attributes["db.system"] for span in transactions if span.attributes} == {system}
    # The failed call's status says so (the NOT_FOUND code).
    assert calls[2].attributes is not None
    assert calls[2].attributes["rpc.grpc.status_code"] == 5


def test_tracing_is_off_without_an_endpoint() -> None:
    assert tracing.provider_from_env({}) is None
    provider = tracing.provider_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"})
    assert provider is not None
    provider.shutdown()


def test_the_plain_client_never_imports_opentelemetry() -> None:
    """Without an endpoint the client neither needs nor loads the otel extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    code = (
        "import sys\n"
        "from runstore.client import RemoteStore\n"
        "store = RemoteStore('127.0.0.1:1')\n"
        "loaded = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
