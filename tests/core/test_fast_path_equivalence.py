"""AppendRunRecord's two paths agree (§9.3): the database's one-statement fast
path (``Database.append_if_writable``) and the core's full rules.

Each case builds one run/session/record state twice, in fresh IDs, straight
through the port. The fast path runs on one copy, the full rules alone (fast
path switched off) on the other, and ``appendable`` (``fast_paths.APPEND``,
the one list of the fast path's preconditions) is asked about the state as
read. All three must agree: the fast path stores exactly when the full rules
would store a new record, stores the same thing, and writes nothing otherwise.
Each case differs from the common case in one thing, so each precondition is
exercised on its own; changing the SQL, the rules or the list alone fails here.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pytest

from runstore.contract.errors import RunstoreError
from runstore.contract.model import RunStartOutcome, RunStatus, SessionStatus
from runstore.contract.namespaces import DEFAULT
from runstore.server.core.model import RecordDraft, RunRecord, RunState, Session
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from tests.backends import BACKENDS, opened
from tests.core.preconditions import appendable

T0 = 1_700_000_000_000 * 1_000_000
AGENT = "agent"
KEY = "k"


@dataclass(frozen=True)
class State:
    """One run/session/record state; the defaults are the common case."""

    run: RunStatus | None = RunStatus.RUNNING
    """The run's status; None: there is no run."""
    in_session: bool = True
    session: Literal["active", "ended", "purged", "missing"] = "active"
    record_agent: str = AGENT
    record_session: Literal["run's", "other", "none"] = "run's"
    existing: Literal["none", "same", "different", "other key"] = "none"
    """What the run already holds: a record under KEY (same or different), or under another key."""
    key_in_other_run: bool = False
    """Another run of the session already has a record under KEY (keys are per run)."""
    earlier_session_records: int = 0
    """Records of other runs in the session, so positions are not just 1."""


CASES: dict[str, State] = {
    "common case": State(),
    "common case, sessionless run": State(in_session=False),
    "missing run": State(run=None),
    "run suspended": State(run=RunStatus.SUSPENDED),
    "run completed": State(run=RunStatus.COMPLETED),
    "run failed": State(run=RunStatus.FAILED),
    "run canceled": State(run=RunStatus.CANCELED),
    "sessionless run suspended": State(in_session=False, run=RunStatus.SUSPENDED),
    "agent mismatch": State(record_agent="someone else"),
    "session mismatch": State(record_session="other"),
    "record without the run's session": State(record_session="none"),
    "sessionless run, record in a session": State(in_session=False, record_session="other"),
    "session ended": State(session="ended"),
    "session purged": State(session="purged"),
    "session row missing": State(session="missing"),
    "key used, same record": State(existing="same"),
    "key used, different record": State(existing="different"),
    "key used, same record, run completed": State(existing="same", run=RunStatus.COMPLETED),
    "key used, same record, session ended": State(existing="same", session="ended"),
    "sessionless, key used, same record": State(in_session=False, existing="same"),
    "sessionless, key used, different record": State(in_session=False, existing="different"),
    "other key used": State(existing="other key"),
    "key used in another run": State(key_in_other_run=True),
    "later position in the session": State(earlier_session_records=2),
}

_ids = itertools.count()


@dataclass(frozen=True)
class Built:
    run_id: str
    session_id: str
    record: RecordDraft


def _record(run_id: str, session_id: str, key: str = KEY, payload: bytes = b'{"n":1}') -> Any:
    return RecordDraft(
        event_key=key,
        run_id=run_id,
        agent_id=AGENT,
        session_id=session_id,
        turn_id="turn",
        type="note",
        payload=payload,
        timestamp=T0,
        namespace=DEFAULT,  # these tests act in default (tests/core/conftest.py)
    )


def _run(run_id: str, session_id: str, status: RunStatus) -> RunState:
    return RunState(run_id, AGENT, session_id, "", T0, {}, RunStartOutcome.PROCEED, status, "", T0)


async def build(db: Database, state: State) -> Built:
    """Writes ``state`` in fresh IDs through the port, bypassing every rule."""
    n = next(_ids)
    session_id = f"fast-s{n}" if state.in_session else ""
    run_id = f"fast-r{n}"
    record_session = {"run's": session_id, "other": f"fast-other{n}", "none": ""}
    record = replace(
        _record(run_id, record_session[state.record_session]), agent_id=state.record_agent
    )

    async def fn(tx: Transaction) -> None:
        if session_id and state.session != "missing":
            if state.session == "purged":
                await tx.purge_session(session_id, T0)
            else:
                await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, T0))
        for index in range(state.earlier_session_records):
            await tx.insert_run(_run(f"{run_id}-earlier{index}", session_id, RunStatus.RUNNING))
            await tx.append_record(_record(f"{run_id}-earlier{index}", session_id, "earlier"))
        if state.key_in_other_run:
            await tx.insert_run(_run(f"{run_id}-other", session_id, RunStatus.RUNNING))
            await tx.append_record(_record(f"{run_id}-other", session_id))
        if state.run is not None:
            await tx.insert_run(_run(run_id, session_id, state.run))
            if state.existing == "same":
                await tx.append_record(record)
            elif state.existing == "different":
                await tx.append_record(replace(record, payload=b'{"n":2}'))
            elif state.existing == "other key":
                await tx.append_record(replace(record, event_key="other"))
        if session_id and state.session == "ended":
            await tx.end_session(session_id, T0 + 1)

    await db.write(fn)
    return Built(run_id, session_id, record)


class FastPathSwitch:
    """The database with its fast path switched off, or on and watched."""

    def __init__(self, inner: Database, *, on: bool) -> None:
        self._inner = inner
        self._on = on
        self.fast_path_stored: list[int] = []

    async def write(self, fn: Any) -> Any:
        return await self._inner.write(fn)

    async def read(self, fn: Any) -> Any:
        return await self._inner.read(fn)

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        if not self._on:
            return None
        record_id = await self._inner.append_if_writable(record)
        if record_id is not None:
            self.fast_path_stored.append(record_id)
        return record_id


async def stored(db: Database, built: Built) -> tuple[Any, ...]:
    """What the run and its session hold, in a form two copies can compare."""

    def shape(record: RunRecord) -> tuple[Any, ...]:
        return (
            record.id,
            record.event_key,
            record.agent_id,
            record.turn_id,
            record.type,
            record.payload,
            record.timestamp,
            bool(record.session_id),
        )

    async def fn(tx: Transaction) -> tuple[Any, ...]:
        records = await tx.run_records(built.run_id, 0, 100, 1 << 30)
        positions = (
            [
                (position, record.event_key)
                for position, record in await tx.session_records(built.session_id, 0, 100, 1 << 30)
            ]
            if built.session_id
            else []
        )
        return tuple(shape(record) for record in records), tuple(positions)

    result: tuple[Any, ...] = await db.read(fn)
    return result


async def append(db: FastPathSwitch, record: RecordDraft) -> tuple[Any, ...]:
    """AppendRunRecord's outcome: stored or replayed with ID and session status, or the error."""
    try:
        result = await RuntimeStore(db).append_run_record(record)
    except RunstoreError as error:
        return ("rejected", error.reason)
    return ("stored" if result.inserted else "replayed", result.id, result.session_status)


def is_common_case(outcome: tuple[Any, ...]) -> bool:
    """A new record stored for a running run whose session (if any) is active."""
    return outcome[0] == "stored" and outcome[2] in (SessionStatus.ACTIVE, None)


@pytest.fixture(scope="module", params=BACKENDS)
async def db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    async with opened(request.param, tmp_path_factory.mktemp("fast"), "fast-path") as it:
        yield it.db


@pytest.mark.parametrize("state", CASES.values(), ids=CASES.keys())
async def test_fast_path_and_full_rules_have_identical_outcomes(db: Database, state: State) -> None:
    fast_copy, rules_copy = await build(db, state), await build(db, state)
    with_fast_path = FastPathSwitch(db, on=True)
    rules_only = FastPathSwitch(db, on=False)

    target = await db.read(lambda tx: tx.record_target(fast_copy.run_id, KEY))
    listed = appendable(target, fast_copy.record)
    before = await stored(db, fast_copy)
    fast_outcome = await append(with_fast_path, fast_copy.record)
    rules_outcome = await append(rules_only, rules_copy.record)

    assert fast_outcome == rules_outcome
    assert await stored(db, fast_copy) == await stored(db, rules_copy)
    took_fast_path = bool(with_fast_path.fast_path_stored)
    assert (took_fast_path, is_common_case(rules_outcome)) == (listed, listed), (
        f"appendable says {listed}; fast path stored: {took_fast_path}; "
        f"the full rules: {rules_outcome}"
    )
    if not took_fast_path and fast_outcome[0] != "stored":
        assert await stored(db, fast_copy) == before, "a declined fast path writes nothing"
