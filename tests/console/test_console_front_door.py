"""The console is a front door like the gRPC API: its pages and live pages pass
the same concerns (the namespace's quotas, the call metrics, the access log,
the end of a deleted namespace's streams), and every route declares what it
passes (docs/console.md, "One front door")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from starlette.routing import Mount, Route

from runstore.contract.metadata import NAMESPACE_KEY
from runstore.server.app import Telemetry
from runstore.server.auth import roles
from runstore.server.concerns import FrontDoor
from runstore.server.console import app as console_app
from runstore.server.console.access import CONSOLE_METHODS
from runstore.server.core.namespace_streams import NamespaceStreams
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.quota_rules import METHODS
from runstore.server.core.quotas import Quotas
from runstore.server.logs import ACCESS_LOGGER
from runstore.server.metrics import Metrics
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import session_admin_pb2 as sa
from tests.console.support import ConsoleUnderTest, console_server
from tests.secured import Entry, channel_with_token
from tests.support import Store, failure_of, unique, until


class FakeClock:
    """Monotonic seconds for the quotas' rate buckets, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Served:
    under: ConsoleUnderTest
    clock: FakeClock
    metrics: Metrics
    operator: Store
    """NamespaceAdmin and every namespace, as a principal bound to ``*``."""

    @property
    def quotas(self) -> Quotas:
        keeper = self.under.running.quota_keeper
        assert isinstance(keeper, QuotaKeeper)
        return keeper.quotas

    @property
    def front(self) -> FrontDoor:
        """The console's concerns."""
        console = self.under.running.console
        assert console is not None
        return console.console.door

    def store(self, namespace: str) -> Store:
        return Store(
            channel_with_token(self.under.store.target, self.under.tokens["operator"], namespace)
        )

    async def namespace(self, **quotas: float) -> str:
        name = unique("door")[:40]
        await self.operator.namespaces.CreateNamespace(
            na.CreateNamespaceRequest(
                namespace=na.Namespace(name=name, quotas=na.NamespaceQuotas(**quotas))
            )
        )
        return name

    def bearer(self) -> dict[str, str]:
        return self.under.bearer("operator")


@pytest.fixture(scope="module")
async def door(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    clock = FakeClock()
    metrics = Metrics("test")
    async with console_server(
        tmp_path_factory.mktemp("console-door"),
        extra={"operator": Entry("admin", namespaces=["*"])},
        telemetry=Telemetry(metrics=metrics),
        quota_clock=clock,
        access_log=True,
    ) as under:
        operator = Store(channel_with_token(under.store.target, under.tokens["operator"]))
        try:
            yield Served(under, clock, metrics, operator)
        finally:
            await operator.channel.close()


def _at_quota(response: httpx.Response, quota: str) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["x-runstore-quota"] == quota
    assert int(response.headers["retry-after"]) >= 1
    assert quota in response.text


async def test_a_page_takes_one_read_of_its_namespace_and_is_refused_at_the_quota(
    door: Served,
) -> None:
    """At reads_per_second=1 (a burst of one): a session page (three reads of
    the store) is admitted, so it counts once; the next page, and a gRPC read of
    the same namespace, are refused, a page with 429, Retry-After and the
    quota's name; a second later a page is served again."""
    name = await door.namespace(reads_per_second=1)
    store = door.store(name)
    try:
        session_id = await store.session(unique("door-session"))
        async with httpx.AsyncClient(base_url=door.under.base, timeout=30) as http:
            page = {"id": session_id, "namespace": name}
            first = await http.get("/session", params=page, headers=door.bearer())
            assert first.status_code == 200, first.text
            refused = await http.get("/session", params=page, headers=door.bearer())
            _at_quota(refused, "reads_per_second")
            assert refused.headers["retry-after"] == "1"
            # One bucket for both doors: the gRPC read waits its turn too.
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await store.admin.LoadSession(sa.LoadSessionRequest(session_id=session_id))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert failure_of(caught.value).metadata["quota"] == "reads_per_second"
            door.clock.now += 1.0
            again = await http.get("/sessions", params={"namespace": name}, headers=door.bearer())
            assert again.status_code == 200, again.text
            _at_quota(
                await http.get("/runs", params={"namespace": name}, headers=door.bearer()),
                "reads_per_second",
            )
            # Another namespace's pages are not counted against this one.
            other = await http.get("/sessions", headers=door.bearer())
            assert other.status_code == 200
    finally:
        await store.channel.close()


async def test_a_live_page_holds_a_watch_streams_lease_until_it_disconnects(
    door: Served,
) -> None:
    """At watch_streams=1: while one live page is open a second one, and a gRPC
    Watch of the namespace, are refused; once the page's connection closes its
    lease goes, and a live page is served again."""
    name = await door.namespace(watch_streams=1)
    store = door.store(name)
    try:
        session_id = await store.session(unique("door-live"))
        live = {"id": session_id, "after": "0", "namespace": name}
        async with httpx.AsyncClient(base_url=door.under.base, timeout=30) as http:
            async with http.stream(
                "GET", "/session/events", params=live, headers=door.bearer()
            ) as first:
                assert first.status_code == 200
                assert door.quotas.open_streams(name) == 1
                _at_quota(
                    await http.get("/session/events", params=live, headers=door.bearer()),
                    "watch_streams",
                )
                watch = store.runtime.WatchSessionRunRecords(
                    rs.WatchSessionRunRecordsRequest(session_id=session_id),
                    metadata=(
                        ("authorization", f"Bearer {door.under.tokens['operator']}"),
                        (NAMESPACE_KEY, name),
                    ),
                )
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await asyncio.wait_for(watch.read(), 10)
                assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert failure_of(caught.value).metadata["quota"] == "watch_streams"
            await until(lambda: door.quotas.open_streams(name) == 0, "the lease is released")
            async with http.stream(
                "GET", "/session/events", params=live, headers=door.bearer()
            ) as again:
                assert again.status_code == 200
        await until(lambda: door.quotas.open_streams(name) == 0, "the second lease too")
        # Each live page is one server_stream call: the refused one
        # ResourceExhausted, the two the browser left Canceled (as a gRPC
        # Watch its client cancels).
        live_labels = {
            "grpc_service": "console",
            "grpc_method": "session_events",
            "grpc_type": "server_stream",
        }
        handled = "grpc_server_handled_total"
        assert _sample(door.metrics, handled, grpc_code="ResourceExhausted", **live_labels) == 1
        await until(
            lambda: _sample(door.metrics, handled, grpc_code="Canceled", **live_labels) == 2,
            "both live pages counted once their browser left",
        )
    finally:
        await store.channel.close()


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    event: dict[str, str] = {}
    async for line in lines:
        if not line:
            if event:
                yield event
            event = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            event[key] = value.lstrip()


async def test_deleting_a_namespace_ends_its_live_page_through_the_namespace_streams(
    door: Served,
) -> None:
    """The live page is open among its namespace's streams (the namespace
    code's registry, the one that ends a gRPC Watch) and holds a quota lease:
    deleting the namespace ends it with a failure event at once, and both go."""
    name = await door.namespace()
    store = door.store(name)
    try:
        run = await store.one_shot(agent_id="door-agent")
        async with (
            httpx.AsyncClient(base_url=door.under.base, timeout=30) as http,
            http.stream(
                "GET",
                "/run/events",
                params={"id": run.id, "after": "1", "namespace": name},
                headers=door.bearer(),
            ) as stream,
        ):
            assert stream.status_code == 200
            assert door.quotas.open_streams(name) == 1
            assert isinstance(door.front.streams, NamespaceStreams)
            assert door.front.streams.count(name) == 1
            events = _events(stream.aiter_lines())
            await door.operator.namespaces.DeleteNamespace(na.DeleteNamespaceRequest(name=name))
            ended = await asyncio.wait_for(anext(events), 20)
            assert ended["event"] == "failure" and "was deleted" in ended["data"]
        await until(lambda: door.quotas.open_streams(name) == 0, "the lease is released")
        assert door.front.streams.count(name) == 0
    finally:
        await store.channel.close()


async def test_a_live_page_meets_the_watcher_limit_a_grpc_watch_meets(tmp_path: Path) -> None:
    """With --max-watchers 1 and a gRPC Watch open, a live page is refused
    (503) with the server's own refusal, the one a second Watch gets."""
    async with console_server(tmp_path, auth=False, settings={"max_watchers": 1}) as under:
        session_id = await under.store.session(unique("door-watchers"))
        watch = under.store.runtime.WatchSessionRunRecords(
            rs.WatchSessionRunRecordsRequest(session_id=session_id)
        )
        try:
            await until(lambda: under.running.watch.open_streams == 1, "the Watch is open")
            async with httpx.AsyncClient(base_url=under.base, timeout=30) as http:
                page = await http.get("/session/events", params={"id": session_id, "after": "0"})
            second = under.store.runtime.WatchSessionRunRecords(
                rs.WatchSessionRunRecordsRequest(session_id=session_id)
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await asyncio.wait_for(second.read(), 10)
            assert failure_of(caught.value).metadata["max_watchers"] == "1"
            # The same refusal, worded as the gRPC caller reads it.
            assert page.status_code == 503
            assert f'<p class="error">{caught.value.details()}</p>' in page.text
        finally:
            watch.cancel()


def _sample(metrics: Metrics, name: str, **labels: str) -> float:
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def test_console_requests_are_counted_and_logged_as_console_calls(
    door: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """Each page is one call of ``console:<route>``: in the call metrics
    (service ``console``, the route its method) and one access-log line with its
    code, reason, principal, namespace and request id (docs/observability.md)."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    labels = {"grpc_service": "console", "grpc_method": "sessions", "grpc_type": "unary"}
    ok = {**labels, "grpc_code": "OK"}
    before = _sample(door.metrics, "grpc_server_handled_total", **ok)
    async with httpx.AsyncClient(base_url=door.under.base, timeout=30) as http:
        served = await http.get(
            "/sessions", headers={**door.bearer(), "x-request-id": "door-page-1"}
        )
        assert served.status_code == 200
        assert served.headers["x-request-id"] == "door-page-1"
        refused = await http.get(
            "/sessions", params={"namespace": "no-such-team"}, headers=door.bearer()
        )
        assert refused.status_code == 404
    assert _sample(door.metrics, "grpc_server_handled_total", **ok) == before + 1
    calls = {"grpc_service": "console", "grpc_method": "sessions", "grpc_code": "OK"}
    assert _sample(door.metrics, "runstore_calls_total", namespace="default", **calls) >= 1
    assert (
        _sample(
            door.metrics,
            "runstore_errors_total",
            namespace="",
            reason="NAMESPACE_NOT_FOUND",
        )
        >= 1
    )
    assert door.metrics.calls_in_flight.get("default", 0) == 0
    lines = [record.access for record in caplog.records if record.name == ACCESS_LOGGER]  # type: ignore[attr-defined]
    page = next(line for line in lines if line["request_id"] == "door-page-1")
    assert page["method"] == "console:sessions"
    assert page["code"] == "OK" and page["reason"] is None
    assert page["principal"] == "operator" and page["namespace"] == "default"
    assert page["peer"].startswith("ipv4:127.0.0.1:")
    missing = [line for line in lines if line["reason"] == "NAMESPACE_NOT_FOUND"]
    assert missing and missing[-1]["method"] == "console:sessions"
    assert missing[-1]["code"] == "NotFound" and missing[-1]["namespace"] is None


def test_every_route_declares_what_it_passes() -> None:
    """A route is either a screen declared in ``ROUTES`` (served behind the
    concerns) or declared open; a screen's reads are methods the roles and
    quota tables know, and what it counts against is one of theirs."""
    front = FrontDoor(
        directory=None,
        authenticated=True,
        quotas=None,
        metrics=None,
        access_log=False,
        watch=None,  # type: ignore[arg-type]
    )
    console = _console(front)
    served: set[str] = set()
    for route in console_app.create_app(console).routes:
        assert isinstance(route, Route | Mount)
        served.add(route.name)
        if route.name in console_app.OPEN_ROUTES:
            assert not isinstance(getattr(route, "endpoint", None), console_app.Screen)
            continue
        assert route.name in console_app.ROUTES, f"route {route.name!r} declares nothing"
        assert isinstance(route.endpoint, console_app.Screen), route.name
        assert route.methods == {"GET", "HEAD"}, route.name  # a screen only reads
    assert served == set(console_app.ROUTES) | console_app.OPEN_ROUTES
    # The screens read through exactly the methods declared console_reads
    # (whose roles admit a principal to the console).
    reads = {method for declared in console_app.ROUTES.values() for method in declared.reads}
    assert reads == CONSOLE_METHODS
    for name, declared in console_app.ROUTES.items():
        assert declared.reads, name
        for method in declared.reads:
            assert method in roles.METHOD_ROLES and method in METHODS, (name, method)
        assert declared.quota.kind in {METHODS[method].kind for method in declared.reads}, name
        assert not (declared.streams and declared.may_lag), name


def _console(front: FrontDoor) -> console_app.Console:
    from runstore.server.console.access import Access

    return console_app.Console(
        store=None,  # type: ignore[arg-type]
        watch=None,  # type: ignore[arg-type]
        access=Access(None),
        door=front,
        secure=False,
    )
