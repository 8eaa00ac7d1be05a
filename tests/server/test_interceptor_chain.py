"""The chain's one way of wrapping a behaviour, on a real grpc.aio server: both
call shapes get the same concerns and the same codes, each method's handler is
composed once, and OpenTelemetry's interceptor composes with the limits'
serialised responses. Every test runs against both ways of running the steps
(``RUNSTORE_INTERCEPTOR_CHAIN``): the generated flat coroutine and the nested
reference."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from runstore.contract.errors import NotFoundError
from runstore.server import call_request_id, tracing
from runstore.server.config import ServerConfig
from runstore.server.error_status import abort
from runstore.server.interceptors import concerns
from runstore.server.interceptors.handlers import (
    CHAIN_ENV,
    Chain,
    Concern,
    Context,
    Handler,
    Refused,
    Steps,
    prepared,
)
from runstore.server.interceptors.limits import SMALL_RESPONSE_BYTES, Limits
from runstore.server.metrics import Metrics
from tests.chain_kinds import chain_kind

__all__ = ["chain_kind"]  # autouse: every test runs on both kinds of chain

SERVICE = "test.Chain"


async def _unary(request: bytes, context: Context) -> bytes:
    if request == b"MISSING":
        await abort(context, NotFoundError("no such thing"))
    if request == b"BROKEN":
        raise RuntimeError("a bug")
    return b"unary:" + request


async def _stream(request: bytes, context: Context) -> AsyncIterator[bytes]:
    yield b"stream:" + request
    if request == b"MISSING":
        await abort(context, NotFoundError("no such thing"))
    if request == b"BROKEN":
        raise RuntimeError("a bug")
    yield b"end"


_HANDLERS: dict[str, Handler] = {
    "Unary": grpc.unary_unary_rpc_method_handler(_unary),
    "Stream": grpc.unary_stream_rpc_method_handler(_stream),
}


class _Upper:
    """A concern that counts its work and hands the behaviour an upper-cased request."""

    def __init__(self) -> None:
        self.wrapped: list[str] = []
        self.admitted: list[str] = []

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        self.admitted.append(details.method)

    def wrap(self, method: str, handler: Handler) -> Handler:
        self.wrapped.append(method)

        async def upper(request: bytes, context: Context) -> bytes:
            return request.upper()

        return prepared(handler, upper)


@asynccontextmanager
async def _serving(interceptors: Sequence[grpc.aio.ServerInterceptor]) -> AsyncIterator[str]:
    server = grpc.aio.server(interceptors=interceptors)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, _HANDLERS),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def _outcome(call: Any) -> tuple[grpc.StatusCode, list[bytes]]:
    """The code a call ended with and what it delivered."""
    got: list[bytes] = []
    try:
        result = await call if not hasattr(call, "read") else None
        if result is not None:
            got.append(result)
        else:
            async for message in call:
                got.append(message)
    except grpc.aio.AioRpcError as error:
        return error.code(), got
    return grpc.StatusCode.OK, got


async def test_both_call_shapes_get_the_same_concerns_and_the_same_codes() -> None:
    upper = _Upper()
    metrics = Metrics("test")
    chain: list[Concern] = [
        *concerns(ServerConfig(listen="127.0.0.1:0", database_url="sqlite://"), metrics=metrics),
        upper,
    ]
    async with _serving([Chain(chain)]) as target, grpc.aio.insecure_channel(target) as channel:
        unary: Any = channel.unary_unary(f"/{SERVICE}/Unary")
        stream: Any = channel.unary_stream(f"/{SERVICE}/Stream")
        ids = []
        for body, code in ((b"ok", grpc.StatusCode.OK), (b"MISSING", grpc.StatusCode.NOT_FOUND)):
            for _ in range(3):
                call: Any = unary(body.lower())
                assert (await _outcome(call))[0] == code
                ids.append(dict(await call.trailing_metadata())[call_request_id.METADATA_KEY])
        assert await _outcome(unary(b"ok")) == (grpc.StatusCode.OK, [b"unary:OK"])
        assert await _outcome(unary(b"broken")) == (grpc.StatusCode.UNKNOWN, [])
        for _ in range(3):
            assert await _outcome(stream(b"ok")) == (grpc.StatusCode.OK, [b"stream:OK", b"end"])
            call = stream(b"missing")
            assert await _outcome(call) == (grpc.StatusCode.NOT_FOUND, [b"stream:MISSING"])
            ids.append(dict(await call.trailing_metadata())[call_request_id.METADATA_KEY])
        assert await _outcome(stream(b"broken")) == (grpc.StatusCode.UNKNOWN, [b"stream:BROKEN"])
        # An unknown method is not cached and reaches no concern.
        for _ in range(2):
            missing: Any = channel.unary_unary(f"/{SERVICE}/Nothing")
            assert (await _outcome(missing(b"")))[0] == grpc.StatusCode.UNIMPLEMENTED

    # Composed once per method, admitted once per call.
    assert upper.wrapped == [f"/{SERVICE}/Unary", f"/{SERVICE}/Stream"]
    assert len(upper.admitted) == 8 + 7
    assert len(set(ids)) == len(ids) == 9  # every call its own request id
    figures = {
        (sample.labels["grpc_method"], sample.labels["grpc_code"]): sample.value
        for family in metrics.registry.collect()
        if family.name == "grpc_server_handled"
        for sample in family.samples
    }
    assert figures == {
        ("Unary", "OK"): 4,
        ("Unary", "NotFound"): 3,
        ("Unary", "Unknown"): 1,
        ("Stream", "OK"): 3,
        ("Stream", "NotFound"): 3,
        ("Stream", "Unknown"): 1,
    }


def _big(request: bytes, context: Context) -> struct_pb2.Value:
    return struct_pb2.Value(string_value="x" * (2 * SMALL_RESPONSE_BYTES))


@pytest.mark.parametrize("held", [False, True])
async def test_tracing_composes_with_the_limits_serialised_responses(held: bool) -> None:
    """OpenTelemetry's interceptor sits outside the limits, which hand it a unary
    response as bytes: the response arrives intact and its bytes are released,
    and a refusal for the budget is the code of the call and of its span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chain = concerns(ServerConfig(listen="127.0.0.1:0", database_url="sqlite://"))
    limits = next(concern for concern in chain if isinstance(concern, Limits))
    if held:
        limits.budget.in_flight = limits.budget.budget  # slow readers hold it all
    handlers = {
        "Big": grpc.unary_unary_rpc_method_handler(
            _big,
            request_deserializer=struct_pb2.Value.FromString,
            response_serializer=struct_pb2.Value.SerializeToString,
        )
    }
    server = grpc.aio.server(interceptors=[tracing.server_interceptor(provider), Chain(chain)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            big = channel.unary_unary(
                f"/{SERVICE}/Big",
                request_serializer=struct_pb2.Value.SerializeToString,
                response_deserializer=struct_pb2.Value.FromString,
            )
            if held:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await big(struct_pb2.Value(string_value="page"))
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            else:
                response = await big(struct_pb2.Value(string_value="page"))
                assert response.string_value == "x" * (2 * SMALL_RESPONSE_BYTES)
    finally:
        await server.stop(None)
    expected_held = limits.budget.budget if held else 0
    assert limits.budget.in_flight == expected_held  # charged bytes released at the end
    [span] = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert span.name == f"/{SERVICE}/Big"
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == (
        grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] if held else 0
    )


class _Recorder:
    """A concern made of steps that writes down when each of them runs; it
    refuses the call in ``enter`` or in ``after`` when told to."""

    def __init__(self, name: str, journal: list[str], *, refuse: str = "") -> None:
        self.name = name
        self.journal = journal
        self.refuse = refuse

    def admit(self, details: grpc.HandlerCallDetails) -> None:
        pass

    def steps(self, method: str, handler: Handler) -> Steps:
        name, journal = self.name, self.journal

        def enter(request: Any, context: Context) -> str:
            journal.append(f"{name}.enter")
            if self.refuse == "enter":
                raise Refused(NotFoundError(f"{name} refuses"))
            return name

        def after(state: str, response: Any, context: Context) -> Any:
            journal.append(f"{state}.after")
            if self.refuse == "after":
                raise Refused(NotFoundError(f"{name} refuses"))
            return response

        def fail(state: str, exc: BaseException, context: Context) -> None:
            journal.append(f"{state}.fail({type(exc).__name__})")

        def each(state: str) -> None:
            journal.append(f"{state}.each")

        return Steps(enter=enter, after=after, fail=fail, each=each)


@pytest.mark.parametrize(
    ("refusing", "body", "expected"),
    [
        (
            "",
            b"ok",
            ["a.enter", "b.enter", "c.enter", "behaviour", "c.after", "b.after", "a.after"],
        ),
        # A refusal in b's enter: c and the behaviour never run, b is not failed,
        # a sees the abort.
        ("b:enter", b"ok", ["a.enter", "b.enter", "a.fail(AbortError)"]),
        # A refusal in b's after (as Limits refuses a response): c has finished,
        # a sees the abort.
        (
            "b:after",
            b"ok",
            [
                "a.enter",
                "b.enter",
                "c.enter",
                "behaviour",
                "c.after",
                "b.after",
                "a.fail(AbortError)",
            ],
        ),
        # The behaviour fails: every concern entered sees it, innermost first.
        (
            "",
            b"BROKEN",
            [
                "a.enter",
                "b.enter",
                "c.enter",
                "behaviour",
                "c.fail(RuntimeError)",
                "b.fail(RuntimeError)",
                "a.fail(RuntimeError)",
            ],
        ),
    ],
)
async def test_flat_steps_run_in_the_order_nested_wrappers_would(
    refusing: str, body: bytes, expected: list[str]
) -> None:
    """One coroutine per method runs the concerns' steps: enters outermost
    first, afters innermost first, a refusal seen as the call's abort by the
    concerns outside it only, and a failure by every concern entered."""
    journal: list[str] = []
    who, _, where = refusing.partition(":")
    chain = [_Recorder(name, journal, refuse=where if name == who else "") for name in "abc"]

    async def behaviour(request: bytes, context: Context) -> bytes:
        journal.append("behaviour")
        if request == b"BROKEN":
            raise RuntimeError("a bug")
        return request

    handlers = {"Unary": grpc.unary_unary_rpc_method_handler(behaviour)}
    server = grpc.aio.server(interceptors=[Chain(chain)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary: Any = channel.unary_unary(f"/{SERVICE}/Unary")
            code, _ = await _outcome(unary(body))
    finally:
        await server.stop(None)
    assert journal == expected
    refused = bool(refusing)
    assert code == (
        grpc.StatusCode.NOT_FOUND
        if refused
        else grpc.StatusCode.UNKNOWN
        if body == b"BROKEN"
        else grpc.StatusCode.OK
    )


async def test_a_streamed_response_passes_each_concern_and_ends_with_their_afters() -> None:
    journal: list[str] = []
    chain = [_Recorder(name, journal) for name in "ab"]
    async with _serving([Chain(chain)]) as target, grpc.aio.insecure_channel(target) as channel:
        stream: Any = channel.unary_stream(f"/{SERVICE}/Stream")
        assert await _outcome(stream(b"ok")) == (grpc.StatusCode.OK, [b"stream:ok", b"end"])
    passing = ["b.each", "a.each"]
    assert journal == ["a.enter", "b.enter", *passing, *passing, "b.after", "a.after"]


async def test_the_switch_picks_how_the_steps_run(chain_kind: str) -> None:
    """The environment variable decides: the flat chain's coroutine is compiled
    from generated source, the nested reference's frames are lines of
    handlers.py (what a traceback shows)."""
    journal: list[str] = []
    chain = Chain([_Recorder("a", journal)])
    assert chain.kind == chain_kind
    composed = chain.compose(f"/{SERVICE}/Unary", _HANDLERS["Unary"])
    source = composed.unary_unary.__code__.co_filename
    if chain_kind == "flat":
        assert source == "<string>"
    else:
        assert source.endswith("handlers.py")


def test_an_unknown_chain_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHAIN_ENV, "loop")
    with pytest.raises(ValueError, match=CHAIN_ENV):  # a ChainKindError
        Chain([])
    with pytest.raises(ValueError, match="loop"):
        Chain([], kind="loop")


def test_a_forked_worker_generates_request_ids_of_its_own() -> None:
    """``serve --workers N`` forks: each worker's generated ids must differ
    from its parent's and its siblings' (the generator is reseeded at fork)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the worker: its first id, then gone without cleanup
        os.write(write_end, call_request_id.generate().encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        worker_id = pipe.read().decode()
    assert os.waitpid(child, 0)[1] == 0
    parent_id = call_request_id.generate()
    assert len(worker_id) == len(parent_id) == 32
    assert worker_id != parent_id
