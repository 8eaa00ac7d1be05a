"""The isolation matrix (docs/namespaces.md): every RPC of every namespaced
service × {own namespace, another namespace, unknown namespace, no header} ×
every role, on both backends.

Each method's request refers to objects that exist only in namespace B (its
prerequisites are made there). Principals of every role are bound to
namespace A only; twins bound to an empty namespace C answer the same call,
where those IDs exist nowhere. So:

* in A (by header, or by the single binding without one) the call answers
  exactly as in C: B's IDs are indistinguishable from absent ones;
* naming B, or a namespace that does not exist, is PERMISSION_DENIED for a
  principal bound to A (it learns nothing about either), and an unknown
  namespace is NAMESPACE_NOT_FOUND for an admin bound to "*";
* B's rows (every table, by the namespace column) are the same after all of a
  method's calls as before them: a fingerprint of the namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.config import ServerConfig
from runstore.server.db.namespace_sql import DATA_TABLES
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import runtime_store_pb2 as rs
from tests import backends
from tests.secured import (
    ROLES,
    Entry,
    bearer,
    channel_with_token,
    dump_database,
    running_server,
    write_auth_file,
)
from tests.server.test_auth_matrix import BUILDERS, _first_message
from tests.support import Store

OWN, OTHER, EMPTY = "team-a", "team-b", "team-c"
UNKNOWN = "team-nowhere"
NAMESPACED = sorted(method for method in BUILDERS if "/runstore.v1.NamespaceAdmin/" not in method)


def _principal(role: str, namespace: str) -> str:
    return f"{role}-{namespace}"


@dataclass
class Matrix:
    tokens: dict[str, str]
    in_other: Store
    """Stubs acting in B as an admin (to make each request's prerequisites)."""
    anonymous: Store
    database_url: str

    def metadata(self, principal: str, namespace: str | None) -> tuple[tuple[str, str], ...]:
        header = ((NAMESPACE_KEY, namespace),) if namespace is not None else ()
        return (*bearer(self.tokens[principal]), *header)


@pytest.fixture(scope="module", params=backends.BACKENDS)
async def matrix(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Matrix]:
    directory = tmp_path_factory.mktemp("isolation")
    async with backends.database(request.param, directory) as url:
        async for served in _serve(url, directory):
            yield served


async def _serve(url: str, directory: Path) -> AsyncIterator[Matrix]:
    entries = {
        _principal(role, namespace): Entry(role, namespaces=[namespace])
        for role in ROLES
        for namespace in (OWN, EMPTY)
    }
    entries["operator"] = Entry("admin", namespaces=["*"])
    auth_file = write_auth_file(directory / "auth.toml", entries)
    config = ServerConfig(
        listen="127.0.0.1:0", database_url=url, migrate=True, auth_file=str(auth_file)
    )
    async with running_server(config) as running:
        target = f"127.0.0.1:{running.port}"
        operator = entries["operator"].token
        async with (
            channel_with_token(target, operator) as admin,
            channel_with_token(target, operator, namespace=OTHER) as in_other,
            grpc.aio.insecure_channel(target) as anonymous,
        ):
            stub = Store(admin).namespaces
            for name in (OWN, OTHER, EMPTY):
                await stub.CreateNamespace(
                    na.CreateNamespaceRequest(namespace=na.Namespace(name=name))
                )
            yield Matrix(
                {name: entry.token for name, entry in entries.items()},
                Store(in_other, target=target),
                Store(anonymous, target=target),
                url,
            )


def _answer(outcome: Any) -> Any:
    """What a caller sees: the response, or the status without its request id."""
    if not isinstance(outcome, grpc.aio.AioRpcError):
        return ("ok", type(outcome).__name__, _stable(outcome))
    status = rpc_status.from_call(outcome)
    metadata: dict[str, str] = {}
    reason = ""
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            reason = info.reason
            metadata = {k: v for k, v in info.metadata.items() if k != "request_id"}
    # A role refusal names the principal: its twin's name differs only in the namespace.
    details = (outcome.details() or "").replace(f"-{OWN}'", "'").replace(f"-{EMPTY}'", "'")
    return (outcome.code(), details, reason, metadata)


def _stable(message: Any) -> bytes:
    """The response's bytes, less the request ids each carried call's outcome
    names (AppendRunRecordCalls): new per call, as a status's are."""
    if isinstance(message, rs.AppendRunRecordCallsResponse):
        message = _without_request_ids(message)
    return bytes(message.SerializeToString(deterministic=True))


def _without_request_ids(
    response: rs.AppendRunRecordCallsResponse,
) -> rs.AppendRunRecordCallsResponse:
    stable = rs.AppendRunRecordCallsResponse()
    stable.CopyFrom(response)
    for outcome in stable.outcomes:
        outcome.request_id = ""
        for detail in outcome.error.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                info.metadata.pop("request_id", None)
                detail.Pack(info)
    return stable


async def _call(matrix: Matrix, method: str, request: Any, metadata: Any) -> Any:
    stub_name, _ = BUILDERS[method]
    stub = getattr(matrix.anonymous, stub_name)
    call = getattr(stub, method.rsplit("/", 1)[1])(request, metadata=metadata)
    try:
        return await (_first_message(call) if "/Watch" in method else call)
    except grpc.aio.AioRpcError as error:
        return error


def _fingerprint(dump: dict[str, list[tuple[Any, ...]]], namespace: str) -> Any:
    rows = {table: [row for row in dump[table] if row[0] == namespace] for table in DATA_TABLES}
    rows["namespaces"] = [row for row in dump["namespaces"] if row[0] == namespace]
    return rows


@pytest.mark.parametrize("method", NAMESPACED)
async def test_a_call_in_one_namespace_never_sees_or_touches_another(
    matrix: Matrix, method: str
) -> None:
    _, build = BUILDERS[method]
    request = await build(matrix.in_other)  # its IDs exist only in B
    before = _fingerprint(await dump_database(matrix.database_url), OTHER)
    assert any(before[table] for table in DATA_TABLES) or "List" in method or "Create" in method
    for role in ROLES:
        own, twin = _principal(role, OWN), _principal(role, EMPTY)
        # Own namespace, by header and by the single binding: exactly as in C.
        in_own = _answer(await _call(matrix, method, request, matrix.metadata(own, OWN)))
        in_empty = _answer(await _call(matrix, method, request, matrix.metadata(twin, EMPTY)))
        assert in_own == in_empty, (role, in_own, in_empty)
        unnamed = _answer(await _call(matrix, method, request, matrix.metadata(own, None)))
        twin_unnamed = _answer(await _call(matrix, method, request, matrix.metadata(twin, None)))
        assert unnamed == twin_unnamed, (role, unnamed, twin_unnamed)
        # Another namespace, or one that does not exist: refused alike.
        for namespace in (OTHER, UNKNOWN):
            refused = await _call(matrix, method, request, matrix.metadata(own, namespace))
            assert isinstance(refused, grpc.aio.AioRpcError), (role, namespace)
            assert refused.code() == grpc.StatusCode.PERMISSION_DENIED, (role, namespace)
    unknown = await _call(matrix, method, request, matrix.metadata("operator", UNKNOWN))
    assert isinstance(unknown, grpc.aio.AioRpcError)
    assert _answer(unknown)[2] == "NAMESPACE_NOT_FOUND"
    after = _fingerprint(await dump_database(matrix.database_url), OTHER)
    assert after == before, f"{method} changed namespace {OTHER}"
