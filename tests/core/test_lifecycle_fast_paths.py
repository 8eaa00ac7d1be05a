"""StartRootRun's and RecordRunTerminal's two paths agree (§9.2.1, §9.4.3): the
database's one-statement fast paths (``Database.start_if_new``,
``Database.end_if_running``) and the core's full rules.

As in ``test_fast_path_equivalence``: each case builds one state twice in
fresh IDs, straight through the port; the command runs with the fast path on
one copy and with the full rules alone on the other, and ``startable`` /
``endable`` (``fast_paths.START`` and ``END``, the one lists of the fast
paths' preconditions) are asked about the state as read. All three must
agree: the fast path stores exactly when the full rules store the common case,
stores the same thing, and writes nothing otherwise. Each case differs from
the common case in one thing.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pytest

from runstore.contract import lifecycle
from runstore.contract.errors import RunstoreError
from runstore.contract.model import RunStartOutcome, RunStatus, SessionStatus
from runstore.server import call_scope
from runstore.server.core.lifecycle_changes import run_ending
from runstore.server.core.model import (
    GuardedChange,
    LifecycleKeys,
    RecordDraft,
    RootRunStart,
    RunEnding,
    RunStart,
    RunState,
    RunTerminal,
    Session,
)
from runstore.server.core.ports import Database, Transaction
from runstore.server.core.store import RuntimeStore
from tests.backends import BACKENDS, opened
from tests.core.preconditions import endable, startable

T0 = 1_700_000_000_000 * 1_000_000
AGENT = "agent"
KEY = "done"
LABELS = {"team": "a"}

_ids = itertools.count()


class FastPaths:
    """The database with its lifecycle fast paths switched off, or on and watched
    (``stored``: the IDs they stored)."""

    def __init__(self, inner: Database, *, on: bool) -> None:
        self._inner = inner
        self._on = on
        self.stored: list[int] = []

    async def write(self, fn: Any) -> Any:
        return await self._inner.write(fn)

    async def read(self, fn: Any) -> Any:
        return await self._inner.read(fn)

    async def append_if_writable(self, record: RecordDraft) -> int | None:
        return await self._inner.append_if_writable(record)

    async def start_if_new(self, run: RunState, started: RecordDraft) -> int | None:
        return self._watched(await self._inner.start_if_new(run, started) if self._on else None)

    async def end_if_running(self, ending: RunEnding) -> int | None:
        return self._watched(await self._inner.end_if_running(ending) if self._on else None)

    async def start_child_if_new(
        self, run: RunState, link: RecordDraft, started: RecordDraft
    ) -> tuple[int, int] | None:
        ids = await self._inner.start_child_if_new(run, link, started) if self._on else None
        if ids is not None:
            self.stored.extend(ids)
        return ids

    async def change_if_running(self, change: GuardedChange) -> int | None:
        return self._watched(await self._inner.change_if_running(change) if self._on else None)

    def _watched(self, record_id: int | None) -> int | None:
        if record_id is not None:
            self.stored.append(record_id)
        return record_id


@pytest.fixture(scope="module", params=BACKENDS)
async def db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    directory = tmp_path_factory.mktemp("lifecycle-fast")
    async with opened(request.param, directory, "lifecycle-fast") as it:
        yield it.db


async def _prepare(
    db: Database,
    session_id: str,
    session: str,
    earlier_records: int,
    then: Any = None,
) -> None:
    """A session in state ``session`` with ``earlier_records`` records of another run."""
    others = [f"{session_id}-earlier{index}" for index in range(earlier_records)]
    notes = [_note(other, session_id, "earlier") for other in others]  # made here: in scope

    async def fn(tx: Transaction) -> None:
        if session_id and session != "missing":
            if session == "purged":
                await tx.purge_session(session_id, T0)
            else:
                await tx.insert_session(Session(session_id, SessionStatus.ACTIVE, T0))
        for other, note in zip(others, notes, strict=True):
            await tx.insert_run(_state(other, session_id, RunStatus.RUNNING))
            await tx.append_record(note)
        if then is not None:
            await then(tx)
        if session_id and session == "ended":
            await tx.end_session(session_id, T0 + 1)

    await db.write(fn)


def _state(
    run_id: str,
    session_id: str,
    status: RunStatus,
    *,
    labels: Mapping[str, str] = LABELS,
    reason: str = "",
    terminal_key: str = "",
) -> RunState:
    return RunState(
        run_id,
        AGENT,
        session_id,
        "",
        T0,
        dict(labels),
        RunStartOutcome.PROCEED,
        status,
        reason,
        T0,
        LifecycleKeys(start="started", terminal=terminal_key),
    )


def _note(run_id: str, session_id: str, key: str) -> RecordDraft:
    return RecordDraft(
        key, run_id, AGENT, session_id, "", "note", b'{"n":1}', T0, call_scope.namespace()
    )


async def _stored(db: Database, run_id: str, session_id: str) -> tuple[Any, ...]:
    """What the run and its session hold, comparable between two copies."""

    async def fn(tx: Transaction) -> tuple[Any, ...]:
        run = await tx.run(run_id)
        records = await tx.run_records(run_id, 0, 100, 1 << 30)
        positions = (
            [(p, r.event_key) for p, r in await tx.session_records(session_id, 0, 100, 1 << 30)]
            if session_id
            else []
        )
        shape = (
            (run.status, run.start_outcome, run.cancellation_reason, run.keys, dict(run.labels))
            if run is not None
            else None
        )
        return (
            shape,
            # Payloads may name the run's own predecessor, named after the run.
            tuple(
                (
                    r.id,
                    r.event_key,
                    r.type,
                    r.payload.replace(run_id.encode(), b"<run>"),
                    r.timestamp,
                )
                for r in records
            ),
            tuple(positions),
        )

    result: tuple[Any, ...] = await db.read(fn)
    return result


def _outcome(result: Any) -> tuple[Any, ...]:
    started = result.started
    return (
        "ok",
        result.outcome,
        (started.id, started.inserted, started.session_status),
        (result.canceled.id, result.canceled.inserted),
    )


# --- StartRootRun -------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """One state a root start meets; the defaults are the common case."""

    session: Literal["active", "ended", "purged", "missing"] = "active"
    run: Literal["none", "same", "different"] = "none"
    """A run with the start's ID already: the same start (a retry) or another."""
    predecessor: bool = False
    """The start continues a suspended run (§10.2)."""
    earlier_records: int = 0


STARTS: dict[str, Start] = {
    "common case": Start(),
    "later position in the session": Start(earlier_records=2),
    "session ended": Start(session="ended"),
    "session purged": Start(session="purged"),
    "session missing": Start(session="missing"),
    "exact retry": Start(run="same"),
    "run ID taken by another start": Start(run="different"),
    "continuation": Start(predecessor=True),
    "continuation, session ended": Start(predecessor=True, session="ended"),
}


def _start_command(run_id: str, session_id: str, predecessor: str) -> RootRunStart:
    run = RunStart(run_id, AGENT, session_id, "", predecessor, T0, LABELS)
    started = RecordDraft(
        "started",
        run_id,
        AGENT,
        session_id,
        "",
        lifecycle.RUN_STARTED,
        lifecycle.encode_run_started(
            lifecycle.RunStartedPayload(predecessor_run_id=predecessor, labels=LABELS)
        ),
        T0,
        call_scope.namespace(),
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
    return RootRunStart(run, started, canceled)


async def _build_start(db: Database, case: Start) -> RootRunStart:
    n = next(_ids)
    session_id, run_id = f"start-s{n}", f"start-r{n}"
    predecessor = f"{run_id}-before" if case.predecessor else ""
    command = _start_command(run_id, session_id, predecessor)

    async def then(tx: Transaction) -> None:
        if predecessor:
            await tx.insert_run(_state(predecessor, session_id, RunStatus.SUSPENDED))
        if case.run != "none":
            labels = LABELS if case.run == "same" else {"team": "b"}
            await tx.insert_run(
                replace(_state(run_id, session_id, RunStatus.RUNNING, labels=labels), started_at=T0)
            )
            await tx.append_record(command.started)

    await _prepare(db, session_id, case.session, case.earlier_records, then)
    return command


async def _start(db: FastPaths, command: RootRunStart) -> tuple[Any, ...]:
    try:
        return _outcome(await RuntimeStore(db).start_root_run(command))
    except RunstoreError as error:
        return ("rejected", error.reason)


@pytest.mark.parametrize("case", STARTS.values(), ids=STARTS.keys())
async def test_start_fast_path_and_full_rules_agree(db: Database, case: Start) -> None:
    fast_copy, rules_copy = await _build_start(db, case), await _build_start(db, case)
    with_fast_path, rules_only = FastPaths(db, on=True), FastPaths(db, on=False)
    run = fast_copy.run

    async def look(tx: Transaction) -> tuple[Any, Any, bool]:
        return (
            await tx.session(run.session_id),
            await tx.run(run.run_id),
            await tx.run_purged(run.run_id),
        )

    session, stored, purged = await db.read(look)
    listed = startable(session, stored, run, purged)
    before = await _stored(db, run.run_id, run.session_id)
    fast_outcome = await _start(with_fast_path, fast_copy)
    rules_outcome = await _start(rules_only, rules_copy)

    assert fast_outcome == rules_outcome
    assert await _stored(db, run.run_id, run.session_id) == await _stored(
        db, rules_copy.run.run_id, rules_copy.run.session_id
    )
    common = rules_outcome[:2] == ("ok", RunStartOutcome.PROCEED) and rules_outcome[2][1]
    took_fast_path = bool(with_fast_path.stored)
    assert (took_fast_path, bool(common) and not case.predecessor) == (listed, listed), (
        f"startable says {listed}; fast path stored: {took_fast_path}; rules: {rules_outcome}"
    )
    if not took_fast_path and (rules_outcome[0] == "rejected" or not rules_outcome[2][1]):
        assert await _stored(db, run.run_id, run.session_id) == before, (
            "a declined fast path writes nothing"
        )


# --- RecordRunTerminal --------------------------------------------------------


@dataclass(frozen=True)
class End:
    """One state and command of RecordRunTerminal; the defaults are the common case."""

    run: RunStatus | None = RunStatus.RUNNING
    in_session: bool = True
    session: Literal["active", "ended", "purged", "missing"] = "active"
    status: RunStatus = RunStatus.COMPLETED
    """The command's status (the record always matches it, unless ``outcome`` says)."""
    outcome: RunStatus | None = None
    """The outcome the record's payload carries, if not the command's."""
    record_agent: str = AGENT
    record_session: Literal["run's", "other"] = "run's"
    run_labels: Mapping[str, str] = field(default_factory=lambda: dict(LABELS))
    run_reason: str = ""
    record_reason: str = lifecycle.REASON_USER_REQUESTED
    """The payload's reason when the command cancels."""
    terminal_key: str = ""
    existing: Literal["none", "same", "different", "other key"] = "none"
    earlier_records: int = 0


ENDS: dict[str, End] = {
    "common case": End(),
    "common case, sessionless run": End(in_session=False),
    "common case, failed": End(status=RunStatus.FAILED),
    "later position in the session": End(earlier_records=2),
    "canceled with the run's reason": End(
        status=RunStatus.CANCELED, run_reason=lifecycle.REASON_USER_REQUESTED
    ),
    "canceled by the engine, run without reason": End(
        status=RunStatus.CANCELED, record_reason=lifecycle.REASON_ENGINE_CANCELED
    ),
    "canceled, run without reason, other reason": End(status=RunStatus.CANCELED),
    "canceled, run with another reason": End(
        status=RunStatus.CANCELED, run_reason=lifecycle.REASON_SESSION_ENDED
    ),
    "canceled by the engine, run with another reason": End(
        status=RunStatus.CANCELED,
        run_reason=lifecycle.REASON_USER_REQUESTED,
        record_reason=lifecycle.REASON_ENGINE_CANCELED,
    ),
    "record outcome is not the command's": End(outcome=RunStatus.FAILED),
    "missing run": End(run=None),
    "run suspended": End(run=RunStatus.SUSPENDED),
    "run completed": End(run=RunStatus.COMPLETED),
    "run canceled": End(run=RunStatus.CANCELED),
    "running run with a terminal key": End(terminal_key="earlier"),
    "agent mismatch": End(record_agent="someone else"),
    "session mismatch": End(record_session="other"),
    "labels differ": End(run_labels={"team": "b"}),
    "session ended": End(session="ended"),
    "session purged": End(session="purged"),
    "session row missing": End(session="missing"),
    "key used, different record": End(existing="different"),
    "other key used": End(existing="other key"),
    "exact retry": End(run=RunStatus.COMPLETED, existing="same", terminal_key=KEY),
    "sessionless exact retry": End(
        in_session=False, run=RunStatus.COMPLETED, existing="same", terminal_key=KEY
    ),
}


def _completion(status: RunStatus, reason: str) -> bytes:
    code, phase = lifecycle.TERMINAL_COMPLETION[status]
    return lifecycle.encode_run_completed(
        lifecycle.RunCompletedPayload(
            status=code,
            phase=phase,
            failure=lifecycle.RunFailure(kind="tool", message="boom")
            if status is RunStatus.FAILED
            else None,
            cancellation_reason=reason if status is RunStatus.CANCELED else None,
            labels=LABELS,
        )
    )


async def _build_end(db: Database, case: End) -> RunTerminal:
    n = next(_ids)
    session_id = f"end-s{n}" if case.in_session else ""
    run_id = f"end-r{n}"
    record_session = {"run's": session_id, "other": f"end-other{n}"}[case.record_session]
    record = RecordDraft(
        KEY,
        run_id,
        case.record_agent,
        record_session,
        "",
        lifecycle.RUN_COMPLETED,
        _completion(case.outcome or case.status, case.record_reason),
        T0 + 5_000_000,
        call_scope.namespace(),
    )
    command = RunTerminal(run_id, case.status, record)

    async def then(tx: Transaction) -> None:
        if case.run is None:
            return
        state = _state(
            run_id,
            session_id,
            case.run,
            labels=case.run_labels,
            reason=case.run_reason,
            terminal_key=case.terminal_key,
        )
        await tx.insert_run(state)
        if case.existing == "same":
            await tx.append_record(record)
        elif case.existing == "different":
            await tx.append_record(replace(record, payload=_completion(RunStatus.FAILED, "")))
        elif case.existing == "other key":
            await tx.append_record(replace(record, event_key="other"))

    await _prepare(db, session_id, case.session, case.earlier_records, then)
    return command


async def _end(db: FastPaths, command: RunTerminal) -> tuple[Any, ...]:
    try:
        result = await RuntimeStore(db, clock=lambda: T0 + 7).record_run_terminal(command)
    except RunstoreError as error:
        return ("rejected", error.reason)
    return ("stored" if result.inserted else "replayed", result.id, result.session_status)


@pytest.mark.parametrize("case", ENDS.values(), ids=ENDS.keys())
async def test_terminal_fast_path_and_full_rules_agree(db: Database, case: End) -> None:
    fast_copy, rules_copy = await _build_end(db, case), await _build_end(db, case)
    with_fast_path, rules_only = FastPaths(db, on=True), FastPaths(db, on=False)
    assert fast_copy.record is not None and rules_copy.record is not None
    run_id, session_id = fast_copy.run_id, fast_copy.record.session_id
    ending = run_ending(fast_copy, T0 + 7)
    target = await db.read(lambda tx: tx.record_target(run_id, KEY))
    listed = ending is not None and endable(target, ending)
    before = await _stored(db, run_id, session_id)
    fast_outcome = await _end(with_fast_path, fast_copy)
    rules_outcome = await _end(rules_only, rules_copy)

    assert fast_outcome == rules_outcome
    assert await _stored(db, run_id, session_id) == await _stored(
        db, rules_copy.run_id, rules_copy.record.session_id
    )
    in_session_status = SessionStatus.ACTIVE if case.in_session else None
    common = rules_outcome[0] == "stored" and rules_outcome[2] is in_session_status
    took_fast_path = bool(with_fast_path.stored)
    assert (took_fast_path, common) == (listed, listed), (
        f"endable says {listed}; fast path stored: {took_fast_path}; rules: {rules_outcome}"
    )
    if not took_fast_path and fast_outcome[0] != "stored":
        assert await _stored(db, run_id, session_id) == before, (
            "a declined fast path writes nothing"
        )


@pytest.mark.parametrize("name", ["common case", "exact retry", "run completed", "missing run"])
async def test_a_terminal_command_decodes_its_payload_once(
    db: Database, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path's check and then the full rules (a retry, a run no longer
    running, one that does not exist) share one decode of the record's payload."""
    command = await _build_end(db, ENDS[name])
    decoded: list[bytes] = []
    decode = lifecycle.decode_run_completed

    def counted(payload: bytes) -> lifecycle.RunCompletedPayload:
        decoded.append(payload)
        return decode(payload)

    monkeypatch.setattr(lifecycle, "decode_run_completed", counted)
    outcome = await _end(FastPaths(db, on=True), command)
    expected = {"common case": "stored", "exact retry": "replayed"}.get(name, "rejected")
    assert outcome[0] == expected
    assert command.record is not None
    assert decoded == [command.record.payload]
