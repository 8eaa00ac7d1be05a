"""StartChildRun's and StartOneShotChildRun's two paths agree (§9.2.2,
§9.2.4): the database's one-statement fast path
(``Database.start_child_if_new``) and the core's full rules.

As in ``test_lifecycle_fast_paths``: each case builds one state twice in
fresh IDs, straight through the port; the start runs with the fast path on
one copy and with the full rules alone on the other, and ``child_startable``
(``fast_paths.CHILD_START`` and ``ONE_SHOT_CHILD_START``, the one lists of
the fast path's preconditions) is asked about the state as read. All three
must agree: the fast path stores exactly when the full rules store the common
case, stores the same thing (the link on the parent, the child and its
record, at the same session positions), and writes nothing otherwise. Each
case differs from the common case in one thing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Literal

import pytest

from runstore.contract import lifecycle
from runstore.contract import model as contract
from runstore.contract.errors import RunstoreError
from runstore.contract.model import RunStartOutcome, RunStatus
from runstore.server import call_scope
from runstore.server.core.model import ChildRunStart, OneShotChildRunStart, RecordDraft, RunStart
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from tests.core.preconditions import child_startable
from tests.core.test_lifecycle_fast_paths import (
    AGENT,
    LABELS,
    T0,
    FastPaths,
    _note,
    _prepare,
    _state,
    _stored,
    db,
)

__all__ = ["db"]  # the module fixture, one database per backend

PARENT_AGENT = "planner"
LINK_KEY = "linked"

_ids = itertools.count()


@dataclass(frozen=True)
class Child:
    """One state a child start meets; the defaults are the common case."""

    sessionless: bool = False
    """A one-shot child (StartOneShotChildRun) of a sessionless parent."""
    session: Literal["active", "ended", "purged", "missing"] = "active"
    parent: RunStatus | None = RunStatus.RUNNING
    parent_session: Literal["child's", "other"] = "child's"
    parent_agent: str = PARENT_AGENT
    """The stored parent's agent (the link names ``PARENT_AGENT``)."""
    link: Literal["none", "same", "different"] = "none"
    """A record of the parent under the link's key already, without the child."""
    run: Literal["none", "same", "different"] = "none"
    """A child with the start's ID already: this start's (a retry) or another."""
    purged: bool = False
    predecessor: bool = False
    earlier_records: int = 0
    parent_records: int = 0
    """Records of the parent besides its start, so its next ID is not 2."""


CASES: dict[str, Child] = {
    "common case": Child(),
    "later position in the session": Child(earlier_records=2),
    "parent with more records": Child(parent_records=3),
    "session ended": Child(session="ended"),
    "session purged": Child(session="purged"),
    "session missing": Child(session="missing"),
    "parent missing": Child(parent=None),
    "parent suspended": Child(parent=RunStatus.SUSPENDED),
    "parent completed": Child(parent=RunStatus.COMPLETED),
    "parent in another session": Child(parent_session="other"),
    "parent of another agent": Child(parent_agent="someone else"),
    "link key used on the parent, same link": Child(link="same"),
    "link key used on the parent, other record": Child(link="different"),
    "exact retry": Child(run="same", link="same"),
    "run ID taken by another start": Child(run="different"),
    "run ID purged": Child(purged=True),
    "continuation": Child(predecessor=True),
    "one-shot: common case": Child(sessionless=True),
    "one-shot: parent with more records": Child(sessionless=True, parent_records=3),
    "one-shot: parent missing": Child(sessionless=True, parent=None),
    "one-shot: parent suspended": Child(sessionless=True, parent=RunStatus.SUSPENDED),
    "one-shot: parent completed": Child(sessionless=True, parent=RunStatus.COMPLETED),
    "one-shot: parent in a session": Child(sessionless=True, parent_session="other"),
    "one-shot: parent of another agent": Child(sessionless=True, parent_agent="someone else"),
    "one-shot: link key used on the parent, same link": Child(sessionless=True, link="same"),
    "one-shot: link key used on the parent, other record": Child(
        sessionless=True, link="different"
    ),
    "one-shot: exact retry": Child(sessionless=True, run="same", link="same"),
    "one-shot: run ID taken by another start": Child(sessionless=True, run="different"),
    "one-shot: run ID purged": Child(sessionless=True, purged=True),
}

Start = ChildRunStart | OneShotChildRunStart


def _command(run_id: str, session_id: str, parent_id: str, predecessor: str) -> ChildRunStart:
    """A seed-era StartChildRun (``_one_shot`` makes a StartOneShotChildRun of it)."""
    run = RunStart(run_id, AGENT, session_id, parent_id, predecessor, T0, LABELS)
    namespace = call_scope.namespace()
    link = RecordDraft(
        LINK_KEY,
        parent_id,
        PARENT_AGENT,
        session_id,
        "",
        lifecycle.CHILD_RUN_LINKED,
        lifecycle.encode_child_run_linked(
            lifecycle.ChildRunLinkedPayload("tools.delegate", "call-1", run_id, AGENT)
        ),
        T0,
        namespace,
    )
    started = RecordDraft(
        "started",
        run_id,
        AGENT,
        session_id,
        "",
        lifecycle.RUN_STARTED,
        lifecycle.encode_run_started(
            lifecycle.RunStartedPayload(
                parent_run_id=parent_id, predecessor_run_id=predecessor, labels=LABELS
            )
        ),
        T0,
        namespace,
    )
    canceled = replace(
        started,
        event_key="stopped",
        type=lifecycle.RUN_COMPLETED,
        payload=lifecycle.encode_run_completed(
            lifecycle.RunCompletedPayload(
                status=lifecycle.COMPLETION_CANCELED,
                phase="canceled",
                cancellation_reason=lifecycle.REASON_SESSION_ENDED,
                labels=LABELS,
            )
        ),
    )
    return ChildRunStart(run, link, started, canceled)


def _one_shot(command: ChildRunStart) -> OneShotChildRunStart:
    assert command.parent_linked is not None
    return OneShotChildRunStart(command.run, command.parent_linked, command.started)


async def _build(db: Database, case: Child) -> Start:
    n = next(_ids)
    session_id = "" if case.sessionless else f"child-s{n}"
    run_id, parent_id = f"child-r{n}", f"child-p{n}"
    predecessor = f"{run_id}-before" if case.predecessor else ""
    command = _command(run_id, session_id, parent_id, predecessor)
    parent_session = session_id if case.parent_session == "child's" else f"child-other{n}"
    parent_notes = [
        _note(parent_id, parent_session, f"note{i}") for i in range(case.parent_records)
    ]

    async def then(tx: Transaction) -> None:
        if case.parent is not None:
            parent = _state(parent_id, parent_session, case.parent)
            await tx.insert_run(replace(parent, agent_id=case.parent_agent))
            for note in parent_notes:
                await tx.append_record(replace(note, agent_id=case.parent_agent))
        if case.link != "none":
            link = command.parent_linked
            assert link is not None
            if case.link == "different":
                link = replace(link, payload=b'{"other":1}')
            await tx.append_record(link)
        if predecessor:
            await tx.insert_run(_state(predecessor, session_id, RunStatus.SUSPENDED))
        if case.run != "none":
            state = replace(
                _state(run_id, session_id, RunStatus.RUNNING),
                parent_run_id=parent_id,
                keys=replace(_state(run_id, "", RunStatus.RUNNING).keys, parent_link=LINK_KEY),
            )
            if case.run == "different":
                state = replace(state, labels={"team": "b"})
            await tx.insert_run(state)
            assert command.started is not None
            await tx.append_record(command.started)
        if case.purged:
            await tx.insert_run(_state(run_id, "", RunStatus.COMPLETED))
            await tx.purge_sessionless_run(run_id, T0)

    await _prepare(db, session_id, case.session, case.earlier_records, then)
    return _one_shot(command) if case.sessionless else command


async def _start(db: FastPaths, command: Start) -> tuple[Any, ...]:
    store = RuntimeStore(db)
    try:
        if isinstance(command, contract.ChildRunStart):
            result = await store.start_child_run(command)
        else:
            result = await store.start_one_shot_child_run(command)
    except RunstoreError as error:
        return ("rejected", error.reason)
    started, link = result.started, result.parent_record
    return (
        "ok",
        result.outcome,
        result.run_status,
        (started.id, started.inserted, started.session_status),
        (link.id, link.inserted, link.session_status),
        (result.canceled.id, result.canceled.inserted),
    )


async def _everything(db: Database, command: Start) -> tuple[Any, ...]:
    run = command.run
    return (
        await _stored(db, run.run_id, run.session_id),
        await _stored(db, run.parent_run_id, ""),
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_child_start_fast_path_and_full_rules_agree(db: Database, case: Child) -> None:
    fast_copy, rules_copy = await _build(db, case), await _build(db, case)
    with_fast_path, rules_only = FastPaths(db, on=True), FastPaths(db, on=False)
    run, link = fast_copy.run, fast_copy.parent_linked
    assert link is not None

    async def look(tx: Transaction) -> tuple[Any, ...]:
        return (
            await tx.session(run.session_id),
            await tx.run(run.run_id),
            await tx.record_target(run.parent_run_id, LINK_KEY),
            await tx.run_purged(run.run_id),
        )

    session, stored, parent, purged = await db.read(look)
    listed = child_startable(session, stored, run, parent, link, purged)
    before = await _everything(db, fast_copy)
    fast_outcome = await _start(with_fast_path, fast_copy)
    rules_outcome = await _start(rules_only, rules_copy)

    assert _renamed(fast_outcome) == _renamed(rules_outcome)
    assert _renamed(await _everything(db, fast_copy)) == _renamed(await _everything(db, rules_copy))
    common = (
        rules_outcome[:3] == ("ok", RunStartOutcome.PROCEED, RunStatus.RUNNING)
        and rules_outcome[3][1]
    )
    took_fast_path = bool(with_fast_path.stored)
    assert (took_fast_path, bool(common) and not case.predecessor) == (listed, listed), (
        f"child_startable says {listed}; fast path stored: {took_fast_path}; rules: {rules_outcome}"
    )
    if not took_fast_path and (rules_outcome[0] == "rejected" or not rules_outcome[3][1]):
        assert await _everything(db, fast_copy) == before, "a declined fast path writes nothing"


def _renamed(value: Any) -> Any:
    """Two copies' states compared: each copy's IDs (run, parent, session)
    carry its own number, which the comparison drops."""
    text = repr(value)
    for prefix in ("child-s", "child-r", "child-p", "child-other"):
        while prefix in text:
            start = text.index(prefix)
            end = start + len(prefix)
            while end < len(text) and text[end].isdigit():
                end += 1
            text = text[:start] + "<" + prefix[:-1] + ">" + text[end:]
    return text


async def test_the_common_case_numbers_link_then_start(db: Database) -> None:
    """The link takes the session's next position and the parent's next ID;
    the child's started record the position right after, and ID 1."""
    command = await _build(db, Child(earlier_records=2, parent_records=2))
    run = command.run
    watched = FastPaths(db, on=True)
    outcome = await _start(watched, command)
    assert (outcome[3][:2], outcome[4][:2]) == (("1", True), ("3", True))
    assert sorted(watched.stored) == [1, 3]
    positions = await db.read(lambda tx: tx.session_records(run.session_id, 0, 100, 1 << 30))
    assert [(p, r.run_id, r.event_key) for p, r in positions] == [
        (1, f"{run.session_id}-earlier0", "earlier"),
        (2, f"{run.session_id}-earlier1", "earlier"),
        (3, run.parent_run_id, "note0"),
        (4, run.parent_run_id, "note1"),
        (5, run.parent_run_id, LINK_KEY),
        (6, run.run_id, "started"),
    ]
