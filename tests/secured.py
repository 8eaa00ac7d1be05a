"""Servers with authentication (and TLS) on, for the security tests.

Every principal of ``write_auth_file`` gets a fresh random token; tests call
with ``bearer(token)`` metadata and compare refusals exactly.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import tomlkit
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.contract.auth_file import hash_token
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.app import RunningServer, build_server, create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.db.migrate import async_url
from runstore.server.db.schema import metadata
from tests.support import SERVER_OWN_TABLES, fails

ROLES = ("admin", "host", "worker", "reader")


@dataclass(frozen=True)
class Entry:
    role: str
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    certificates: Sequence[str] = ()
    with_token: bool = True
    namespaces: Sequence[str] | None = None
    """Written as the principal's ``namespaces`` when given (default: ["default"])."""


def write_auth_file(path: Path, principals: Mapping[str, Entry]) -> Path:
    """Writes ``principals`` (name → entry) as an auth file, hashes only."""
    tables = []
    for name, entry in principals.items():
        table: dict[str, Any] = {"name": name, "role": entry.role}
        if entry.with_token:
            table["token_sha256"] = hash_token(entry.token)
        if entry.certificates:
            table["certificates"] = list(entry.certificates)
        if entry.namespaces is not None:
            table["namespaces"] = list(entry.namespaces)
        tables.append(table)
    path.write_text(tomlkit.dumps({"principal": tables}))
    return path


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@asynccontextmanager
async def running_server(config: ServerConfig) -> AsyncIterator[RunningServer]:
    """``build_server`` over ``config``'s database (migrated first), stopped afterwards."""
    config = dataclasses.replace(config, migrate=True)
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        running = await build_server(config, create_stores(config, db))
        stack.push_async_callback(running.server.stop, None)
        if running.namespaces is not None:
            stack.push_async_callback(running.namespaces.close)
        yield running


async def refusal(call: Any) -> tuple[grpc.StatusCode, str, str]:
    """(code, ErrorInfo reason, metadata method) of a call that must be refused."""
    failure = await fails(call)
    assert failure.domain == "runstore"
    assert failure.metadata.get("permanent") == "true"
    return failure.code, failure.reason, failure.metadata.get("method", "")


async def dump_database(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table the calls write, in a stable order (for "wrote nothing")."""
    engine = create_async_engine(async_url(database_url), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            dump: dict[str, list[tuple[Any, ...]]] = {}
            for table in metadata.sorted_tables:
                if table.name in SERVER_OWN_TABLES:
                    continue
                rows = (await connection.execute(select(table))).all()
                dump[table.name] = sorted((tuple(row) for row in rows), key=repr)
            return dump
    finally:
        await engine.dispose()


class _WithToken(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds a bearer token (and a namespace) to every unary call of a channel."""

    def __init__(self, token: str, namespace: str | None = None) -> None:
        self._token = token
        self._namespace = namespace

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add("authorization", f"Bearer {self._token}")
        if self._namespace is not None:
            metadata.add(NAMESPACE_KEY, self._namespace)
        details = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        return await continuation(details, request)


def channel_with_token(target: str, token: str, namespace: str | None = None) -> grpc.aio.Channel:
    """A plaintext channel whose unary calls all carry ``token`` (and ``namespace``)."""
    return grpc.aio.insecure_channel(target, interceptors=[_WithToken(token, namespace)])


async def handshake_fails(target: str, tls: Any, token: str | None = None) -> None:
    """A call over ``tls`` (a ``TLSConfig``) that the TLS handshake must refuse."""
    from runstore.client import NO_RETRY, RemoteSessionAdmin, UnavailableError

    async with RemoteSessionAdmin(target, tls=tls, token=token, retry=NO_RETRY, timeout=5) as admin:
        try:
            await admin.load_session("x")
        except UnavailableError:
            return
    raise AssertionError("the handshake was accepted")
