"""The client adapter against a real server: every method, every error class,
retries, deadlines, metadata and the blocking facade."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from runstore.client import (
    NO_RETRY,
    AppendResult,
    Checkpoint,
    ContractError,
    DeadlineExceededError,
    EventConflictError,
    InvalidTranscriptPositionError,
    ReadArgumentError,
    RemoteSessionAdmin,
    RemoteStore,
    RetryPolicy,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunRecord,
    RunRecordOwnerMismatchError,
    RunRepairOutcome,
    RunSessionMismatchError,
    RunStart,
    RunStartOutcome,
    RunStatus,
    RunSuspensionConflictError,
    RunSuspensionNotFoundError,
    RunTerminalConflictError,
    SeedAppend,
    SeedDeclaration,
    SeedKind,
    SeedPublication,
    SeedRecord,
    SessionActiveError,
    SessionAdmin,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionNotFoundError,
    SessionPurgedError,
    SessionStatus,
    Store,
    SyncRemoteSessionAdmin,
    SyncRemoteStore,
    TransientError,
    UnavailableError,
    ValidationError,
    convert,
    records,
)
from runstore.client.errors import from_rpc_error
from runstore.contract import errors as contract_errors
from runstore.server.app import create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.error_status import to_status
from runstore.server.interceptors.handlers import Chain
from runstore.server.interceptors.namespaces import NamespaceResolution
from runstore.server.servicers.runtime_store import RuntimeStoreServicer
from runstore.server.servicers.session_admin import SessionAdminServicer
from runstore.v1 import runtime_store_pb2_grpc, session_admin_pb2_grpc
from tests.support import Store as StubStore
from tests.support import unique

FAST_RETRY = RetryPolicy(initial=0.001, maximum=0.002, deadline=10.0)


@pytest.fixture
async def clients(store: StubStore) -> AsyncIterator[tuple[RemoteStore, RemoteSessionAdmin]]:
    async with (
        RemoteStore(store.target, retry=FAST_RETRY) as remote,
        RemoteSessionAdmin(store.target, retry=FAST_RETRY) as admin,
    ):
        yield remote, admin


def ms_now() -> datetime:
    return records.now()


def root(session_id: str, **changes: Any) -> RunStart:
    return RunStart(
        run_id=unique("run"),
        agent_id="agent",
        session_id=session_id,
        started_at=ms_now(),
        labels={"team": "a"},
        **changes,
    )


async def test_protocols_are_satisfied() -> None:
    def accepts(store: Store, admin: SessionAdmin) -> None: ...

    # Structural typing is checked by mypy; at runtime the methods exist.
    for name in Store.__dict__:
        if not name.startswith("_"):
            assert callable(getattr(RemoteStore, name)), name
    for name in SessionAdmin.__dict__:
        if not name.startswith("_"):
            assert callable(getattr(RemoteSessionAdmin, name)), name
    assert accepts is not None


async def _linked_child(remote: RemoteStore, parent: RunStart) -> RunStart:
    """Starts a child of ``parent`` (its first record after ``parent``'s start):
    in its session, or a one-shot child of a sessionless parent; checks both links."""
    child = RunStart(
        run_id=unique("child"),
        agent_id="helper",
        session_id=parent.session_id,
        parent_run_id=parent.run_id,
        started_at=ms_now(),
    )
    links = {"parent_agent_id": "agent", "tool_name": "tools.delegate", "tool_call_id": "call-7"}
    if parent.session_id:
        linked = await remote.start_child_run(records.child_run_start(child, **links))
    else:
        linked = await remote.start_one_shot_child_run(
            records.one_shot_child_run_start(child, **links)
        )
    assert (linked.parent_record.id, linked.started.id) == ("2", "1")
    return child


async def test_a_whole_run_lifecycle_through_typed_values(
    clients: tuple[RemoteStore, RemoteSessionAdmin],
) -> None:
    remote, admin = clients
    session_id = unique("session")
    created = await admin.create_session(session_id, datetime(2026, 11, 29, 10, tzinfo=UTC))
    assert created.status is SessionStatus.ACTIVE
    assert created.created_at == datetime(2026, 11, 29, 10, tzinfo=UTC)
    assert await remote.load_session_status(session_id) is SessionStatus.ACTIVE

    parent = root(session_id)
    started = await remote.start_root_run(records.root_run_start(parent))
    assert started.outcome is RunStartOutcome.PROCEED
    assert (started.started.id, started.started.inserted) == ("1", True)
    assert started.started.session_status is SessionStatus.ACTIVE

    child = await _linked_child(remote, parent)

    note = RunRecord(
        event_key="note-1",
        run_id=parent.run_id,
        agent_id="agent",
        session_id=session_id,
        type="planner_note",
        payload=b'{"note":"thinking"}',
        timestamp=ms_now(),
        turn_id="turn-1",
    )
    appended = await remote.append_run_record(note)
    assert (appended.id, appended.inserted) == ("3", True)
    assert (await remote.append_run_record(note)).inserted is False

    meta = await remote.load_run(parent.run_id)
    assert meta.labels == {"team": "a"} and meta.status is RunStatus.RUNNING
    assert meta.updated_at.tzinfo is UTC

    cancel = await remote.record_run_cancellation(records.run_cancellation(child, "user_requested"))
    assert cancel.inserted
    checkpoint = Checkpoint(id="ckpt-1", data=b"\x00\x01binary")
    suspension = records.run_suspension(child, checkpoint)
    suspended = await remote.record_run_suspension(suspension)
    assert suspended.inserted
    assert await remote.load_run_suspension(child.run_id) == checkpoint
    # A repair with the identical command finds it stored (a rebuilt command with
    # a new timestamp would be a different ending).
    repair = await remote.repair_run_suspension(suspension)
    assert repair.outcome is RunRepairOutcome.ALREADY_STORED
    assert repair.status is RunStatus.SUSPENDED

    done = await remote.record_run_terminal(records.run_terminal(parent, RunStatus.COMPLETED))
    assert done.inserted
    repair_done = await remote.repair_run_terminal(
        records.run_terminal(parent, RunStatus.COMPLETED, event_key="other-key")
    )
    assert repair_done.outcome is RunRepairOutcome.DIFFERENT_TERMINAL
    assert repair_done.record.id == ""

    page = await remote.list_run_records(parent.run_id, "", 2)
    assert [r.id for r in page.events] == ["1", "2"] and page.next_cursor == "2"
    rest = await remote.list_run_records(parent.run_id, page.next_cursor, 10)
    assert [r.type for r in rest.events] == ["planner_note", "run_completed"]
    assert rest.events[0] == replace(note, id="3")
    session_page = await remote.list_session_run_records(session_id, "", 100)
    assert len(session_page.events) == 7
    transcript = await remote.list_run_transcript_records(parent.run_id, "4", "", 10)
    assert transcript.events == () and transcript.next_cursor == ""

    runs = await admin.list_runs_by_session(session_id, [RunStatus.SUSPENDED])
    assert [run.run_id for run in runs] == [child.run_id]
    ended = await admin.end_session(session_id, datetime(2026, 11, 29, 11, tzinfo=UTC))
    assert ended.status is SessionStatus.ENDED and ended.ended_at is not None
    assert (await admin.load_session(session_id)).status is SessionStatus.ENDED
    await admin.purge_session(session_id)
    with pytest.raises(SessionPurgedError):
        await admin.load_session(session_id)


async def test_one_shot_runs(clients: tuple[RemoteStore, RemoteSessionAdmin]) -> None:
    remote, _ = clients
    parent = RunStart(run_id=unique("solo"), agent_id="agent", started_at=ms_now())
    result = await remote.start_one_shot_run(records.one_shot_run_start(parent))
    assert result.record.inserted and result.record.session_status is None
    await _linked_child(remote, parent)


async def test_each_contract_error_arrives_as_its_class(
    clients: tuple[RemoteStore, RemoteSessionAdmin],
) -> None:
    remote, admin = clients
    session_id = unique("errors")
    await admin.create_session(session_id, ms_now())
    run = root(session_id)
    await remote.start_root_run(records.root_run_start(run))

    async def raises(cls: type[Exception], call: Any) -> Any:
        with pytest.raises(cls) as caught:
            await call
        assert type(caught.value) is cls
        return caught.value

    await raises(SessionNotFoundError, admin.load_session(unique("nobody")))
    await raises(RunNotFoundError, remote.load_run(unique("ghost")))
    await raises(RunSuspensionNotFoundError, remote.load_run_suspension(run.run_id))
    await raises(SessionActiveError, admin.purge_session(session_id))
    await raises(ReadArgumentError, remote.list_run_records(run.run_id, "x", 10))
    await raises(
        InvalidTranscriptPositionError, remote.list_run_transcript_records(run.run_id, "", "", 1)
    )
    conflict = await raises(
        EventConflictError,
        remote.append_run_record(
            RunRecord(
                event_key="run_started",  # the key of the run's run_started record
                run_id=run.run_id,
                agent_id="agent",
                session_id=session_id,
                type="note",
                payload=b"{}",
                timestamp=ms_now(),
            )
        ),
    )
    assert (conflict.run_id, conflict.event_key) == (run.run_id, "run_started")
    assert conflict.permanent and isinstance(conflict, ContractError)
    await raises(
        RunConflictError,
        remote.start_root_run(records.root_run_start(replace(run, labels={"team": "b"}))),
    )
    await raises(
        RunRecordOwnerMismatchError,
        remote.append_run_record(
            RunRecord(
                event_key="x",
                run_id=run.run_id,
                agent_id="impostor",
                session_id=session_id,
                type="note",
                payload=b"{}",
                timestamp=ms_now(),
            )
        ),
    )
    validation = await raises(
        ValidationError,
        remote.append_run_record(
            RunRecord(
                event_key="late",
                run_id=run.run_id,
                agent_id="agent",
                session_id=session_id,
                type="note",
                payload=b"{}",
                timestamp=datetime.now(UTC).replace(microsecond=123456),
            )
        ),
    )
    assert validation.field == "record.timestamp"
    await remote.record_run_cancellation(records.run_cancellation(run, "user_requested"))
    await raises(
        RunCancellationConflictError,
        remote.record_run_cancellation(records.run_cancellation(run, "session_ended")),
    )
    await remote.record_run_suspension(records.run_suspension(run, Checkpoint("c1", b"x")))
    await raises(
        RunSuspensionConflictError,
        remote.record_run_suspension(records.run_suspension(run, Checkpoint("c2", b"y"))),
    )
    await raises(
        RunTerminalConflictError,
        remote.record_run_terminal(records.run_terminal(run, RunStatus.COMPLETED)),
    )
    await raises(
        RunNotActiveError,
        remote.append_run_record(
            RunRecord(
                event_key="after",
                run_id=run.run_id,
                agent_id="agent",
                session_id=session_id,
                type="note",
                payload=b"{}",
                timestamp=ms_now(),
            )
        ),
    )
    child = RunStart(
        run_id=unique("c"), agent_id="agent", parent_run_id=run.run_id, started_at=ms_now()
    )
    await raises(
        RunSessionMismatchError,
        remote.start_one_shot_child_run(
            records.one_shot_child_run_start(
                child, parent_agent_id="agent", tool_name="t", tool_call_id="c"
            )
        ),
    )
    live = root(session_id)
    await remote.start_root_run(records.root_run_start(live))
    await admin.end_session(session_id, ms_now())
    await raises(SessionEndedError, admin.create_session(session_id, ms_now()))
    await raises(SessionHasActiveRunsError, admin.purge_session(session_id))


@pytest.mark.parametrize("reason", sorted(contract_errors.error_classes()))
async def test_every_reason_rebuilds_the_class_the_server_raised(reason: str) -> None:
    """Server side ``to_status`` and client side ``from_rpc_error`` agree on
    every reason of the table, context included."""
    cls = contract_errors.error_classes()[reason]
    original = cls("some text", run_id="r", session_id="s", event_key="k", field="f")
    status = to_status(original)
    wire = grpc.aio.AioRpcError(
        status.code,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(*status.trailing_metadata),
        status.details,
    )
    rebuilt = from_rpc_error(wire)
    expected = contract_errors.UnavailableError if reason == "TRANSIENT" else cls
    assert type(rebuilt) is expected
    # Only contract errors (and quotas, naming the caller's namespace) keep
    # their text; others say nothing about internals.
    shown = issubclass(cls, (contract_errors.ContractError, contract_errors.QuotaExceededError))
    assert cls.shows_message is shown
    text = "some text" if shown else cls.default_message
    assert (
        rebuilt.message,
        rebuilt.run_id,
        rebuilt.session_id,
        rebuilt.event_key,
        rebuilt.field,
    ) == (
        text,
        "r",
        "s",
        "k",
        "f",
    )
    assert rebuilt.permanent is original.permanent
    assert rebuilt.__cause__ is wire


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.UNAVAILABLE, contract_errors.UnavailableError),
        (grpc.StatusCode.ABORTED, contract_errors.AbortedError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, contract_errors.DeadlineExceededError),
        (grpc.StatusCode.CANCELLED, contract_errors.CallCancelledError),
        (grpc.StatusCode.UNIMPLEMENTED, contract_errors.UnexpectedRpcError),
    ],
)
async def test_statuses_without_error_info_are_classified_by_code(
    code: grpc.StatusCode, cls: type[Exception]
) -> None:
    rebuilt = from_rpc_error(
        grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "proxy said no")
    )
    assert type(rebuilt) is cls
    assert isinstance(rebuilt, TransientError) is (code is not grpc.StatusCode.UNIMPLEMENTED)


# --- Retries against a server that fails on purpose --------------------------------


class FlakyRuntimeStore(RuntimeStoreServicer):
    """Fails calls with UNAVAILABLE: ``before`` calls without running them,
    then ``after`` calls after running them (the reply is lost)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.before = 0
        self.after = 0
        self.calls = 0
        self.hang = asyncio.Event()
        self.hanging = False
        self.metadata: list[dict[str, str]] = []

    async def AppendRunRecord(self, request: Any, context: Any) -> Any:
        self.calls += 1
        self.metadata.append(dict(context.invocation_metadata()))
        if self.hanging:
            await self.hang.wait()
        if self.before > 0:
            self.before -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
        response = await super().AppendRunRecord(request, context)
        if self.after > 0:
            self.after -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost")
        return response

    async def AppendRunRecords(self, request: Any, context: Any) -> Any:
        self.calls += 1
        if self.before > 0:
            self.before -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
        response = await super().AppendRunRecords(request, context)
        if self.after > 0:
            self.after -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost")
        return response


@pytest.fixture
async def flaky(tmp_path: Path) -> AsyncIterator[tuple[FlakyRuntimeStore, str]]:
    config = ServerConfig(listen="127.0.0.1:0", database_url=f"sqlite:///{tmp_path / 'f.db'}")
    async with open_database(config) as db:
        core = create_stores(config, db).runtime
        servicer = FlakyRuntimeStore(core)
        # Only the concern that names each call's namespace (here: default).
        server = grpc.aio.server(
            interceptors=[Chain([NamespaceResolution(None, authenticated=False)])]
        )
        runtime_store_pb2_grpc.add_RuntimeStoreServicer_to_server(servicer, server)
        session_admin_pb2_grpc.add_SessionAdminServicer_to_server(
            SessionAdminServicer(core), server
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            yield servicer, f"127.0.0.1:{port}"
        finally:
            servicer.hang.set()
            await server.stop(None)


async def _one_shot(target: str) -> RunStart:
    run = RunStart(run_id=unique("flaky"), agent_id="agent", started_at=ms_now())
    async with RemoteStore(target) as remote:
        await remote.start_one_shot_run(records.one_shot_run_start(run))
    return run


def _note(run: RunStart, key: str) -> RunRecord:
    return RunRecord(
        event_key=key,
        run_id=run.run_id,
        agent_id="agent",
        type="note",
        payload=b"{}",
        timestamp=ms_now(),
    )


async def test_lost_replies_are_retried_and_the_store_holds_one_record(
    flaky: tuple[FlakyRuntimeStore, str],
) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    servicer.after = 2
    retries: list[tuple[str, int]] = []
    async with RemoteStore(
        target, retry=FAST_RETRY, on_retry=lambda e, n, _: retries.append((e.reason, n))
    ) as remote:
        result = await remote.append_run_record(_note(run, "once"))
        assert (result.id, result.inserted) == ("2", False)  # the third attempt was an exact retry
        assert servicer.calls == 3
        assert retries == [("TRANSIENT", 1), ("TRANSIENT", 2)]
        page = await remote.list_run_records(run.run_id, "", 10)
        assert [r.event_key for r in page.events] == ["run_started", "once"]


async def test_a_batch_whose_reply_was_lost_is_retried_into_its_original_results(
    flaky: tuple[FlakyRuntimeStore, str],
) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    servicer.after = 1
    notes = [_note(run, "thinking"), _note(run, "text"), _note(run, "tool-call")]
    async with RemoteStore(target, retry=FAST_RETRY) as remote:
        results = await remote.append_run_records(notes)
        assert [(r.id, r.inserted) for r in results] == [("2", False), ("3", False), ("4", False)]
        assert servicer.calls == 2
        page = await remote.list_run_records(run.run_id, "", 10)
        assert [r.event_key for r in page.events] == [
            "run_started",
            "thinking",
            "text",
            "tool-call",
        ]
        changed = [notes[0], replace(notes[1], payload=b'{"changed":true}')]
        with pytest.raises(EventConflictError) as raised:
            await remote.append_run_records(changed)
        assert raised.value.field == "records[1]"
        assert servicer.calls == 3


async def test_refused_calls_are_retried_until_they_succeed(
    flaky: tuple[FlakyRuntimeStore, str],
) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    servicer.before = 3
    async with RemoteStore(target, retry=FAST_RETRY) as remote:
        result = await remote.append_run_record(_note(run, "eventually"))
    assert (result.id, result.inserted) == ("2", True)
    assert servicer.calls == 4


async def test_a_permanent_error_is_raised_at_once(flaky: tuple[FlakyRuntimeStore, str]) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    async with RemoteStore(target, retry=FAST_RETRY) as remote:
        await remote.append_run_record(_note(run, "k"))
        servicer.calls = 0
        changed = replace(_note(run, "k"), payload=b'{"changed":true}')
        with pytest.raises(EventConflictError):
            await remote.append_run_record(changed)
    assert servicer.calls == 1


async def test_retries_stop_at_max_attempts_with_the_last_error(
    flaky: tuple[FlakyRuntimeStore, str],
) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    servicer.before = 10
    async with RemoteStore(target, retry=FAST_RETRY.with_max_attempts(3)) as remote:
        with pytest.raises(UnavailableError) as caught:
            await remote.append_run_record(_note(run, "never"))
    assert servicer.calls == 3
    assert caught.value.status_code == "UNAVAILABLE" and not caught.value.permanent
    async with RemoteStore(target, retry=NO_RETRY) as remote:
        servicer.calls, servicer.before = 0, 1
        with pytest.raises(UnavailableError):
            await remote.append_run_record(_note(run, "never"))
    assert servicer.calls == 1


async def test_each_attempt_has_a_deadline(flaky: tuple[FlakyRuntimeStore, str]) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    servicer.hanging = True
    async with RemoteStore(target, timeout=0.05, retry=FAST_RETRY.with_max_attempts(2)) as remote:
        with pytest.raises(DeadlineExceededError):
            await remote.append_run_record(_note(run, "slow"))
    assert servicer.calls == 2


async def test_the_total_deadline_bounds_all_attempts(flaky: tuple[FlakyRuntimeStore, str]) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    servicer.hanging = True
    policy = RetryPolicy(initial=0.001, maximum=0.001, deadline=0.2)
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with RemoteStore(target, timeout=None, retry=policy) as remote:
        with pytest.raises(DeadlineExceededError):
            await remote.append_run_record(_note(run, "slow"))
    assert loop.time() - began < 5  # the single attempt got the remaining 0.2 s, not forever
    assert servicer.calls >= 1


async def test_metadata_reaches_the_server(flaky: tuple[FlakyRuntimeStore, str]) -> None:
    servicer, target = flaky
    run = await _one_shot(target)
    async with RemoteStore(target, metadata=[("authorization", "Bearer t0k3n")]) as remote:
        await remote.append_run_record(_note(run, "with-token"))
    assert servicer.metadata[-1]["authorization"] == "Bearer t0k3n"


async def test_blocking_facades_work_from_plain_threads(store: StubStore) -> None:
    def worker() -> tuple[str, int]:
        with SyncRemoteSessionAdmin(store.target) as admin, SyncRemoteStore(store.target) as remote:
            session_id = unique("sync")
            admin.create_session(session_id, ms_now())
            run = root(session_id)
            remote.start_root_run(records.root_run_start(run))
            remote.append_run_record(replace(_note(run, "n1"), session_id=session_id))
            batch = [replace(_note(run, f"b{i}"), session_id=session_id) for i in range(2)]
            assert [r.id for r in remote.append_run_records(batch)] == ["3", "4"]
            page = remote.list_run_records(run.run_id, "", 10)
            with pytest.raises(RunNotFoundError):
                remote.load_run(unique("nope"))
            return remote.load_session_status(session_id).value, len(page.events)

    assert await asyncio.to_thread(worker) == ("active", 4)


def test_naive_datetimes_are_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        convert.timestamp(datetime(2026, 1, 1))


def test_timestamps_round_trip_at_millisecond_precision() -> None:
    moment = datetime(2026, 11, 29, 10, 0, 0, 123000, tzinfo=UTC)
    assert convert.from_timestamp(convert.timestamp(moment)) == moment
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert convert.from_timestamp(convert.timestamp(before_epoch)) == before_epoch
    assert convert.timestamp(moment + timedelta(microseconds=1)).nanos == 123001000


async def _seeded(remote: RemoteStore, run: RunStart) -> RunStart:
    """``run`` naming the seed a current start attaches (§9.7.9), published:
    a literal, or its predecessor's history through record 1."""
    pred = run.predecessor_run_id
    d = SeedDeclaration(
        agent_id=run.agent_id,
        run_id=run.run_id,
        session_id=run.session_id,
        command_id=unique("command"),
        attempt_id=unique("attempt"),
        kind=SeedKind.CONTINUATION if pred else SeedKind.LITERAL,
        source_run_id=pred,
        source_end_id="1" if pred else "",
    )
    seed = await remote.begin_run_seed(d)

    async def append(record: SeedRecord) -> str:
        return await remote.append_run_seed(SeedAppend(run.run_id, d.attempt_id, record))

    previous = "0"
    if seed.source is not None:
        previous = await append(SeedRecord(key="source", previous_id="0", prefix=seed.source))
    history = await append(SeedRecord(key="m", previous_id=previous, messages=b"[]"))
    end = await append(SeedRecord(key="p", previous_id=history, prepared=b"x"))
    await remote.publish_run_seed(SeedPublication(run.run_id, d.attempt_id, history, end, 1))
    return replace(run, seed_end_id=history)


async def test_current_starts_through_typed_values(
    clients: tuple[RemoteStore, RemoteSessionAdmin],
) -> None:
    """A start with a request digest (§10.6): run status, the ended-session
    intent, closed-start replay and the successor, as typed values."""
    remote, admin = clients
    session_id = unique("session")
    await admin.create_session(session_id, ms_now())
    first = await _seeded(remote, root(session_id))
    digest = bytes(range(1, 33))
    started = await remote.start_root_run(records.root_run_start(first, request_digest=digest))
    assert (started.run_status, started.cancellation) == (RunStatus.RUNNING, AppendResult())
    await remote.record_run_suspension(
        records.run_suspension(first, Checkpoint("checkpoint-1", b"{}"))
    )
    later = replace(first, started_at=first.started_at + timedelta(hours=1))
    replayed = await remote.start_root_run(records.root_run_start(later, request_digest=digest))
    assert (replayed.run_status, replayed.started.id, replayed.started.inserted) == (
        RunStatus.SUSPENDED,
        "1",
        False,
    )
    successor = await _seeded(remote, replace(root(session_id), predecessor_run_id=first.run_id))
    await remote.start_root_run(records.root_run_start(successor, request_digest=digest[::-1]))
    assert (await remote.load_run(first.run_id)).successor_run_id == successor.run_id

    await admin.end_session(session_id, ms_now())
    stopped = await _seeded(remote, root(session_id))
    result = await remote.start_root_run(records.root_run_start(stopped, request_digest=digest))
    assert (result.outcome, result.run_status) == (RunStartOutcome.STOP, RunStatus.RUNNING)
    assert (result.cancellation.id, result.canceled) == ("2", AppendResult())
    shot = await _seeded(
        remote, RunStart(run_id=unique("solo"), agent_id="agent", started_at=ms_now())
    )
    one_shot = await remote.start_one_shot_run(
        records.one_shot_run_start(shot, request_digest=digest)
    )
    assert one_shot.run_status is RunStatus.RUNNING
