"""RecordRunCancellation's and RecordRunSuspension's two paths agree (§9.4.1,
§9.4.2): the database's one-statement fast path (``Database.change_if_running``)
and the core's full rules.

As in ``test_lifecycle_fast_paths``: each case builds one state twice in
fresh IDs, straight through the port; the command runs with the fast path on
one copy and with the full rules alone on the other, and ``changeable``
(``fast_paths.CANCEL`` and ``SUSPEND``, the one lists of the fast path's
preconditions) is asked about the state as read. All three must agree: the
fast path stores exactly when the full rules store the common case, stores
the same thing (the run's checkpoint and keys included), and writes nothing
otherwise. Each case differs from the common case in one thing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pytest

from runstore.contract import lifecycle
from runstore.contract import model as contract
from runstore.contract.errors import RunstoreError
from runstore.contract.model import Checkpoint, RunStatus, SessionStatus
from runstore.server import call_scope
from runstore.server.core.lifecycle_changes import run_cancelling, run_suspending
from runstore.server.core.model import (
    GuardedChange,
    LifecycleKeys,
    RecordDraft,
    RunCancellation,
    RunSuspension,
)
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from tests.core.preconditions import changeable
from tests.core.test_lifecycle_fast_paths import (
    AGENT,
    KEY,
    T0,
    FastPaths,
    _prepare,
    _state,
    _stored,
    db,
)

__all__ = ["db"]  # the module fixture, one database per backend

REASON = lifecycle.REASON_USER_REQUESTED
CHECKPOINT = Checkpoint("checkpoint-1", b'{"s":1}')

_ids = itertools.count()


@dataclass(frozen=True)
class Change:
    """One state and command; the defaults are the common case."""

    run: RunStatus | None = RunStatus.RUNNING
    in_session: bool = True
    session: Literal["active", "ended", "purged", "missing"] = "active"
    record_agent: str = AGENT
    record_session: Literal["run's", "other"] = "run's"
    run_reason: str = ""
    """The run's cancellation reason."""
    keys: LifecycleKeys = field(default_factory=lambda: LifecycleKeys(start="started"))
    run_checkpoint: Checkpoint | None = None
    existing: Literal["none", "same", "different", "other key"] = "none"
    command_mismatch: bool = False
    """The record disagrees with its command (reason, or checkpoint ID)."""
    earlier_records: int = 0


def _cases(kind: str) -> dict[str, Change]:
    """The cases of ``kind`` (cancel or suspend): the common ones, then the
    states of a retry of that command."""
    key_slot = "cancellation" if kind == "cancel" else "suspension"
    retried = (
        Change(run_reason=REASON, keys=LifecycleKeys(start="started", cancellation=KEY))
        if kind == "cancel"
        else Change(
            run=RunStatus.SUSPENDED,
            run_checkpoint=CHECKPOINT,
            keys=LifecycleKeys(start="started", suspension=KEY, terminal=KEY),
        )
    )
    return {
        "common case": Change(),
        "common case, sessionless run": Change(in_session=False),
        "later position in the session": Change(earlier_records=2),
        "missing run": Change(run=None),
        "run suspended": Change(run=RunStatus.SUSPENDED),
        "run completed": Change(run=RunStatus.COMPLETED),
        "run canceled": Change(run=RunStatus.CANCELED),
        "agent mismatch": Change(record_agent="someone else"),
        "session mismatch": Change(record_session="other"),
        "session ended": Change(session="ended"),
        "session purged": Change(session="purged"),
        "session row missing": Change(session="missing"),
        "key used, different record": Change(existing="different"),
        "other key used": Change(existing="other key"),
        "record disagrees with its command": Change(command_mismatch=True),
        f"running run with another {key_slot} key": Change(
            keys=replace(LifecycleKeys(start="started"), **{key_slot: "earlier"})
        ),
        "running run with another reason": Change(run_reason=lifecycle.REASON_SESSION_ENDED),
        "running run with another checkpoint": Change(
            run_checkpoint=Checkpoint("checkpoint-0", b"{}")
        ),
        "exact retry": replace(retried, existing="same"),
        "sessionless exact retry": replace(retried, existing="same", in_session=False),
        "retry after the session ended": replace(retried, existing="same", session="ended"),
    }


def _record(kind: str, run_id: str, session_id: str, case: Change) -> RecordDraft:
    if kind == "cancel":
        reason = "other" if case.command_mismatch else REASON
        type_ = lifecycle.CANCELLATION_INTENT
        payload = lifecycle.encode_cancellation_intent(
            lifecycle.CancellationIntentPayload(reason=reason)
        )
    else:
        suspension_id = "other" if case.command_mismatch else CHECKPOINT.id
        type_ = lifecycle.RUN_SUSPENDED
        payload = lifecycle.encode_run_suspended(
            lifecycle.RunSuspendedPayload(suspension_id=suspension_id, version="v6")
        )
    return RecordDraft(
        KEY,
        run_id,
        case.record_agent,
        session_id,
        "",
        type_,
        payload,
        T0 + 5_000_000,
        call_scope.namespace(),
    )


Command = RunCancellation | RunSuspension


async def _build(db: Database, kind: str, case: Change) -> Command:
    n = next(_ids)
    session_id = f"chg-s{n}" if case.in_session else ""
    run_id = f"chg-r{n}"
    record_session = session_id if case.record_session == "run's" else f"chg-other{n}"
    record = _record(kind, run_id, record_session, case)
    command: Command = (
        RunCancellation(run_id, REASON, record)
        if kind == "cancel"
        else RunSuspension(run_id, CHECKPOINT, record)
    )

    async def then(tx: Transaction) -> None:
        if case.run is None:
            return
        state = _state(run_id, session_id, case.run, reason=case.run_reason)
        await tx.insert_run(replace(state, keys=case.keys, checkpoint=case.run_checkpoint))
        if case.existing == "same":
            await tx.append_record(record)
        elif case.existing == "different":
            await tx.append_record(replace(record, payload=b'{"other":1}'))
        elif case.existing == "other key":
            await tx.append_record(replace(record, event_key="other"))

    await _prepare(db, session_id, case.session, case.earlier_records, then)
    return command


def _guarded(command: Command) -> GuardedChange | None:
    if isinstance(command, contract.RunCancellation):
        return run_cancelling(command, T0 + 7)
    return run_suspending(command, T0 + 7)


async def _apply(db: FastPaths, command: Command) -> tuple[Any, ...]:
    store = RuntimeStore(db, clock=lambda: T0 + 7)
    try:
        if isinstance(command, contract.RunCancellation):
            result = await store.record_run_cancellation(command)
        else:
            result = await store.record_run_suspension(command)
    except RunstoreError as error:
        return ("rejected", error.reason)
    return ("stored" if result.inserted else "replayed", result.id, result.session_status)


async def _run_row(db: Database, run_id: str) -> tuple[Any, ...] | None:
    """What ``_stored`` leaves out: the checkpoint and the last change's time."""
    run = await db.read(lambda tx: tx.run(run_id))
    return None if run is None else (run.checkpoint, run.updated_at, run.status)


async def _everything(db: Database, command: Command) -> tuple[Any, ...]:
    assert command.record is not None
    return (
        await _stored(db, command.run_id, command.record.session_id),
        await _run_row(db, command.run_id),
    )


CASES = [
    pytest.param(kind, case, id=f"{kind}: {name}")
    for kind in ("cancel", "suspend")
    for name, case in _cases(kind).items()
]


@pytest.mark.parametrize(("kind", "case"), CASES)
async def test_change_fast_path_and_full_rules_agree(db: Database, kind: str, case: Change) -> None:
    fast_copy, rules_copy = await _build(db, kind, case), await _build(db, kind, case)
    with_fast_path, rules_only = FastPaths(db, on=True), FastPaths(db, on=False)
    run_id = fast_copy.run_id
    guarded = _guarded(fast_copy)
    target = await db.read(lambda tx: tx.record_target(run_id, KEY))
    listed = guarded is not None and changeable(target, guarded)
    before = await _everything(db, fast_copy)
    fast_outcome = await _apply(with_fast_path, fast_copy)
    rules_outcome = await _apply(rules_only, rules_copy)

    assert fast_outcome == rules_outcome
    fast_state, rules_state = await _everything(db, fast_copy), await _everything(db, rules_copy)
    assert fast_state == rules_state
    in_session_status = SessionStatus.ACTIVE if case.in_session else None
    common = rules_outcome[0] == "stored" and rules_outcome[2] is in_session_status
    took_fast_path = bool(with_fast_path.stored)
    assert (took_fast_path, common) == (listed, listed), (
        f"changeable says {listed}; fast path stored: {took_fast_path}; rules: {rules_outcome}"
    )
    if not took_fast_path and fast_outcome[0] != "stored":
        assert await _everything(db, fast_copy) == before, "a declined fast path writes nothing"


@pytest.mark.parametrize("kind", ["cancel", "suspend"])
async def test_a_declined_change_writes_nothing_whichever_precondition_fails(
    db: Database, kind: str
) -> None:
    """The fast path's own answer, without the full rules after it: for every
    case but the common ones it writes nothing and says so."""
    for name, case in _cases(kind).items():
        command = await _build(db, kind, case)
        guarded = _guarded(command)
        if guarded is None:
            continue
        target = await db.read(lambda tx, c=command: tx.record_target(c.run_id, KEY))
        before = await _everything(db, command)
        stored = await db.change_if_running(guarded)
        assert (stored is not None) == changeable(target, guarded), name
        if stored is None:
            assert await _everything(db, command) == before, name
