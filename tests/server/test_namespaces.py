"""Which namespace a call acts in, who may act there, and NamespaceAdmin
(docs/namespaces.md), through real ``runstore serve`` processes on both backends.

The namespace a call acted in is read back from its access-log line, so these
tests hold whatever the storage does with it; what a namespace isolates is
``test_namespace_isolation``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server import logs
from runstore.server.core.namespaces import REFRESH_SECONDS
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests import backends, postgres
from tests.processes import ServerProcess, server_process
from tests.secured import Entry, bearer, write_auth_file
from tests.support import (
    SERVER_NOTICES_WITHIN,
    Store,
    fails,
    fails_with,
    failure_of,
    now_ms,
    run_start,
    ts,
    unique,
)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
DENIED = grpc.StatusCode.PERMISSION_DENIED

PRINCIPALS = {
    "operator": Entry("admin", namespaces=["*"]),
    "admin-default": Entry("admin"),
    "host-a": Entry("host", namespaces=["team-a"]),
    "host-ab": Entry("host", namespaces=["team-a", "team-b"]),
    "host-all": Entry("host", namespaces=["*"]),
    "host-default": Entry("host"),
}


@dataclass
class Served:
    server: ServerProcess
    store: Store
    database_url: str

    def metadata(
        self, principal: str | None, namespace: str | None = None, request_id: str = ""
    ) -> tuple[tuple[str, str], ...]:
        entries: list[tuple[str, str]] = []
        if principal is not None:
            entries.extend(bearer(PRINCIPALS[principal].token))
        if namespace is not None:
            entries.append((NAMESPACE_KEY, namespace))
        if request_id:
            entries.append(("x-request-id", request_id))
        return tuple(entries)

    async def access_line(self, request_id: str) -> dict[str, Any]:
        """The access-log line of the call with ``request_id`` (polled, bounded:
        the server writes its log from a thread of its own)."""
        deadline = time.monotonic() + SERVER_NOTICES_WITHIN
        while time.monotonic() < deadline:
            for line in self.server.log.decode().splitlines():
                if request_id in line and logs.ACCESS_LOGGER in line:
                    entry: dict[str, Any] = json.loads(line)
                    if entry.get("request_id") == request_id:
                        return entry
            await asyncio.sleep(0.01)
        raise AssertionError(f"no access line for {request_id}")

    async def create_session(self, principal: str | None, namespace: str | None = None) -> str:
        """Creates a session as ``principal``; returns the namespace it acted in."""
        request_id = unique("call")
        await self.store.admin.CreateSession(
            sa.CreateSessionRequest(session_id=unique("s"), created_at=ts(now_ms())),
            metadata=self.metadata(principal, namespace, request_id),
        )
        return str((await self.access_line(request_id))["namespace"])

    async def create_session_fails(
        self, principal: str | None, namespace: str | None = None
    ) -> Any:
        return await fails(
            self.store.admin.CreateSession(
                sa.CreateSessionRequest(session_id=unique("s"), created_at=ts(now_ms())),
                metadata=self.metadata(principal, namespace),
            )
        )


@asynccontextmanager
async def _serve(url: str, directory: Path, *, authenticated: bool = True) -> AsyncIterator[Served]:
    """A ``runstore serve`` process over ``url``, logging every call as JSON."""
    args = ["--database-url", url, "--migrate", "--log-format", "json", "--access-log"]
    if authenticated:
        auth_file = write_auth_file(directory / "auth.toml", PRINCIPALS)
        auth_file.chmod(0o600)
        args += ["--auth-file", str(auth_file)]
    async with (
        server_process(*args) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        yield Served(server, Store(channel, target=server.target), url)


@pytest.fixture(scope="module", params=backends.BACKENDS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    directory = tmp_path_factory.mktemp("namespaces")
    async with backends.database(request.param, directory) as url, _serve(url, directory) as it:
        await _create(it, "team-a", "team-b")
        yield it


async def _create(served: Served, *names: str, principal: str | None = "operator") -> None:
    for name in names:
        await served.store.namespaces.CreateNamespace(
            na.CreateNamespaceRequest(namespace=na.Namespace(name=name)),
            metadata=served.metadata(principal),
        )


def _new_name() -> str:
    return unique("ns")


# --- Which namespace a call acts in -------------------------------------------


async def test_a_principal_bound_to_one_namespace_acts_there_without_a_header(
    served: Served,
) -> None:
    assert await served.create_session("host-a") == "team-a"
    assert await served.create_session("host-default") == "default"
    assert await served.create_session("host-a", "team-a") == "team-a"


async def test_the_header_names_the_namespace_among_the_bound_ones(served: Served) -> None:
    assert await served.create_session("host-ab", "team-b") == "team-b"
    assert await served.create_session("host-ab", "team-a") == "team-a"
    assert await served.create_session("host-all", "team-b") == "team-b"
    assert await served.create_session("operator", "default") == "default"


@pytest.mark.parametrize("principal", ["host-ab", "host-all", "operator"])
async def test_without_a_header_several_bindings_are_namespace_required(
    served: Served, principal: str
) -> None:
    failure = await served.create_session_fails(principal)
    assert (failure.code, failure.reason) == (INVALID, "NAMESPACE_REQUIRED")
    assert failure.metadata["metadata"] == NAMESPACE_KEY
    assert NAMESPACE_KEY in failure.message


async def test_a_namespace_the_principal_is_not_bound_to_is_permission_denied(
    served: Served,
) -> None:
    """Whether the namespace exists or not: the refusal says nothing about it."""
    answers = set()
    for namespace in ("team-b", "default", "no-such-namespace"):
        failure = await served.create_session_fails("host-a", namespace)
        assert (failure.code, failure.reason) == (DENIED, "PERMISSION_DENIED"), failure
        assert failure.metadata["namespace"] == namespace
        answers.add((failure.code, failure.reason, failure.metadata["method"]))
    assert len(answers) == 1


async def test_an_unknown_namespace_is_namespace_not_found(served: Served) -> None:
    failure = await served.create_session_fails("host-all", "no-such-namespace")
    assert (failure.code, failure.reason) == (NOT_FOUND, "NAMESPACE_NOT_FOUND")
    assert failure.metadata["namespace"] == "no-such-namespace"


@pytest.mark.parametrize("value", ["Team-A", "-a", "a_b", "a" * 64, ""])
async def test_a_malformed_header_is_invalid_argument_naming_it(served: Served, value: str) -> None:
    failure = await served.create_session_fails("host-all", value)
    assert (failure.code, failure.reason) == (INVALID, "CONTRACT_VALIDATION")
    assert failure.metadata["field"] == NAMESPACE_KEY
    assert "[a-z0-9][a-z0-9-]{0,62}" in failure.message


async def test_the_header_sent_twice_is_invalid_argument(served: Served) -> None:
    failure = await fails(
        served.store.admin.CreateSession(
            sa.CreateSessionRequest(session_id=unique("s"), created_at=ts(now_ms())),
            metadata=(
                *served.metadata("host-all"),
                (NAMESPACE_KEY, "team-a"),
                (NAMESPACE_KEY, "team-b"),
            ),
        )
    )
    assert (failure.code, failure.reason, failure.metadata["field"]) == (
        INVALID,
        "CONTRACT_VALIDATION",
        NAMESPACE_KEY,
    )


async def test_a_created_namespace_is_served_at_once_and_a_deleted_one_refused_at_once(
    served: Served,
) -> None:
    name = _new_name()
    await _create(served, name)
    assert await served.create_session("host-all", name) == name
    await served.store.namespaces.DeleteNamespace(
        na.DeleteNamespaceRequest(name=name), metadata=served.metadata("operator")
    )
    failure = await served.create_session_fails("host-all", name)
    assert (failure.code, failure.reason) == (NOT_FOUND, "NAMESPACE_NOT_FOUND")


@pytest.mark.parametrize(
    ("principal", "code", "reason"),
    [
        ("admin-default", DENIED, "PERMISSION_DENIED"),  # an admin, but not bound to "*"
        ("host-all", DENIED, "PERMISSION_DENIED"),  # bound to "*", but not an admin
        (None, grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
    ],
)
async def test_only_an_admin_bound_to_every_namespace_manages_them(
    served: Served, principal: str | None, code: grpc.StatusCode, reason: str
) -> None:
    name = _new_name()
    for call in (
        served.store.namespaces.CreateNamespace(
            na.CreateNamespaceRequest(namespace=na.Namespace(name=name)),
            metadata=served.metadata(principal, "default"),
        ),
        served.store.namespaces.ListNamespaces(
            na.ListNamespacesRequest(), metadata=served.metadata(principal, "default")
        ),
    ):
        failure = await fails(call)
        assert (failure.code, failure.reason) == (code, reason)
    await fails_with(
        served.store.namespaces.GetNamespace(
            na.GetNamespaceRequest(name=name), metadata=served.metadata("operator")
        ),
        NOT_FOUND,
        "NAMESPACE_NOT_FOUND",
    )


async def test_with_authentication_off_the_header_or_default(tmp_path: Path) -> None:
    async with _serve(
        f"sqlite:///{tmp_path / 'runstore.db'}", tmp_path, authenticated=False
    ) as served:
        assert await served.create_session(None) == "default"
        failure = await served.create_session_fails(None, "team-x")
        assert (failure.code, failure.reason) == (NOT_FOUND, "NAMESPACE_NOT_FOUND")
        await _create(served, "team-x", principal=None)
        assert await served.create_session(None, "team-x") == "team-x"
        assert await served.create_session(None, "default") == "default"


@pytest.mark.postgres
async def test_another_replica_sees_a_creation_and_a_deletion_within_the_refresh(
    tmp_path: Path,
) -> None:
    """Two replicas on one database: what one creates or deletes, the other
    serves or refuses within ``REFRESH_SECONDS`` (docs/namespaces.md). Its view
    is at most that old: the first call once that much time has passed since
    the change sees it. A later call would too, so a slow machine cannot fail
    this; a replica that never refreshed, or refreshed late, does."""
    async with (
        postgres.fresh_database() as url,
        _serve(url, tmp_path) as first,
        _serve(url, tmp_path) as second,
    ):
        name = _new_name()
        assert not await _acts(second, name)  # its directory is read: now it is stale
        await _create(first, name)
        await asyncio.sleep(REFRESH_SECONDS)
        assert await _acts(second, name)
        await first.store.namespaces.DeleteNamespace(
            na.DeleteNamespaceRequest(name=name), metadata=first.metadata("operator")
        )
        await asyncio.sleep(REFRESH_SECONDS)
        assert not await _acts(second, name)


async def _acts(served: Served, name: str) -> bool:
    """Whether a call into ``name`` on ``served`` acts there (else it is refused
    as NAMESPACE_NOT_FOUND)."""
    try:
        await served.store.admin.CreateSession(
            sa.CreateSessionRequest(session_id=unique("s"), created_at=ts(now_ms())),
            metadata=served.metadata("host-all", name),
        )
    except grpc.aio.AioRpcError as err:
        assert failure_of(err).reason == "NAMESPACE_NOT_FOUND", err
        return False
    return True


async def test_an_open_stream_ends_once_its_principal_is_no_longer_bound_there(
    tmp_path: Path,
) -> None:
    """SIGHUP with an auth file that takes team-b from a principal ends its open
    Watch in team-b with PERMISSION_DENIED, as a new call would be refused; a
    principal still bound there keeps watching."""
    entries = {
        "operator": Entry("admin", namespaces=["*"]),
        "loses-b": Entry("reader", namespaces=["team-a", "team-b"]),
        "keeps-b": Entry("reader", namespaces=["team-b"]),
    }
    auth_file = write_auth_file(tmp_path / "auth.toml", entries)
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    async with (
        server_process("--database-url", database, "--auth-file", str(auth_file)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        store = Store(channel)
        operator = (*bearer(entries["operator"].token), (NAMESPACE_KEY, "team-b"))
        await store.namespaces.CreateNamespace(
            na.CreateNamespaceRequest(namespace=na.Namespace(name="team-b")), metadata=operator
        )
        run = run_start()
        await store.runtime.StartOneShotRun(run.one_shot_request(), metadata=operator)

        def watch(principal: str) -> Any:
            return store.runtime.WatchRunRecords(
                rs.WatchRunRecordsRequest(run_id=run.id),
                metadata=(*bearer(entries[principal].token), (NAMESPACE_KEY, "team-b")),
            )

        loses, keeps = watch("loses-b"), watch("keeps-b")
        for stream in (loses, keeps):
            first = await asyncio.wait_for(stream.read(), 30)
            assert [event.event_key for event in first.events] == ["started"]
        entries["loses-b"] = dataclasses.replace(entries["loses-b"], namespaces=["team-a"])
        write_auth_file(auth_file, entries)
        server.process.send_signal(signal.SIGHUP)
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(loses.read(), 30)
        failure = failure_of(ended.value)
        assert (failure.code, failure.reason) == (DENIED, "PERMISSION_DENIED")
        assert failure.metadata["namespace"] == "team-b"
        await store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record("after")), metadata=operator
        )
        kept = await asyncio.wait_for(keeps.read(), 30)
        assert [event.event_key for event in kept.events] == ["after"]
        keeps.cancel()
