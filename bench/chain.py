"""The interceptor chain alone, in-process: CPU time per unary call.

``python -m bench.chain`` drives an empty unary method through the chain the
server installs, the way grpc.aio's server runs interceptors, with no network
and no database: the figure is what the chain itself costs per call, without
the noise of a shared machine's scheduling (thread CPU time, the best of
``--repeat`` rounds). Variants: ``none`` (no chain), ``off`` (the defaults),
``log`` (JSON access log), ``metrics``, ``auth`` (a bearer token checked) and
``on`` (all three, what ``--chain on`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from runstore.server import logs
from runstore.server.auth import Security
from runstore.server.auth.principals import PrincipalsFile
from runstore.server.config import ServerConfig
from runstore.server.interceptors import server_interceptors
from runstore.server.metrics import Metrics
from runstore.v1 import runtime_store_pb2 as rs

METHOD = "/runstore.v1.RuntimeStore/AppendRunRecord"
_REQUEST = rs.AppendRunRecordRequest().SerializeToString()


class _Details:
    def __init__(self, method: str, metadata: Sequence[tuple[str, str]]) -> None:
        self.method = method
        self.invocation_metadata = metadata


class _Context:
    """What the chain asks of a grpc.aio servicer context."""

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = metadata
        self._initial: Any = None
        self._trailing: Any = None
        self._done: list[Callable[[Any], None]] = []

    async def send_initial_metadata(self, metadata: Any) -> None:
        """Kept, not sent: grpc.aio sends it as a batch of its own, a cost of the
        transport this figure leaves out (docs/benchmarks.md)."""
        self._initial = metadata

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._trailing = metadata

    def trailing_metadata(self) -> Any:
        return self._trailing

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._done.append(callback)

    def code(self) -> None:
        return None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def invocation_metadata(self) -> Sequence[tuple[str, str]]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def finish(self) -> None:
        for callback in self._done:
            callback(self)


async def _append(request: Any, context: Any) -> rs.AppendRunRecordResponse:
    return rs.AppendRunRecordResponse()


_HANDLER = grpc.unary_unary_rpc_method_handler(
    _append,
    request_deserializer=rs.AppendRunRecordRequest.FromString,
    response_serializer=rs.AppendRunRecordResponse.SerializeToString,
)


async def _run_interceptors(interceptors: Iterator[Any], details: _Details) -> Any:
    """grpc.aio's ``_run_interceptor``: each interceptor gets the rest as its continuation."""
    interceptor = next(interceptors, None)
    if interceptor is None:
        return _HANDLER
    continuation = functools.partial(_run_interceptors, interceptors)
    return await interceptor.intercept_service(continuation, details)


async def _call(chain: Sequence[Any], metadata: Sequence[tuple[str, str]]) -> None:
    details = _Details(METHOD, metadata)
    handler = await _run_interceptors(iter(chain), details) if chain else _HANDLER
    context = _Context(metadata)
    parse = handler.request_deserializer
    request = _REQUEST if parse is None else parse(_REQUEST)
    response = await handler.unary_unary(request, context)
    if handler.response_serializer is not None:
        handler.response_serializer(response)
    context.finish()


async def _cpu_per_call(
    chain: Sequence[Any], metadata: Sequence[tuple[str, str]], calls: int
) -> float:
    for _ in range(200):
        await _call(chain, metadata)
    started = time.thread_time()
    for _ in range(calls):
        await _call(chain, metadata)
    return (time.thread_time() - started) / calls * 1e6


def _variants(directory: Path) -> dict[str, tuple[list[Any], tuple[tuple[str, str], ...]]]:
    token = "t" * 43
    auth_file = directory / "auth.toml"
    auth_file.write_text(
        '[[principal]]\nname = "bench"\nrole = "admin"\n'
        f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
    )
    auth_file.chmod(0o600)
    plain = ServerConfig(listen="127.0.0.1:0", database_url="sqlite://")
    logged = ServerConfig(
        listen="127.0.0.1:0", database_url="sqlite://", log_format="json", access_log=True
    )
    security = Security(principals=PrincipalsFile(auth_file))
    bare = (("user-agent", "grpc-python-asyncio"),)
    bearer = (("authorization", f"Bearer {token}"), *bare)
    return {
        "none": ([], bare),
        "off": (server_interceptors(plain), bare),
        "log": (server_interceptors(logged), bare),
        "metrics": (server_interceptors(plain, metrics=Metrics("bench")), bare),
        "auth": (server_interceptors(plain, security), bearer),
        "on": (server_interceptors(logged, security, Metrics("bench")), bearer),
    }


async def _measure(directory: Path, calls: int, repeat: int) -> dict[str, float]:
    variants = _variants(directory)
    best: dict[str, float] = {}
    for _ in range(repeat):
        for name, (chain, metadata) in variants.items():
            figure = await _cpu_per_call(chain, metadata, calls)
            best[name] = min(best.get(name, figure), figure)
    return best


def _run(calls: int, repeat: int) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory(prefix="runstore-bench-chain-") as directory,
        open(os.devnull, "w") as sink,
    ):
        # The JSON log handler the server installs, writing to /dev/null from
        # its own thread: what the figure counts is the call's path, the
        # calling thread's CPU (the writer's is off that path, and batched).
        handler = logs.BufferedSink(sink.write, logs.JsonFormatter())
        handler.addFilter(logs.RequestIdFilter())
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(logging.INFO)
        try:
            return asyncio.run(_measure(Path(directory), calls, repeat))
        finally:
            root.removeHandler(handler)
            handler.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__)
    parser.add_argument("--calls", type=int, default=10000, help="calls per measurement")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (the best is reported)")
    args = parser.parse_args(argv)
    best = _run(args.calls, args.repeat)
    print(f"CPU µs per call, best of {args.repeat} × {args.calls} calls:")
    for name, figure in best.items():
        extra = "" if name == "none" else f"  (+{figure - best['none']:.1f} over none)"
        print(f"  {name:8s} {figure:6.1f}{extra}")


if __name__ == "__main__":
    main()
