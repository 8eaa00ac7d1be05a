"""StartOneShotRun's two paths agree (§9.2.3): the database's one-statement
fast path (``Database.start_if_new`` for a sessionless run) and the core's
full rules.

As in ``test_lifecycle_fast_paths``: each case builds one state twice in
fresh IDs, straight through the port; the start runs with the fast path on
one copy and with the full rules alone on the other, and ``startable``
(``fast_paths.ONE_SHOT_START``) is asked about the state as read. All three
must agree, and a declined fast path writes nothing. (StartOneShotChildRun's
cases are in ``test_child_start_fast_path``.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Literal

import pytest

from runstore.contract import lifecycle
from runstore.contract.errors import RunstoreError
from runstore.contract.model import RunStartOutcome, RunStatus
from runstore.server import call_scope
from runstore.server.core.model import OneShotRunStart, RecordDraft, RunStart
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from tests.core.preconditions import startable
from tests.core.test_lifecycle_fast_paths import AGENT, LABELS, T0, FastPaths, _state, _stored, db

__all__ = ["db"]  # the module fixture, one database per backend

_ids = itertools.count()


@dataclass(frozen=True)
class OneShot:
    """One state a one-shot start meets; the defaults are the common case."""

    run: Literal["none", "same", "different", "in a session"] = "none"
    """A run with the start's ID already: this start's (a retry), another
    one-shot start's, or a run of a session."""
    purged: bool = False


CASES: dict[str, OneShot] = {
    "common case": OneShot(),
    "exact retry": OneShot(run="same"),
    "run ID taken by another start": OneShot(run="different"),
    "run ID taken by a run of a session": OneShot(run="in a session"),
    "run ID purged": OneShot(purged=True),
}


def _command(run_id: str) -> OneShotRunStart:
    run = RunStart(run_id, AGENT, "", "", "", T0, LABELS)
    started = RecordDraft(
        "started",
        run_id,
        AGENT,
        "",
        "",
        lifecycle.RUN_STARTED,
        lifecycle.encode_run_started(lifecycle.RunStartedPayload(labels=LABELS)),
        T0,
        call_scope.namespace(),
    )
    return OneShotRunStart(run, started)


async def _build(db: Database, case: OneShot) -> OneShotRunStart:
    run_id = f"one-shot-r{next(_ids)}"
    command = _command(run_id)

    async def fn(tx: Transaction) -> None:
        if case.run != "none":
            state = _state(run_id, "", RunStatus.RUNNING)
            if case.run == "different":
                state = replace(state, labels={"team": "b"})
            elif case.run == "in a session":
                state = replace(state, session_id=f"{run_id}-session")
            await tx.insert_run(state)
            assert command.started is not None
            await tx.append_record(replace(command.started, session_id=state.session_id))
        if case.purged:
            await tx.insert_run(_state(run_id, "", RunStatus.COMPLETED))
            await tx.purge_sessionless_run(run_id, T0)

    await db.write(fn)
    return command


async def _start(db: FastPaths, command: OneShotRunStart) -> tuple[Any, ...]:
    try:
        result = await RuntimeStore(db).start_one_shot_run(command)
    except RunstoreError as error:
        return ("rejected", error.reason)
    started = result.started
    return (
        "ok",
        result.outcome,
        result.run_status,
        (started.id, started.inserted, started.session_status),
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_one_shot_fast_path_and_full_rules_agree(db: Database, case: OneShot) -> None:
    fast_copy, rules_copy = await _build(db, case), await _build(db, case)
    with_fast_path, rules_only = FastPaths(db, on=True), FastPaths(db, on=False)
    run = fast_copy.run

    async def look(tx: Transaction) -> tuple[Any, ...]:
        return await tx.run(run.run_id), await tx.run_purged(run.run_id)

    stored, purged = await db.read(look)
    listed = startable(None, stored, run, purged)
    before = await _stored(db, run.run_id, "")
    fast_outcome = await _start(with_fast_path, fast_copy)
    rules_outcome = await _start(rules_only, rules_copy)

    assert fast_outcome == rules_outcome
    assert await _stored(db, run.run_id, "") == await _stored(db, rules_copy.run.run_id, "")
    common = (
        rules_outcome[:3] == ("ok", RunStartOutcome.PROCEED, RunStatus.RUNNING)
        and rules_outcome[3][1]
    )
    took_fast_path = bool(with_fast_path.stored)
    assert (took_fast_path, bool(common)) == (listed, listed), (
        f"startable says {listed}; fast path stored: {took_fast_path}; rules: {rules_outcome}"
    )
    if not took_fast_path and (rules_outcome[0] == "rejected" or not rules_outcome[3][1]):
        assert await _stored(db, run.run_id, "") == before, "a declined fast path writes nothing"
