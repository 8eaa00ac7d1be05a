"""``runstore health``: the server's gRPC health status (exit 0 only when SERVING)
and, with ``--json``, the server's version from the response's initial metadata."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runstore.cli import remote
from runstore.cli.output import Output
from runstore.cli.plugins import Command
from runstore.cli.remote import Clients
from runstore.client import from_rpc_error
from runstore.contract.metadata import VERSION_KEY

EXAMPLE_SERVICE: Final = "runstore.v1.RuntimeStore"


async def health(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    stub: Any = health_pb2_grpc.HealthStub(clients.channel)
    call = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=clients.timeout)
    try:
        response = await call
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:
            print(
                f"runstore: NOT_FOUND: the server has no service named {args.service!r} "
                f"(give '' for the server as a whole, or a full name such as {EXAMPLE_SERVICE})",
                file=sys.stderr,
            )
            return 1
        if error.code() == grpc.StatusCode.UNAVAILABLE:
            raise from_rpc_error(error) from error  # remote.run may find a TLS mistake
        print(f"runstore: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    if out.as_json:
        # None from a server older than 0.2.0, which did not send it.
        server_version = (await call.initial_metadata()).get(VERSION_KEY)
        out.json({"service": args.service, "status": status, "server_version": server_version})
    else:
        out.console.print(status)
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    remote.connection_options(parser)
    parser.set_defaults(handler=health)
    parser.add_argument("--service", default="", help="a service name (default: the server)")


COMMAND: Final = Command(
    help="the server's gRPC health status", add_arguments=add_arguments, run=remote.run
)
