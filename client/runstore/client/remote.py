"""``RemoteStore`` and ``RemoteSessionAdmin``: the protocols over gRPC (asyncio).

One channel per client object (or a shared one you pass in); every call has a
per-attempt deadline, optional metadata, a bearer token (``token=``) over TLS
(``tls=``), and transient failures are retried with the identical command
(``RetryPolicy``). Errors arrive as the classes of ``runstore.contract.errors``;
``UnauthenticatedError`` and ``PermissionDeniedError`` are never retried.

Clients are not thread-safe: use one per event loop (or ``runstore.client.sync``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

import grpc

from runstore.client import arguments, convert, handshake
from runstore.client import tracing as client_tracing
from runstore.client.coalesce import DEFAULT_COALESCING, AppendCoalescer, AppendCoalescing
from runstore.client.errors import from_rpc_error
from runstore.client.handshake import TLSHandshakeError, TLSProblem
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
    PurgeResult,
    RootRunStart,
    RootRunStartResult,
    RunCancellation,
    RunMeta,
    RunPage,
    RunPreparation,
    RunRecord,
    RunRepairResult,
    RunSeed,
    RunStatus,
    RunSuspension,
    RunTerminal,
    SeedAppend,
    SeedDeclaration,
    SeedPage,
    SeedPublication,
    Session,
    SessionPage,
    SessionStatus,
)
from runstore.client.retry import (
    DEFAULT_RETRY,
    SYSTEM_CLOCK,
    RetryCallback,
    RetryClock,
    RetryPolicy,
    backoff_delay,
    call_with_retry,
    is_refusal,
    is_retryable,
    refused_too_long,
    report_retry,
)
from runstore.client.tokens import clean_token
from runstore.contract import seed_wire
from runstore.contract.errors import (
    DeadlineExceededError,
    OverloadedError,
    QuotaExceededError,
    RunstoreError,
    UnavailableError,
)
from runstore.contract.metadata import NAMESPACE_KEY, namespace_metadata
from runstore.contract.model import Item, ListPage
from runstore.contract.namespaces import NAME_RULE as NAMESPACE_RULE
from runstore.contract.namespaces import is_valid_name as is_valid_namespace
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from runstore.v1 import session_admin_pb2_grpc as sa_grpc

T = TypeVar("T")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Keepalive:
    """HTTP/2 keepalive pings, so a dead peer is noticed between calls.

    A runstore server accepts a ping every 10 s at most (its
    ``--keepalive-min-ping-interval``); a client pinging more often is
    disconnected with GOAWAY ``too_many_pings``. Keep ``interval`` above it."""

    interval: float = 30.0
    """Seconds between pings, with or without calls in flight."""
    timeout: float = 10.0
    """Seconds to wait for a ping's answer before the connection is dropped."""
    without_calls: bool = True
    """Ping even when no call is in flight."""
    idle_timeout: float | None = 240.0
    """Seconds without calls after which the client closes its connection itself
    (the next call reconnects), before the server's 300 s idle limit would;
    None keeps gRPC's 30 minutes."""


PEMSource: TypeAlias = bytes | str | os.PathLike[str]
"""PEM data as ``bytes``, or the path of a file holding it (``str`` or ``Path``)."""

TokenSource: TypeAlias = str | Callable[[], str] | Callable[[], Awaitable[str]]
"""A bearer token, or a callable asked before every attempt (for tokens that rotate)."""


def _pem(source: PEMSource | None) -> bytes | None:
    if source is None or isinstance(source, bytes):
        return source
    return Path(source).read_bytes()


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """TLS to the server and, for mTLS, this client's certificate.

    Each of ``ca``, ``cert`` and ``key`` is PEM bytes or a file path; files are
    read when the client is created.
    """

    ca: PEMSource | None = None
    """CA that signed the server's certificate; None trusts the system roots."""
    cert: PEMSource | None = None
    """This client's certificate chain (mTLS); needs ``key``."""
    key: PEMSource | None = None
    """The private key of ``cert``."""
    server_name: str | None = None
    """Name to verify the server's certificate against, when not the target's host."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TLSConfig: cert and key go together (mTLS)")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca),
            private_key=_pem(self.key),
            certificate_chain=_pem(self.cert),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


def open_channel(
    target: str,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    keepalive: Keepalive | None = Keepalive(),
    options: Sequence[tuple[str, Any]] = (),
    tracing: bool | None = None,
    tracer_provider: Any | None = None,
) -> grpc.aio.Channel:
    """A channel to ``target`` (``host:port`` or any gRPC target), TLS when
    ``credentials`` are given; with ``tracing`` (by default: the ``otel`` extra
    installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, or a ``tracer_provider``
    given) every call gets a client span and sends its trace context."""
    settings: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES),
    ]
    if keepalive is not None:
        settings += [
            ("grpc.keepalive_time_ms", int(keepalive.interval * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive.timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", int(keepalive.without_calls)),
            # Without these gRPC stretches idle pings to one a minute after two,
            # so ``interval`` would not mean what it says.
            ("grpc.http2.min_time_between_pings_ms", int(keepalive.interval * 1000)),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        if keepalive.idle_timeout is not None:
            settings.append(("grpc.client_idle_timeout_ms", int(keepalive.idle_timeout * 1000)))
    settings += list(options)
    traced = client_tracing.wanted(True if tracer_provider is not None else tracing)
    interceptors = client_tracing.client_interceptors(tracer_provider) if traced else None
    if credentials is not None:
        return grpc.aio.secure_channel(
            target, credentials, options=settings, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=settings, interceptors=interceptors)


@dataclass(frozen=True, slots=True)
class _Connection:
    """The target and TLS settings of a channel a client opened itself."""

    target: str
    uses_tls: bool
    has_ca: bool
    cert: bytes | None
    key: bytes | None
    may_probe: bool

    @classmethod
    def of(
        cls,
        target: str | None,
        tls: TLSConfig | None,
        credentials: grpc.ChannelCredentials | None,
    ) -> _Connection | None:
        if target is None:
            return None  # a channel passed in: its credentials are unknown here
        if tls is None:
            # Raw credentials: TLS of unknown make-up, so only the status text counts.
            raw = credentials is not None
            return cls(target, raw, raw, None, None, may_probe=not raw)
        return cls(target, True, tls.ca is not None, _pem(tls.cert), _pem(tls.key), True)

    def diagnose(self, details: str) -> TLSProblem | None:
        return handshake.diagnose(
            details,
            self.target,
            uses_tls=self.uses_tls,
            has_ca=self.has_ca,
            cert=self.cert,
            key=self.key,
            may_probe=self.may_probe,
        )


class _Client:
    """What both remote clients share: the channel, deadlines, metadata, retries."""

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        tls: TLSConfig | None = None,
        token: TokenSource | None = None,
        timeout: float | None = 10.0,
        metadata: Sequence[tuple[str, str]] = (),
        namespace: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        keepalive: Keepalive | None = Keepalive(),
        options: Sequence[tuple[str, Any]] = (),
        on_retry: RetryCallback | None = None,
        clock: RetryClock = SYSTEM_CLOCK,
        tracing: bool | None = None,
        tracer_provider: Any | None = None,
    ) -> None:
        if (target is None) == (channel is None):
            raise ValueError("pass either a target or a channel")
        if tls is not None and credentials is not None:
            raise ValueError("pass tls= or credentials=, not both")
        if tls is not None and channel is not None:
            raise ValueError("tls= configures a channel this client opens; not with channel=")
        if token is not None and any(key.lower() == "authorization" for key, _ in metadata):
            raise ValueError("pass token= or an authorization metadata entry, not both")
        if namespace is not None:
            if not is_valid_namespace(namespace):
                raise ValueError(f"namespace= must match {NAMESPACE_RULE}, not {namespace!r}")
            if any(key.lower() == NAMESPACE_KEY for key, _ in metadata):
                raise ValueError(f"pass namespace= or a {NAMESPACE_KEY} metadata entry, not both")
            metadata = (*metadata, *namespace_metadata(namespace))
        self.namespace = namespace
        """The namespace every call acts in (docs/namespaces.md); None: the server decides."""
        self._connection = _Connection.of(target, tls, credentials)
        """What a failed handshake is diagnosed with (``runstore.client.handshake``)."""
        if tls is not None:
            credentials = tls.credentials()
            options = [*tls.channel_options(), *options]
        self._owns_channel = channel is None
        self.channel: grpc.aio.Channel = channel or open_channel(
            target or "",
            credentials=credentials,
            keepalive=keepalive,
            options=options,
            tracing=tracing,
            tracer_provider=tracer_provider,
        )
        self.timeout = timeout
        """Deadline of each attempt, in seconds (clipped to the retry deadline)."""
        self.metadata = tuple(metadata)
        self._token = clean_token(token) if isinstance(token, str) else token
        """A string is checked now, so a bad one fails before any call."""
        self.retry = retry
        self._on_retry = on_retry
        self._clock = clock

    async def _call_metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata of one attempt: a rotating token is asked for every time."""
        if self._token is None:
            return self.metadata
        token = self._token if isinstance(self._token, str) else self._token()
        if inspect.isawaitable(token):
            token = await token
        return (*self.metadata, ("authorization", f"Bearer {clean_token(token)}"))

    async def _call(
        self, method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp], request: Req
    ) -> Resp:
        async def attempt(seconds: float | None) -> Resp:
            metadata = await self._call_metadata()
            try:
                return await method(request, timeout=seconds, metadata=metadata or None)
            except grpc.aio.AioRpcError as error:
                raise await self._rebuilt(error) from error

        return await call_with_retry(
            attempt,
            self.retry,
            attempt_timeout=self.timeout,
            clock=self._clock,
            on_retry=self._on_retry,
        )

    async def _rebuilt(self, error: grpc.aio.AioRpcError) -> RunstoreError:
        """The runstore error for a failed call; an UNAVAILABLE that a TLS
        mistake caused becomes a ``TLSHandshakeError`` (never retried)."""
        rebuilt = from_rpc_error(error)
        if isinstance(rebuilt, UnavailableError) and self._connection is not None:
            problem = await asyncio.to_thread(self._connection.diagnose, rebuilt.message)
            if problem is not None:
                tls_error = TLSHandshakeError(problem, rebuilt.message)
                tls_error.status_code = rebuilt.status_code
                return tls_error
        return rebuilt

    async def close(self) -> None:
        """Closes the channel if this client opened it."""
        if self._owns_channel:
            await self.channel.close()

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class RemoteStore(_Client):
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
        self.coalescer = (
            None
            if coalescing is None
            else AppendCoalescer(coalescing, self._send_calls, self._send_append)
        )
        """Shares messages among concurrent ``append_run_record`` calls; None: off."""

    async def _send_calls(
        self, request: rs.AppendRunRecordCallsRequest, seconds: float | None
    ) -> rs.AppendRunRecordCallsResponse:
        metadata = await self._call_metadata()
        return await self.stub.AppendRunRecordCalls(
            request, timeout=seconds, metadata=metadata or None
        )

    async def _send_append(
        self, request: rs.AppendRunRecordRequest, seconds: float | None
    ) -> rs.AppendRunRecordResponse:
        metadata = await self._call_metadata()
        return await self.stub.AppendRunRecord(request, timeout=seconds, metadata=metadata or None)

    async def _coalesced(
        self, coalescer: AppendCoalescer, request: rs.AppendRunRecordRequest
    ) -> rs.AppendRunRecordResponse:
        """One append through ``coalescer``, retried on its own like any call."""

        async def attempt(seconds: float | None) -> rs.AppendRunRecordResponse:
            try:
                return await coalescer.append(request, seconds)
            except grpc.aio.AioRpcError as error:
                raise await self._rebuilt(error) from error
            except TimeoutError as error:  # the queued-bytes bound outlasted the attempt
                raise DeadlineExceededError(
                    "the append waited for room in the coalescing queue past its deadline"
                ) from error

        return await call_with_retry(
            attempt,
            self.retry,
            attempt_timeout=self.timeout,
            clock=self._clock,
            on_retry=self._on_retry,
        )

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
        return convert.from_append_result(await self._coalesced(self.coalescer, request))

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

    async def list_run_records(self, run_id: str, cursor: str, limit: int) -> Page:
        """Up to ``limit`` records of the run after ``cursor`` ("" for the first
        page; then the last page's ``next_cursor``), in run order (§9.6.3)."""
        arguments.text("run_id", run_id)
        arguments.cursor("cursor", cursor)
        arguments.count("limit", limit)
        request = rs.ListRunRecordsRequest(run_id=run_id, cursor=cursor, limit=limit)
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

        return self._watch(self.stub.WatchSessionRunRecords, request, cursor, silence_timeout)

    def watch_run_records(
        self, run_id: str, cursor: str = "", *, silence_timeout: float | None = None
    ) -> AsyncIterator[RunRecord]:
        """``watch_session_run_records`` for one run; ends after the run's
        terminal or suspension record."""

        arguments.text("run_id", run_id)
        arguments.cursor("cursor", cursor)

        def request(position: str) -> rs.WatchRunRecordsRequest:
            return rs.WatchRunRecordsRequest(run_id=run_id, cursor=position)

        return self._watch(self.stub.WatchRunRecords, request, cursor, silence_timeout)

    async def _watch(
        self,
        method: grpc.aio.UnaryStreamMultiCallable[Req, Any],
        request: Callable[[str], Req],
        cursor: str,
        silence_timeout: float | None,
    ) -> AsyncIterator[RunRecord]:
        caps, reconnects, failing_since = self.retry.backoff_caps(), 0, 0.0
        refused_since: float | None = None
        while True:
            call = method(request(cursor), metadata=(await self._call_metadata()) or None)
            try:
                while True:
                    try:
                        batch: Any = await asyncio.wait_for(call.read(), silence_timeout)
                    except TimeoutError:
                        raise UnavailableError("watch stream went silent") from None
                    except grpc.aio.AioRpcError as error:
                        raise await self._rebuilt(error) from error
                    if batch is grpc.aio.EOF:
                        return
                    # It works: start over.
                    caps, reconnects, refused_since = self.retry.backoff_caps(), 0, None
                    cursor = batch.next_cursor
                    for message in batch.events:
                        yield convert.from_record(message)
            except (UnavailableError, QuotaExceededError, OverloadedError) as error:
                # An outage, or a refusal (a namespace at its watch_streams
                # quota): back off and reconnect, reporting every refusal.
                if not is_retryable(error):
                    raise
                now = self._clock.monotonic()
                if reconnects == 0:
                    failing_since = now
                reconnects += 1
                refusal = is_refusal(error)
                if not refusal:
                    refused_since = None
                elif refused_since is None:
                    refused_since = now
                policy = self.retry
                if policy.max_attempts is not None and reconnects >= policy.max_attempts:
                    raise
                if (
                    not refusal
                    and policy.deadline is not None
                    and now - failing_since >= policy.deadline
                ):
                    raise
                delay = backoff_delay(error, self._clock.uniform(0.0, next(caps)))
                if refused_since is not None and refused_too_long(
                    policy, now - refused_since, delay
                ):
                    raise
                report_retry(error, reconnects, delay, self._on_retry)
                await self._clock.sleep(delay)
            finally:
                call.cancel()


class RemoteSessionAdmin(_Client):
    """The host's ``SessionAdmin`` over gRPC; same options as ``RemoteStore``."""

    def __init__(self, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self.stub = sa_grpc.SessionAdminStub(self.channel)

    async def create_session(self, session_id: str, created_at: datetime) -> Session:
        arguments.text("session_id", session_id)
        arguments.moment("created_at", created_at)
        request = sa.CreateSessionRequest(
            session_id=session_id, created_at=convert.timestamp(created_at)
        )
        return convert.from_session((await self._call(self.stub.CreateSession, request)).session)

    async def load_session(self, session_id: str) -> Session:
        arguments.text("session_id", session_id)
        request = sa.LoadSessionRequest(session_id=session_id)
        return convert.from_session((await self._call(self.stub.LoadSession, request)).session)

    async def end_session(self, session_id: str, ended_at: datetime) -> Session:
        arguments.text("session_id", session_id)
        arguments.moment("ended_at", ended_at)
        request = sa.EndSessionRequest(session_id=session_id, ended_at=convert.timestamp(ended_at))
        return convert.from_session((await self._call(self.stub.EndSession, request)).session)

    async def purge_session(self, session_id: str) -> None:
        arguments.text("session_id", session_id)
        await self._call(self.stub.PurgeSession, sa.PurgeSessionRequest(session_id=session_id))

    async def purge_ended_sessions(self, ended_before: datetime, limit: int = 0) -> PurgeResult:
        """Purges up to ``limit`` (0: 100) ended sessions without running runs that
        ended before ``ended_before``; call again while ``more``. A retried call
        that had purged some reports only what its last attempt purged."""
        arguments.moment("ended_before", ended_before)
        arguments.count("limit", limit)
        request = sa.PurgeEndedSessionsRequest(limit=limit)
        request.ended_before.CopyFrom(convert.timestamp(ended_before))
        response = await self._call(self.stub.PurgeEndedSessions, request)
        return PurgeResult(tuple(response.purged_session_ids), response.more)

    async def purge_sessionless_runs(
        self, finished_before: datetime, limit: int = 0
    ) -> PurgeResult:
        """Deletes up to ``limit`` (0: 100) finished sessionless runs finished
        before ``finished_before``, each with its one-shot children, leaving
        run tombstones; call again while ``more`` (and something was purged)."""
        arguments.moment("finished_before", finished_before)
        arguments.count("limit", limit)
        request = sa.PurgeSessionlessRunsRequest(limit=limit)
        request.finished_before.CopyFrom(convert.timestamp(finished_before))
        response = await self._call(self.stub.PurgeSessionlessRuns, request)
        return PurgeResult(tuple(response.purged_run_ids), response.more)

    async def list_runs_by_session(
        self, session_id: str, statuses: Collection[RunStatus] = ()
    ) -> list[RunMeta]:
        arguments.text("session_id", session_id)
        request = sa.ListRunsBySessionRequest(
            session_id=session_id,
            statuses=[convert.RUN_STATUS_TO_WIRE[status] for status in statuses],
        )
        response = await self._call(self.stub.ListRunsBySession, request)
        return [convert.from_run_meta(run) for run in response.runs]

    async def list_sessions(
        self,
        *,
        statuses: Collection[SessionStatus] = (),
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
        session_id: str = "",
        session_id_prefix: str = "",
        newest_first: bool = False,
        count_statuses: bool = False,
    ) -> SessionPage:
        """One page of sessions by ``created_at``, then ID (§9.8.1).

        ``created_after`` is inclusive, ``created_before`` exclusive; an empty
        ``statuses`` keeps every status. Pass ``next_page_token`` back as
        ``page_token`` with the same filters for the next page.
        ``count_statuses`` fills the page's ``status_counts`` (§9.8).
        """
        request = sa.ListSessionsRequest(
            statuses=[convert.SESSION_STATUS_TO_WIRE[status] for status in statuses],
            page_size=page_size,
            page_token=page_token,
            session_id=session_id,
            session_id_prefix=session_id_prefix,
            order=sa.LIST_ORDER_NEWEST_FIRST if newest_first else sa.LIST_ORDER_UNSPECIFIED,
            count_statuses=count_statuses,
        )
        if created_after is not None:
            request.created_after.CopyFrom(convert.timestamp(created_after))
        if created_before is not None:
            request.created_before.CopyFrom(convert.timestamp(created_before))
        return convert.from_session_page(await self._call(self.stub.ListSessions, request))

    async def list_runs(
        self,
        *,
        session_id: str = "",
        agent_id: str = "",
        statuses: Collection[RunStatus] = (),
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        sessionless_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
        run_id: str = "",
        run_id_prefix: str = "",
        agent_id_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        root_only: bool = False,
        newest_first: bool = False,
        count_statuses: bool = False,
    ) -> RunPage:
        """One page of runs by ``started_at``, then run ID (§9.8.2); filters as
        in ``list_sessions``, ``sessionless_only`` for one-shot runs,
        ``labels`` (every pair, exactly) and ``root_only``."""
        request = sa.ListRunsRequest(
            session_id=session_id,
            agent_id=agent_id,
            statuses=[convert.RUN_STATUS_TO_WIRE[status] for status in statuses],
            sessionless_only=sessionless_only,
            page_size=page_size,
            page_token=page_token,
            run_id=run_id,
            run_id_prefix=run_id_prefix,
            agent_id_prefix=agent_id_prefix,
            labels=dict(labels or {}),
            root_only=root_only,
            order=sa.LIST_ORDER_NEWEST_FIRST if newest_first else sa.LIST_ORDER_UNSPECIFIED,
            count_statuses=count_statuses,
        )
        if started_after is not None:
            request.started_after.CopyFrom(convert.timestamp(started_after))
        if started_before is not None:
            request.started_before.CopyFrom(convert.timestamp(started_before))
        return convert.from_run_page(await self._call(self.stub.ListRuns, request))

    def iter_sessions(self, **filters: Any) -> AsyncIterator[Session]:
        """Every session ``list_sessions(**filters)`` lists, page after page."""
        return _every(lambda token: self.list_sessions(**filters, page_token=token))

    def iter_runs(self, **filters: Any) -> AsyncIterator[RunMeta]:
        """Every run ``list_runs(**filters)`` lists, page after page."""
        return _every(lambda token: self.list_runs(**filters, page_token=token))


async def _every(fetch: Callable[[str], Awaitable[ListPage[Item]]]) -> AsyncIterator[Item]:
    """The items of every page, following ``next_page_token`` to the end."""
    token = ""
    while True:
        page = await fetch(token)
        for item in page.items:
            yield item
        token = page.next_page_token
        if not token:
            return
