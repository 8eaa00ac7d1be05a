"""Tenancy fails closed (docs/namespaces.md, "For developers"): database work
with no namespace named raises ``NamespaceUnset`` instead of acting on
``default``; work over ``ALL_NAMESPACES`` cannot touch one namespace's rows;
and every background entry point names the scope it acts on, so each works
started from a context that names none (as the server starts them).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from runstore.contract.model import SessionStatus
from runstore.contract.namespaces import DEFAULT
from runstore.server.app import open_database
from runstore.server.call_scope import ALL_NAMESPACES, NamespaceUnset, acting_in
from runstore.server.config import ServerConfig
from runstore.server.core.context import ContextStore
from runstore.server.core.model import RecordDraft, Session
from runstore.server.core.namespace_model import Namespace
from runstore.server.core.namespaces import NamespaceDirectory, NamespaceStore
from runstore.server.core.ports import PURGED, Database, SessionLookup, Transaction
from runstore.server.core.quota_keeper import QuotaKeeper
from runstore.server.core.quotas import Quotas
from runstore.server.core.store import RuntimeStore
from runstore.server.retention import NANOS_PER_SECOND, RetentionSettings, RetentionTask
from runstore.server.seed_expiry import SeedExpiry
from tests import postgres
from tests.conftest import BACKENDS

T = TypeVar("T")
T0 = 1_700_000_000_000_000_000
_ids = itertools.count(1)


@pytest.fixture(scope="module", params=BACKENDS)
async def db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        path: Path = tmp_path_factory.mktemp("scope") / "scope.db"
        config = ServerConfig(database_url=f"sqlite:///{path}", migrate=True)
        async with open_database(config) as opened:
            yield opened.calls
        return
    async with (
        postgres.fresh_database("runstore_scope") as url,
        open_database(ServerConfig(database_url=url, migrate=True)) as opened,
    ):
        yield opened.calls


async def unscoped(work: Callable[[], Awaitable[T]]) -> T:
    """``work`` in a task of an empty context: no namespace named, as a task
    the server starts outside any call."""

    async def run() -> T:
        return await work()

    return await asyncio.create_task(run(), context=contextvars.Context())


def _insert(session_id: str, ended: bool = False) -> Callable[[Transaction], Awaitable[None]]:
    async def fn(tx: Transaction) -> None:
        await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, T0))
        if ended:
            await tx.end_session(session_id, T0 + 1)

    return fn


async def _lookup(db: Database, namespace: str, session_id: str) -> SessionLookup:
    async def fn(tx: Transaction) -> SessionLookup:
        return await tx.session(session_id)

    with acting_in(namespace):
        return await db.read(fn)


async def test_database_work_with_no_namespace_raises_and_writes_nothing(db: Database) -> None:
    session_id = f"unscoped-{next(_ids)}"
    with pytest.raises(NamespaceUnset, match="no namespace"):
        await unscoped(lambda: db.write(_insert(session_id)))
    with pytest.raises(NamespaceUnset, match="no namespace"):
        await unscoped(lambda: db.read(lambda tx: tx.session(session_id)))
    with pytest.raises(NamespaceUnset, match="no namespace"):
        await unscoped(lambda: RuntimeStore(db).load_session_status(session_id))
    assert await _lookup(db, DEFAULT, session_id) is None  # not written in default


def test_a_record_draft_names_its_namespace() -> None:
    """No dataclass default reads global state: a draft without one is a bug."""
    with pytest.raises(TypeError, match="namespace"):
        RecordDraft("k", "r", "a", "s", "", "note", b"{}", None)  # type: ignore[call-arg]


async def test_all_namespaces_refuses_one_namespace_s_rows(db: Database) -> None:
    session_id = f"everywhere-{next(_ids)}"
    with acting_in(ALL_NAMESPACES):
        with pytest.raises(NamespaceUnset, match="ALL_NAMESPACES"):
            await db.write(_insert(session_id))
        with pytest.raises(NamespaceUnset, match="ALL_NAMESPACES"):
            await db.read(lambda tx: tx.session(session_id))
        names = await db.read(lambda tx: tx.active_namespace_names())  # whole-database work
    assert isinstance(names, list)
    assert await _lookup(db, DEFAULT, session_id) is None


async def test_each_background_entry_point_acts_in_the_namespaces_it_names(
    db: Database,
) -> None:
    """Started from a context naming no namespace, each background task
    works, and acts in the namespace it names: retention purges in every
    namespace, the purge of a deleted namespace only in that one."""
    n = next(_ids)
    doomed, kept = f"doomed-{n}", f"kept-{n}"
    directory = NamespaceDirectory(db)
    namespaces = NamespaceStore(db, directory, purge_delay=0)
    fields = {field.name: field.name for field in dataclasses.fields(Namespace)}
    for name in (doomed, kept):
        draft = Namespace(name=name, state="", created_at=0, updated_at=0)
        await unscoped(functools.partial(namespaces.create, draft, fields))
    ended, live = f"ended-{n}", f"live-{n}"
    for namespace in (DEFAULT, doomed, kept):
        with acting_in(namespace):
            await db.write(_insert(ended, ended=True))
            await db.write(_insert(live))

    retention = RetentionTask(
        RuntimeStore(db),
        ContextStore(db),
        db.retention_lock,  # type: ignore[attr-defined]
        RetentionSettings(ended_sessions=1.0),
        clock=lambda: T0 + 10 * NANOS_PER_SECOND,
    )
    report = await unscoped(retention.run_pass)
    assert report.ran and report.sessions >= 3
    for namespace in (DEFAULT, doomed, kept):  # each namespace's own ended session
        assert await _lookup(db, namespace, ended) is PURGED
        assert isinstance(await _lookup(db, namespace, live), Session)

    assert await unscoped(SeedExpiry(RuntimeStore(db), ttl=60).run_pass) == 0
    keeper = QuotaKeeper(Quotas(directory), directory, db, interval=3600)
    await unscoped(keeper.tick)
    await unscoped(lambda: keeper.recount([doomed, kept]))
    await unscoped(directory.refresh)
    assert {doomed, kept} <= directory.active()
    listed, _ = await unscoped(lambda: namespaces.list(100, ""))
    assert {doomed, kept} <= {row.name for row in listed}

    await unscoped(lambda: namespaces.delete(doomed))
    await unscoped(lambda: namespaces.wait_purged(doomed))
    assert await _lookup(db, doomed, live) is None  # its purge: that namespace's rows
    for namespace in (DEFAULT, kept):  # and no other's
        assert isinstance(await _lookup(db, namespace, live), Session)
    assert await unscoped(directory.left_deleting) == []
    await namespaces.close()
