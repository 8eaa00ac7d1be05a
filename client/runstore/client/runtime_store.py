"""``RemoteStore``: the worker-facing ``Store`` and ``SeedStore`` over gRPC
(asyncio), one method per ``RuntimeStore`` RPC: arguments checked at the edge
(``runstore.client.arguments``), the request built, the call made as every
client makes it (``runstore.client.calls``), the answer converted back.
Appends share messages through ``coalesced_appends``; watches reconnect
through ``watch_streams``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from runstore.client import arguments, coalesced_appends, convert, watch_streams
from runstore.client.calls import Client
from runstore.client.coalesce import DEFAULT_COALESCING, AppendCoalescing
from runstore.client.model import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    ChildRunStartResult,
    OneShotChildRunStart,
    OneShotChildRunStartResult,
    OneShotRunStart,
    OneShotRunStartResult,
    Page,
    PreparationOperation,
    RootRunStart,
    RootRunStartResult,
    RunCancellation,
    RunMeta,
    RunPreparation,
    RunRecord,
    RunRepairResult,
    RunSeed,
    RunSuspension,
    RunTerminal,
    SeedAppend,
    SeedDeclaration,
    SeedPage,
    SeedPublication,
    SessionStatus,
)
from runstore.contract import seed_wire
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import seeds_pb2 as sd


class RemoteStore(Client):
    """The worker-facing ``Store`` over gRPC.

    Args:
        target: ``host:port`` of a runstore server (or pass ``channel``).

    Keyword Args:
        channel (grpc.aio.Channel | None): An existing ``grpc.aio`` channel; not
            closed by ``close()``.
        credentials (grpc.ChannelCredentials | None): Raw gRPC channel credentials
            (or use ``tls``); plaintext when None.
        tls (TLSConfig | None): TLS to the server, and the client certificate for mTLS.
        token (TokenSource | None): Bearer token sent as ``authorization: Bearer
            ...``: a string, or a callable (sync or async) returning the current
            one, asked per attempt.
            Surrounding whitespace is stripped; an empty token or one with
            control characters raises ``InvalidTokenError`` (a ``ValueError``)
            before any call.
        timeout (float | None): Seconds each attempt may take (the server gets the deadline).
        metadata (Sequence[tuple[str, str]]): Sent with every call.
        namespace (str | None): The namespace every call acts in, sent as
            ``x-runstore-namespace`` (docs/namespaces.md); None lets the server
            decide (the principal's only namespace, or ``default``).
        retry (RetryPolicy): How transient failures are retried; ``NO_RETRY`` disables it.
        keepalive (Keepalive | None): HTTP/2 keepalive settings; None disables pings.
        options (Sequence[tuple[str, Any]]): Extra gRPC channel options.
        tracing (bool | None): Client spans and trace context (the ``otel`` extra); None: on
            when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the extra installed.
        tracer_provider (Any | None): The OpenTelemetry tracer provider of the spans
            (implies ``tracing``); None: the application's global one.
        on_retry (RetryCallback | None): Called with (error, attempt, sleep) before
            each retry's sleep, refusals and outages alike (``RetryCallback``);
            a refusal (RESOURCE_EXHAUSTED) is also a WARNING record on the
            ``runstore.client`` logger. ``retry.refusal_deadline`` (60 s) bounds
            how long refusals are retried before the refusal is raised.
        clock (RetryClock): Time, sleep and jitter of the retries (tests inject one).
        coalescing (AppendCoalescing | None): The bounds within which concurrent
            ``append_run_record`` calls share messages (``AppendCoalescing``);
            None turns it off, so every append is its own AppendRunRecord call.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        coalescing: AppendCoalescing | None = DEFAULT_COALESCING,
        **kwargs: Any,
    ) -> None:
        super().__init__(target, **kwargs)
        self.stub = rs_grpc.RuntimeStoreStub(self.channel)
        """The generated stub, for anything this client does not model."""
        self.coalescer = coalesced_appends.coalescer_for(self, self.stub, coalescing)
        """Shares messages among concurrent ``append_run_record`` calls; None: off."""

    async def load_session_status(self, session_id: str) -> SessionStatus:
        arguments.text("session_id", session_id)
        response = await self._call(
            self.stub.LoadSessionStatus, rs.LoadSessionStatusRequest(session_id=session_id)
        )
        return convert.SESSION_STATUS[response.status]

    async def start_root_run(self, command: RootRunStart) -> RootRunStartResult:
        arguments.instance("command", command, RootRunStart)
        response = await self._call(self.stub.StartRootRun, convert.root_run_start(command))
        return RootRunStartResult(
            outcome=convert.START_OUTCOME[response.outcome],
            started=convert.from_append_result(response.started),
            canceled=convert.from_append_result(response.canceled),
            run_status=convert.RUN_STATUS.get(response.run_status),
            cancellation=convert.from_append_result(response.cancellation),
        )

    async def start_child_run(self, command: ChildRunStart) -> ChildRunStartResult:
        arguments.instance("command", command, ChildRunStart)
        response = await self._call(self.stub.StartChildRun, convert.child_run_start(command))
        return ChildRunStartResult(
            outcome=convert.START_OUTCOME[response.outcome],
            parent_record=convert.from_append_result(response.parent_record),
            started=convert.from_append_result(response.started),
            canceled=convert.from_append_result(response.canceled),
            run_status=convert.RUN_STATUS.get(response.run_status),
            cancellation=convert.from_append_result(response.cancellation),
        )

    async def start_one_shot_run(self, command: OneShotRunStart) -> OneShotRunStartResult:
        arguments.instance("command", command, OneShotRunStart)
        response = await self._call(self.stub.StartOneShotRun, convert.one_shot_run_start(command))
        return OneShotRunStartResult(
            record=convert.from_append_result(response.record),
            run_status=convert.RUN_STATUS.get(response.run_status),
        )

    async def start_one_shot_child_run(
        self, command: OneShotChildRunStart
    ) -> OneShotChildRunStartResult:
        arguments.instance("command", command, OneShotChildRunStart)
        response = await self._call(
            self.stub.StartOneShotChildRun, convert.one_shot_child_run_start(command)
        )
        return OneShotChildRunStartResult(
            parent_record=convert.from_append_result(response.parent_record),
            started=convert.from_append_result(response.started),
            run_status=convert.RUN_STATUS.get(response.run_status),
        )

    async def append_run_record(self, record: RunRecord) -> AppendResult:
        """Stores one record (§9.3). Concurrent calls share messages
        (``runstore.client.coalesce``, docs/limits.md "Coalesced appends")
        unless the client was made with ``coalescing=None``; each call keeps
        its own result, error, retry and deadline either way."""
        arguments.instance("record", record, RunRecord)
        request = rs.AppendRunRecordRequest(record=convert.record(record))
        if self.coalescer is None:
            return convert.from_append_result(await self._call(self.stub.AppendRunRecord, request))
        return convert.from_append_result(
            await coalesced_appends.coalesced_append(self, self.coalescer, request)
        )

    async def append_run_records(self, records: Sequence[RunRecord]) -> list[AppendResult]:
        """Several records of one run in one call and one transaction, all or
        none (docs/contract.md §9.3.1): one result per record, in order. Safe
        to retry like ``append_run_record``: the identical batch again returns
        the original results."""
        for index, record in enumerate(records):
            arguments.instance(f"records[{index}]", record, RunRecord)
        request = rs.AppendRunRecordsRequest(records=[convert.record(r) for r in records])
        response = await self._call(self.stub.AppendRunRecords, request)
        return [convert.from_append_result(result) for result in response.results]

    async def record_run_cancellation(self, command: RunCancellation) -> AppendResult:
        arguments.instance("command", command, RunCancellation)
        response = await self._call(
            self.stub.RecordRunCancellation, convert.run_cancellation(command)
        )
        return convert.from_append_result(response)

    async def record_run_suspension(self, command: RunSuspension) -> AppendResult:
        arguments.instance("command", command, RunSuspension)
        request = rs.RecordRunSuspensionRequest(**convert.run_suspension(command))
        return convert.from_append_result(await self._call(self.stub.RecordRunSuspension, request))

    async def record_run_terminal(self, command: RunTerminal) -> AppendResult:
        arguments.instance("command", command, RunTerminal)
        request = rs.RecordRunTerminalRequest(**convert.run_terminal(command))
        return convert.from_append_result(await self._call(self.stub.RecordRunTerminal, request))

    async def repair_run_suspension(self, command: RunSuspension) -> RunRepairResult:
        arguments.instance("command", command, RunSuspension)
        request = rs.RepairRunSuspensionRequest(**convert.run_suspension(command))
        return convert.from_repair(await self._call(self.stub.RepairRunSuspension, request))

    async def repair_run_terminal(self, command: RunTerminal) -> RunRepairResult:
        arguments.instance("command", command, RunTerminal)
        request = rs.RepairRunTerminalRequest(**convert.run_terminal(command))
        return convert.from_repair(await self._call(self.stub.RepairRunTerminal, request))

    async def load_run(self, run_id: str) -> RunMeta:
        arguments.text("run_id", run_id)
        response = await self._call(self.stub.LoadRun, rs.LoadRunRequest(run_id=run_id))
        return convert.from_run_meta(response.run)

    async def load_run_suspension(self, run_id: str) -> Checkpoint:
        arguments.text("run_id", run_id)
        response = await self._call(
            self.stub.LoadRunSuspension, rs.LoadRunSuspensionRequest(run_id=run_id)
        )
        return convert.from_checkpoint(response.suspension)

    async def list_run_records(
        self, run_id: str, cursor: str, limit: int, *, types: Collection[str] = ()
    ) -> Page:
        """Up to ``limit`` records of the run after ``cursor`` ("" for the first
        page; then the last page's ``next_cursor``), in run order (§9.6.3).

        ``types`` keeps only records of those types (a triage read, not the
        contract's): such a page examines a bounded stretch of the run, so it
        may hold fewer than ``limit`` records, or none, and still have a
        ``next_cursor`` to follow."""
        arguments.text("run_id", run_id)
        arguments.cursor("cursor", cursor)
        arguments.count("limit", limit)
        request = rs.ListRunRecordsRequest(
            run_id=run_id, cursor=cursor, limit=limit, types=arguments.texts("types", types)
        )
        return convert.from_page(await self._call(self.stub.ListRunRecords, request))

    async def list_session_run_records(self, session_id: str, cursor: str, limit: int) -> Page:
        """Up to ``limit`` records of the session after ``cursor`` ("" for the
        first page; then the last page's ``next_cursor``), in commit order (§9.6.4)."""
        arguments.text("session_id", session_id)
        arguments.cursor("cursor", cursor)
        arguments.count("limit", limit)
        request = rs.ListSessionRunRecordsRequest(session_id=session_id, cursor=cursor, limit=limit)
        return convert.from_page(await self._call(self.stub.ListSessionRunRecords, request))

    async def list_run_transcript_records(
        self, run_id: str, through_record_id: str, after_record_id: str, limit: int
    ) -> Page:
        arguments.text("run_id", run_id)
        arguments.text("through_record_id", through_record_id)
        arguments.text("after_record_id", after_record_id)
        arguments.count("limit", limit)
        request = rs.ListRunTranscriptRecordsRequest(
            run_id=run_id,
            through_record_id=through_record_id,
            after_record_id=after_record_id,
            limit=limit,
        )
        return convert.from_page(await self._call(self.stub.ListRunTranscriptRecords, request))

    # --- Seeds and preparations (§9.7, the ``SeedStore`` protocol) ---------------

    async def start_synchronous_run(self, command: OneShotRunStart) -> OneShotRunStartResult:
        """A callback's start (docs/contract.md §9.2.5): the run's published
        seed ending at ``command.run.seed_end_id`` is attached; a retry must
        be exact."""
        request = sd.StartSynchronousRunRequest(
            run=convert.run_start(command.run), started=convert.record(command.started)
        )
        response = await self._call(self.stub.StartSynchronousRun, request)
        return OneShotRunStartResult(
            record=convert.from_append_result(response.record),
            run_status=convert.RUN_STATUS.get(response.run_status),
        )

    async def begin_run_seed(self, declaration: SeedDeclaration) -> RunSeed:
        request = sd.BeginRunSeedRequest(declaration=seed_wire.declaration_to_wire(declaration))
        response = await self._call(self.stub.BeginRunSeed, request)
        return seed_wire.seed_from_wire(response.seed)

    async def append_run_seed(self, command: SeedAppend) -> str:
        request = sd.AppendRunSeedRequest(
            run_id=command.run_id,
            attempt_id=command.attempt_id,
            record=seed_wire.record_to_wire(command.record),
        )
        return str((await self._call(self.stub.AppendRunSeed, request)).id)

    async def publish_run_seed(self, publication: SeedPublication) -> None:
        request = sd.PublishRunSeedRequest(
            run_id=publication.run_id,
            attempt_id=publication.attempt_id,
            seed_end_id=publication.seed_end_id,
            end_id=publication.end_id,
            prepared_bytes=publication.prepared_bytes,
        )
        await self._call(self.stub.PublishRunSeed, request)

    async def find_run_preparation(self, operation: PreparationOperation) -> RunPreparation | None:
        request = sd.FindRunPreparationRequest(operation=seed_wire.operation_to_wire(operation))
        response = await self._call(self.stub.FindRunPreparation, request)
        return seed_wire.preparation_from_wire(response.preparation) if response.found else None

    async def settle_run_preparation(
        self, operation: PreparationOperation, attempt_id: str
    ) -> RunPreparation | None:
        request = sd.SettleRunPreparationRequest(
            operation=seed_wire.operation_to_wire(operation), attempt_id=attempt_id
        )
        response = await self._call(self.stub.SettleRunPreparation, request)
        return seed_wire.preparation_from_wire(response.preparation) if response.found else None

    async def load_run_seed(self, run_id: str, end_id: str) -> RunSeed:
        request = sd.LoadRunSeedRequest(run_id=run_id, end_id=end_id)
        return seed_wire.seed_from_wire((await self._call(self.stub.LoadRunSeed, request)).seed)

    async def list_run_seed_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage:
        request = sd.ListRunSeedRecordsRequest(
            run_id=run_id, end_id=end_id, after_id=after_id, limit=limit
        )
        response = await self._call(self.stub.ListRunSeedRecords, request)
        return seed_wire.page_from_wire(list(response.records), response.next_cursor)

    async def list_run_preparation_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage:
        request = sd.ListRunPreparationRecordsRequest(
            run_id=run_id, end_id=end_id, after_id=after_id, limit=limit
        )
        response = await self._call(self.stub.ListRunPreparationRecords, request)
        return seed_wire.page_from_wire(list(response.records), response.next_cursor)

    def watch_session_run_records(
        self, session_id: str, cursor: str = "", *, silence_timeout: float | None = None
    ) -> AsyncIterator[RunRecord]:
        """Every record of the session after ``cursor``, then each new one as it
        commits, in session order, for as long as you iterate (§9.9).

        On UNAVAILABLE (a server shutting down, a lost connection) the stream
        is reopened, after the retry policy's backoff, from the last cursor
        received: no record is skipped or repeated. The policy's deadline and
        attempts bound a run of failed reconnects, not the stream. A refusal
        (the namespace's ``watch_streams`` quota) is retried the same way, each
        wait reported (``on_retry``, a WARNING on ``runstore.client``), until
        the policy's ``refusal_deadline`` (60 s) raises it. ``silence_timeout`` treats
        a stream that sends nothing (not even a heartbeat) for that many
        seconds as lost; set it above the server's ``--watch-heartbeat-seconds``.
        """

        arguments.text("session_id", session_id)
        arguments.cursor("cursor", cursor)

        def request(position: str) -> rs.WatchSessionRunRecordsRequest:
            return rs.WatchSessionRunRecordsRequest(session_id=session_id, cursor=position)

        return watch_streams.reconnecting_watch(
            self, self.stub.WatchSessionRunRecords, request, cursor, silence_timeout
        )

    def watch_run_records(
        self, run_id: str, cursor: str = "", *, silence_timeout: float | None = None
    ) -> AsyncIterator[RunRecord]:
        """``watch_session_run_records`` for one run; ends after the run's
        terminal or suspension record."""

        arguments.text("run_id", run_id)
        arguments.cursor("cursor", cursor)

        def request(position: str) -> rs.WatchRunRecordsRequest:
            return rs.WatchRunRecordsRequest(run_id=run_id, cursor=position)

        return watch_streams.reconnecting_watch(
            self, self.stub.WatchRunRecords, request, cursor, silence_timeout
        )
