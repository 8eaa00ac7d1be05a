"""``run_tail`` and ``session_tail``: the newest record's ID and session
position, from one index lookup, as the console opens a history at its tail."""

from __future__ import annotations

import pytest

from runstore.contract.errors import RunNotFoundError, SessionNotFoundError
from runstore.server.core.store import RuntimeStore
from runstore.v1 import runtime_store_pb2 as rs
from tests.server.test_watch import watch_server
from tests.support import unique

pytestmark = pytest.mark.usefixtures("acting_in_default")  # direct database work


async def test_tails_follow_appends_in_a_run_and_across_a_sessions_runs(
    database_url: str,
) -> None:
    async with watch_server(database_url) as (store, stores):
        core: RuntimeStore = stores.runtime
        session = await store.session()
        first, second = await store.root(session), await store.root(session)
        assert await core.run_tail(first.id) == len(await store.records(first.id))
        in_session = await core.session_tail(session)
        assert in_session == len(await store.session_records(session))

        for key in ("a", "b", "c"):
            await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=first.record(key)))
        await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=second.record("z")))

        records = await store.records(first.id)
        assert await core.run_tail(first.id) == int(records[-1].id) == len(records)
        assert await core.session_tail(session) == in_session + 4
        assert await core.session_tail(session) == len(await store.session_records(session))


async def test_an_empty_session_has_tail_0_and_unknown_owners_are_not_found(
    database_url: str,
) -> None:
    async with watch_server(database_url) as (store, stores):
        core: RuntimeStore = stores.runtime
        assert await core.session_tail(await store.session()) == 0
        with pytest.raises(RunNotFoundError):
            await core.run_tail(unique("missing"))
        with pytest.raises(SessionNotFoundError):
            await core.session_tail(unique("missing"))
