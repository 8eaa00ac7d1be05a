"""NamespaceAdmin (docs/namespaces.md#namespaceadmin) through the Python
client, on both backends: create, get, list with AIP-158 paging, update by
update_mask, and delete with its background purge of every table."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from runstore.client import (
    NamespaceExistsError,
    NamespaceNotFoundError,
    NamespaceProtectedError,
    NamespaceTombstonedError,
    ReadArgumentError,
    RemoteNamespaceAdmin,
    RemoteSessionAdmin,
    RemoteStore,
    SessionNotFoundError,
    SyncRemoteSessionAdmin,
    ValidationError,
)
from runstore.client.retry import NO_RETRY
from runstore.contract.metadata import NAMESPACE_KEY
from runstore.contract.model import SessionFilter
from runstore.server.core import listing
from runstore.server.core.namespaces import NamespaceStore
from runstore.server.db.namespace_sql import DATA_TABLES
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from tests import backends
from tests.secured import dump_database
from tests.seeds import Upload, declaration
from tests.support import Store, now_ms, run_start, started_record, ts, unique

PURGE_BATCH_ROWS = 3
"""Small, so that every table of a purged namespace takes several batches."""


@dataclass
class Admin:
    client: RemoteNamespaceAdmin
    target: str
    database_url: str
    store: NamespaceStore


@pytest.fixture(scope="module", params=backends.BACKENDS)
async def admin(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Admin]:
    directory = tmp_path_factory.mktemp("namespace-admin")
    async with backends.database(request.param, directory) as url, _serve(url) as served:
        yield served


@asynccontextmanager
async def _serve(url: str) -> AsyncIterator[Admin]:
    def small_purge_batches(stores: Any, db: Any) -> Any:
        assert stores.namespaces is not None
        namespaces = NamespaceStore(
            db.calls, stores.namespaces.directory, purge_batch_rows=PURGE_BATCH_ROWS
        )
        return dataclasses.replace(stores, namespaces=namespaces)

    async with (
        backends.served(url, stores=small_purge_batches) as server,
        RemoteNamespaceAdmin(server.target, retry=NO_RETRY) as client,
    ):
        yield Admin(client, server.target, url, server.stores.namespaces)


async def test_create_then_get_returns_every_setting(admin: Admin) -> None:
    name = unique("ns")
    settings: dict[str, Any] = {
        "description": "the chat product",
        "retain_ended_sessions_s": 86400.0,
        "retain_sessionless_runs_s": 3600.5,
        "quota_writes_per_s": 200.0,
        "quota_reads_per_s": 1000.0,
        "quota_watch_streams": 50,
        "quota_stored_bytes": 10**12,
    }
    created = await admin.client.create_namespace(name, **settings)
    assert (created.name, created.state) == (name, "active")
    assert dataclasses.asdict(created.settings) == settings
    assert created.created_at == created.updated_at
    assert await admin.client.get_namespace(name) == created
    with pytest.raises(NamespaceExistsError) as exists:
        await admin.client.create_namespace(name)
    assert exists.value.namespace == name


@pytest.mark.parametrize(
    ("name", "settings", "field"),
    [
        ("Upper", {}, "namespace.name"),
        ("-dash", {}, "namespace.name"),
        ("a" * 64, {}, "namespace.name"),
        ("", {}, "namespace.name"),
        ("ok", {"description": "x" * 1025}, "namespace.description"),
        ("ok", {"retain_ended_sessions_s": 0.0}, "namespace.retention.ended_sessions_seconds"),
        ("ok", {"retain_sessionless_runs_s": -1.0}, "namespace.retention.sessionless_runs_seconds"),
        ("ok", {"quota_writes_per_s": math.inf}, "namespace.quotas.writes_per_second"),
        ("ok", {"quota_reads_per_s": math.nan}, "namespace.quotas.reads_per_second"),
        ("ok", {"quota_watch_streams": -1}, "namespace.quotas.watch_streams"),
        ("ok", {"quota_stored_bytes": -5}, "namespace.quotas.stored_bytes"),
    ],
)
async def test_a_bad_namespace_is_refused_naming_the_field(
    admin: Admin, name: str, settings: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        await admin.client.create_namespace(name, **settings)
    assert refused.value.field == field


async def test_list_pages_in_name_order_to_the_end(admin: Admin) -> None:
    prefix = unique("page")
    for suffix in ("c", "a", "d", "b", "e"):
        await admin.client.create_namespace(f"{prefix}-{suffix}")
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await admin.client.list_namespaces(page_size=2, page_token=token)
        assert len(page.items) <= 2
        seen.extend(namespace.name for namespace in page.items)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(seen) and "default" in seen
    assert [name for name in seen if name.startswith(prefix)] == [
        f"{prefix}-{suffix}" for suffix in "abcde"
    ]
    assert pages == math.ceil(len(seen) / 2) or pages == math.ceil(len(seen) / 2) + 1
    # A made-up token, a session listing's token and the bare name the
    # namespace listing's tokens once were: INVALID_ARGUMENT naming page_token.
    sessions = listing.encode_token(listing.session_filter_digest(SessionFilter()), (1, "s"))
    for foreign in ("not a token!", sessions, "ZGVmYXVsdA"):
        with pytest.raises(ReadArgumentError) as bad_token:
            await admin.client.list_namespaces(page_token=foreign)
        assert bad_token.value.field == "page_token"
        assert bad_token.value.reason == "INVALID_ARGUMENT_READ"
    with pytest.raises(ReadArgumentError) as negative:
        await admin.client.list_namespaces(page_size=-1)
    assert negative.value.field == "page_size"


async def test_update_changes_only_the_masked_fields(admin: Admin) -> None:
    name = unique("ns")
    await admin.client.create_namespace(
        name, description="before", quota_watch_streams=3, quota_stored_bytes=100
    )
    changed = await admin.client.update_namespace(
        name, description="after", quota_stored_bytes=None, retain_ended_sessions_s=60.0
    )
    assert changed.settings.description == "after"
    assert changed.settings.quota_stored_bytes is None  # named and unset: cleared
    assert changed.settings.quota_watch_streams == 3  # not named: kept
    assert changed.settings.retain_ended_sessions_s == 60.0
    assert changed.updated_at > changed.created_at
    assert await admin.client.get_namespace(name) == changed
    with pytest.raises(ValidationError) as negative:
        await admin.client.update_namespace(name, quota_watch_streams=-2)
    assert negative.value.field == "namespace.quotas.watch_streams"
    with pytest.raises(NamespaceNotFoundError):
        await admin.client.update_namespace(unique("never"), description="x")


async def test_an_update_mask_is_required_and_checked(admin: Admin) -> None:
    from google.protobuf import field_mask_pb2

    from runstore.v1 import namespace_admin_pb2 as na

    name = unique("ns")
    await admin.client.create_namespace(name)
    for paths in ([], ["state"], ["quotas.nope"]):
        request = na.UpdateNamespaceRequest(
            namespace=na.Namespace(name=name), update_mask=field_mask_pb2.FieldMask(paths=paths)
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin.client.stub.UpdateNamespace(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "update_mask" in (refused.value.details() or "")


async def test_default_cannot_be_deleted_and_unknown_names_are_not_found(admin: Admin) -> None:
    with pytest.raises(NamespaceProtectedError):
        await admin.client.delete_namespace("default")
    assert (await admin.client.get_namespace("default")).state == "active"
    with pytest.raises(NamespaceNotFoundError):
        await admin.client.delete_namespace(unique("never"))
    with pytest.raises(NamespaceNotFoundError):
        await admin.client.get_namespace(unique("never"))


async def _fill(store: Store, ids: dict[str, str]) -> None:
    """Writes to every kind of table under fixed IDs (the same in each namespace)."""
    session = await store.session(ids["session"])
    for index in range(2):
        run = await store.root(session, run_id=f"{ids['run']}-{index}")
        for key in range(PURGE_BATCH_ROWS + 2):
            await store.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record(f"k{key}"))
            )
    ended = await store.session(ids["ended"])
    await store.end(ended)
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=ended))
    one_shot = await store.one_shot(run_id=ids["one-shot"], started_ms=now_ms() - 120_000)
    await store.runtime.RecordRunTerminal(one_shot.terminal_request())
    purged = await store.admin.PurgeSessionlessRuns(
        sa.PurgeSessionlessRunsRequest(finished_before=ts(now_ms() + 60_000), limit=1000)
    )
    assert one_shot.id in purged.purged_run_ids  # leaves its run tombstone
    seed = Upload(store.runtime, declaration(run_id=ids["seeded"]))
    await seed.begin()
    for _ in range(PURGE_BATCH_ROWS + 1):
        await seed.history(b"[]")
    await seed.compiled()
    await seed.publish()
    synchronous = run_start(run_id=ids["seeded"], seed_end_id=str(seed.seed_end))
    await store.runtime.StartSynchronousRun(
        sd.StartSynchronousRunRequest(
            run=synchronous.start, started=started_record(synchronous.start)
        )
    )
    for position in range(PURGE_BATCH_ROWS + 1):
        await store.memory.AppendEvents(
            ms.AppendEventsRequest(
                agent_id="agent",
                run_id=ids["memory"],
                idempotency_key=f"m{position}",
                events=[ms.MemoryEvent(type="user_message", timestamp=ts(now_ms()), data=b"{}")],
            )
        )
    for version in range(2):
        await store.context.SaveContext(
            ctx.SaveContextRequest(
                key=ids["context"],
                snapshot=ctx.ContextSnapshot(system_prompt=f"v{version}"),
                expected_version=version,
            )
        )
    await store.context.AppendTranscript(
        ctx.AppendTranscriptRequest(
            key=ids["context"],
            idempotency_key="t1",
            messages=[
                ctx.ContextMessage(
                    type="user",
                    content=[ctx.ContentBlock(type="text", text=ctx.TextBlock(text="hi"))],
                )
            ],
        )
    )


class _InNamespace(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Sends ``x-runstore-namespace`` with every unary call of a channel."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add(NAMESPACE_KEY, self._namespace)
        details = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        return await continuation(details, request)


def _rows_of(dump: dict[str, list[tuple[Any, ...]]], namespace: str) -> dict[str, list[Any]]:
    return {table: [row for row in dump[table] if row[0] == namespace] for table in DATA_TABLES}


async def test_delete_refuses_calls_then_purges_every_table_in_batches_and_tombstones(
    admin: Admin,
) -> None:
    name = unique("doomed")
    await admin.client.create_namespace(name)
    ids = {
        key: unique(key)
        for key in ("session", "run", "ended", "one-shot", "memory", "context", "seeded")
    }
    async with (
        grpc.aio.insecure_channel(admin.target) as plain,
        grpc.aio.insecure_channel(admin.target, interceptors=[_InNamespace(name)]) as doomed,
    ):
        await _fill(Store(doomed), ids)
        await _fill(Store(plain), ids)  # the same IDs in "default"
    before = await dump_database(admin.database_url)
    empty = [table for table, rows in _rows_of(before, name).items() if not rows]
    assert empty == [], empty
    deleting = await admin.client.delete_namespace(name)
    assert deleting.state == "deleting"
    again = await admin.client.delete_namespace(name)  # idempotent while deleting
    assert again.state == "deleting"
    await asyncio.wait_for(admin.store.wait_purged(name), timeout=60)
    with pytest.raises(NamespaceNotFoundError):
        await admin.client.get_namespace(name)
    after = await dump_database(admin.database_url)
    assert _rows_of(after, name) == {table: [] for table in DATA_TABLES}
    assert _rows_of(after, "default") == _rows_of(before, "default")
    assert [row[0] for row in after["namespace_tombstones"]].count(name) == 1
    with pytest.raises(NamespaceTombstonedError):
        await admin.client.create_namespace(name)


async def test_the_python_clients_act_in_the_namespace_they_name(admin: Admin) -> None:
    """``namespace=`` on RemoteSessionAdmin, RemoteStore and the sync facade."""
    name = unique("client")
    async with RemoteSessionAdmin(admin.target, namespace=name, retry=NO_RETRY) as in_it:
        with pytest.raises(NamespaceNotFoundError) as missing:
            await in_it.create_session("s", datetime.now(UTC))
        assert missing.value.namespace == name
        await admin.client.create_namespace(name)
        await in_it.create_session("s", datetime.now(UTC))
        async with RemoteStore(admin.target, namespace=name, retry=NO_RETRY) as store:
            assert (await store.load_session_status("s")).value == "active"
    async with RemoteSessionAdmin(admin.target, retry=NO_RETRY) as in_default:
        with pytest.raises(SessionNotFoundError):
            await in_default.load_session("s")  # "s" exists only in the other namespace

    def sync_calls() -> None:
        with SyncRemoteSessionAdmin(admin.target, namespace=name, retry=NO_RETRY) as facade:
            assert facade.load_session("s").id == "s"

    await asyncio.to_thread(sync_calls)
    for bad in ("Upper", "", "a" * 64):
        with pytest.raises(ValueError, match="namespace= must match"):
            RemoteStore(admin.target, namespace=bad)
    with pytest.raises(ValueError, match="not both"):
        RemoteStore(admin.target, namespace=name, metadata=((NAMESPACE_KEY, name),))


async def test_concurrent_creates_of_one_name_make_one_namespace(admin: Admin) -> None:
    """Creates of one name racing (side by side on PostgreSQL, where the
    backend retries a transaction that lost): one wins, the others answer
    ALREADY_EXISTS, never INTERNAL."""
    name = unique("race")
    outcomes = await asyncio.gather(
        *(admin.client.create_namespace(name) for _ in range(8)), return_exceptions=True
    )
    created = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    assert len(created) == 1, outcomes
    assert all(
        isinstance(outcome, NamespaceExistsError) for outcome in outcomes if outcome not in created
    ), outcomes
