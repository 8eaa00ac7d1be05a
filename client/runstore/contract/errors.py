"""The error tree shared by the server and the client (docs/contract.md §11, D4).

Every error has a stable ``reason`` (the ErrorInfo reason on the wire), a gRPC
status code name and a ``permanent`` flag. The server raises these classes, maps
them to ``google.rpc.Status`` in one place, and the client rebuilds the very
same classes from the ErrorInfo reason, so ``except RunConflictError`` works the
same in-process and across the network.

This module imports neither grpc nor a database driver: codes are names of
``grpc.StatusCode`` members, resolved by whoever speaks gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypedDict

from runstore.contract._gofmt import quote as quote  # messages quote values as Go does

ERROR_DOMAIN = "runstore"
"""ErrorInfo.domain of every runstore error (D4)."""

_BY_REASON: dict[str, type[RunstoreError]] = {}


class ErrorContext(TypedDict, total=False):
    """Which run, session and record an error is about (ErrorInfo metadata)."""

    run_id: str
    session_id: str
    event_key: str


class RunstoreError(Exception):
    """Root of every runstore error.

    Args:
        message: The upstream error text; defaults to the class's ``default_message``.
        run_id: The run the error is about, when known.
        session_id: The session the error is about, when known.
        event_key: The record key the error is about, when known.
        field: The request field that broke a rule (validation errors).
        details: Further ErrorInfo metadata.
    """

    reason: ClassVar[str] = "UNKNOWN"
    code: ClassVar[str] = "UNKNOWN"
    permanent: ClassVar[bool] = False
    default_message: ClassVar[str] = "runstore error"
    shows_message: ClassVar[bool] = False
    """Whether the server sends the error's own text: a contract error's, and
    a quota's (it names only the caller's namespace); any other says only its
    class's ``default_message``, nothing about internals."""

    def __init__(
        self,
        message: str | None = None,
        *,
        run_id: str = "",
        session_id: str = "",
        event_key: str = "",
        field: str = "",
        details: Mapping[str, str] | None = None,
    ) -> None:
        self.message = message if message is not None else self.default_message
        self.run_id = run_id
        self.session_id = session_id
        self.event_key = event_key
        self.field = field
        self.details: dict[str, str] = dict(details or {})
        self.status_code: str = self.code
        """The gRPC status code name the error travelled with (the class's own
        code unless a client rebuilt it from another status)."""
        self.retry_delay: float | None = None
        """Seconds the server asks the caller to wait before a retry
        (``google.rpc.RetryInfo``), when it says; None otherwise."""
        super().__init__(self.message)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # The most specific class registered for a reason wins; abstract
        # grouping classes inherit their parent's reason and do not override it.
        if "reason" in cls.__dict__:
            _BY_REASON[cls.reason] = cls

    def metadata(self) -> dict[str, str]:
        """The ErrorInfo metadata: ``permanent`` plus whatever context is known."""
        meta = {"permanent": "true" if self.permanent else "false"}
        for key in ("run_id", "session_id", "event_key", "field"):
            value = getattr(self, key)
            if value:
                meta[key] = value
        meta.update(self.details)
        return meta

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        context = ", ".join(
            f"{key}={value!r}" for key, value in self.metadata().items() if key != "permanent"
        )
        return f"{type(self).__name__}({self.message!r}{', ' if context else ''}{context})"


def error_class_for(reason: str) -> type[RunstoreError] | None:
    """The error class registered for an ErrorInfo reason, if any."""
    return _BY_REASON.get(reason)


def error_classes() -> Mapping[str, type[RunstoreError]]:
    """Every registered reason and its class (for exhaustive tests and docs)."""
    return dict(_BY_REASON)


# --- Permanence -------------------------------------------------------------


class ContractError(RunstoreError):
    """A permanent failure: retrying the same command cannot succeed (§11.1)."""

    permanent = True
    shows_message = True


class TransientError(RunstoreError):
    """Database or network trouble: retrying the identical command is safe (§8)."""

    reason = "TRANSIENT"
    code = "UNAVAILABLE"
    permanent = False
    default_message = "runstore is temporarily unavailable"


class UnavailableError(TransientError):
    """The database could not be reached or failed; try again."""

    code = "UNAVAILABLE"


class AbortedError(TransientError):
    """A transaction lost a serialisation race after the server's own retries."""

    code = "ABORTED"
    default_message = "transaction aborted by a concurrent change; retry"


class InternalError(TransientError):
    """An unexpected server failure; never reported as a contract error."""

    code = "INTERNAL"
    default_message = "internal error"


class DeadlineExceededError(TransientError):
    """The call's deadline passed; the command may or may not have been applied."""

    code = "DEADLINE_EXCEEDED"
    default_message = "deadline exceeded"


class CallCancelledError(TransientError):
    """The server cancelled the call (for example while shutting down)."""

    code = "CANCELLED"
    default_message = "call cancelled by the server"


class OverloadedError(TransientError):
    """The server is at one of its operating limits (response bytes held for
    clients that do not read); nothing was done: retry after a backoff."""

    reason = "OVERLOADED"
    code = "RESOURCE_EXHAUSTED"
    default_message = "runstore is overloaded; retry after a backoff"


QUOTAS: tuple[str, ...] = ("writes_per_second", "reads_per_second", "watch_streams", "stored_bytes")
"""The quota names ErrorInfo metadata ``quota`` takes (docs/namespaces.md#quotas)."""


class QuotaExceededError(TransientError):
    """The call's namespace is at one of its quotas; nothing was done
    (docs/namespaces.md#quotas). Metadata ``namespace``, ``quota`` (one of
    ``QUOTAS``) and ``limit``; the rate quotas also say, in
    ``retry_delay``, when a token is free.

    Transient, so the client's retry policy backs off (at least
    ``retry_delay``); a ``stored_bytes`` refusal is not retried by the client
    (``retryable`` is False): it clears only once data is deleted or the
    quota raised, not within a retry's deadline."""

    reason = "QUOTA_EXCEEDED"
    code = "RESOURCE_EXHAUSTED"
    default_message = "namespace quota exceeded; retry after a backoff"
    shows_message = True

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_delay: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.retry_delay = retry_delay

    @property
    def namespace(self) -> str:
        return self.details.get("namespace", "")

    @property
    def quota(self) -> str:
        return self.details.get("quota", "")

    @property
    def limit(self) -> str:
        return self.details.get("limit", "")

    @property
    def retryable(self) -> bool:
        """Whether waiting can clear it: every quota but ``stored_bytes``."""
        return self.quota != "stored_bytes"


class UnexpectedRpcError(RunstoreError):
    """A gRPC failure outside the contract's table (UNIMPLEMENTED, UNAUTHENTICATED,
    RESOURCE_EXHAUSTED without runstore's ErrorInfo, ...): neither a contract error
    nor safe to retry blindly."""

    reason = "RPC_ERROR"
    code = "UNKNOWN"
    default_message = "unexpected gRPC failure"


# --- Groups by meaning (api-core style) ---------------------------------------


class NotFoundError(ContractError):
    """A contract error whose subject does not exist (NOT_FOUND)."""

    code = "NOT_FOUND"


class ConflictError(ContractError):
    """A contract error: the command conflicts with what is stored (ALREADY_EXISTS);
    resend the original exactly, or use a new ID."""

    code = "ALREADY_EXISTS"


class PreconditionError(ContractError):
    """A contract error: the stored state does not allow the command
    (FAILED_PRECONDITION)."""

    code = "FAILED_PRECONDITION"


class InvalidArgumentError(ContractError):
    """A contract error: the command itself is malformed (INVALID_ARGUMENT);
    ``field`` names what to fix."""

    code = "INVALID_ARGUMENT"


# --- Leaves (§11.3) ---------------------------------------------------------


class SessionNotFoundError(NotFoundError):
    """No session with this id (§9.1). Create the session first (the host), or check
    the id."""

    reason = "SESSION_NOT_FOUND"
    default_message = "session not found"


class RunNotFoundError(NotFoundError):
    """No such run, parent run or predecessor; also every run of a purged session
    (§9.6.1). Check the id; start the run first."""

    reason = "RUN_NOT_FOUND"
    default_message = "run not found"


class RunSuspensionNotFoundError(NotFoundError):
    """The run has no checkpoint (§9.6.2). Only suspended runs have one; check the
    run's status."""

    reason = "RUN_SUSPENSION_NOT_FOUND"
    default_message = "run suspension not found"


class SessionPurgedError(PreconditionError):
    """The session was purged; its id can never be used again (§10.4). Use a new
    session id."""

    reason = "SESSION_PURGED"
    default_message = "session purged"


class RunPurgedError(PreconditionError):
    """Retention deleted this sessionless run; its ID can never be used again."""

    reason = "RUN_PURGED"
    default_message = "run purged"


class SessionEndedError(PreconditionError):
    """CreateSession of an ended session (§9.1.1). Use a new session id."""

    reason = "SESSION_ENDED"
    default_message = "session ended"


class SessionActiveError(PreconditionError):
    """PurgeSession of an active session (§9.1.5). End the session first."""

    reason = "SESSION_ACTIVE"
    default_message = "session is active"


class SessionHasActiveRunsError(PreconditionError):
    """PurgeSession while a run of the session is still running (§9.1.5). Wait until
    its runs ended (or suspended), then purge again."""

    reason = "SESSION_HAS_ACTIVE_RUNS"
    default_message = "session has active runs"


class RunNotActiveError(PreconditionError):
    """The run (or the parent of a new child) is no longer running (§9.3, §10.3). Do
    not write to an ended run; an exact retry of an earlier write still succeeds."""

    reason = "RUN_NOT_ACTIVE"
    default_message = "run is not active"


class RunSessionMismatchError(PreconditionError):
    """A child's session differs from its parent's, or a one-shot child's parent has
    a session (§10.3). Start the child in its parent's session (or none)."""

    reason = "RUN_SESSION_MISMATCH"
    default_message = "parent and child runs must belong to the same session"


class RunRecordOwnerMismatchError(PreconditionError):
    """A record's run, agent or session disagrees with the run it belongs to (V4–V6,
    §9.3, Q22). Build the record from the run's own identity."""

    reason = "RUN_RECORD_OWNER_MISMATCH"
    default_message = "run record owner does not match stored run"


class ContinuationMismatchError(PreconditionError):
    """The predecessor's state does not allow this successor (§10.2)."""

    reason = "CONTINUATION_MISMATCH"
    default_message = "continuation predecessor does not match successor"


class RunConflictError(ConflictError):
    """The run id is already bound to a different start (another request digest, or
    the other generation, §10.6, §10.7), a start retry used another record key or,
    on a running run, another ``started_at`` (§8, §9.2), or a current continuation
    named a suspended run whose single successor is another run (§10.2). Use a new
    run id, or resend the original start exactly (a closed run also takes a new
    ``started_at`` with its digest)."""

    reason = "RUN_CONFLICT"
    default_message = "run metadata conflict"


class RunTerminalConflictError(ConflictError):
    """Another ending (or another key for it) is already stored (§9.4.2, §9.4.3).
    Read the run (LoadRun): its ending is final."""

    reason = "RUN_TERMINAL_CONFLICT"
    default_message = "run terminal outcome conflict"


class RunCancellationConflictError(ConflictError):
    """Another cancellation reason, or another record key for it, is already stored
    (§9.4.1). The first reason is permanent; read it with LoadRun."""

    reason = "RUN_CANCELLATION_CONFLICT"
    default_message = "run cancellation reason conflict"


class RunSuspensionConflictError(ConflictError):
    """Another checkpoint, or another record key for it, is already stored (§9.4.2).
    Read the stored checkpoint (LoadRunSuspension)."""

    reason = "RUN_SUSPENSION_CONFLICT"
    default_message = "run suspension conflict"


class EventConflictError(ConflictError):
    """The record key already holds a different record (§6.1)."""

    reason = "EVENT_CONFLICT"
    default_message = "runlog: event conflict"

    def __init__(
        self,
        message: str | None = None,
        *,
        run_id: str = "",
        session_id: str = "",
        event_key: str = "",
        field: str = "",
        details: Mapping[str, str] | None = None,
    ) -> None:
        if message is None:
            message = f"run {quote(run_id)} event key {quote(event_key)}: runlog: event conflict"
        super().__init__(
            message,
            run_id=run_id,
            session_id=session_id,
            event_key=event_key,
            field=field,
            details=details,
        )


class ValidationError(InvalidArgumentError):
    """A command is malformed or contradicts itself (V1–V9, §5)."""

    reason = "CONTRACT_VALIDATION"
    default_message = "invalid command"


class MalformedRequestError(InvalidArgumentError):
    """The request body is not a valid protobuf message of the method's type
    (unparsable bytes, a truncated message, invalid UTF-8 in a string field)."""

    reason = "MALFORMED_REQUEST"
    default_message = "malformed request"


class ReadArgumentError(InvalidArgumentError):
    """A read was given a bad limit or cursor (Q12)."""

    reason = "INVALID_ARGUMENT_READ"
    default_message = "invalid read argument"


class ParentRunIDRequiredError(InvalidArgumentError):
    """A child start without ``parent_run_id`` (V3). Fix the command."""

    reason = "PARENT_RUN_ID_REQUIRED"
    default_message = "parent run id is required"


class ChildRunIDRequiredError(InvalidArgumentError):
    """A child start without ``run_id`` (V3). Fix the command."""

    reason = "CHILD_RUN_ID_REQUIRED"
    default_message = "child run id is required"


class ChildAgentIDRequiredError(InvalidArgumentError):
    """A child start without ``agent_id`` (V3). Fix the command."""

    reason = "CHILD_AGENT_ID_REQUIRED"
    default_message = "child agent id is required"


class ChildSessionIDRequiredError(InvalidArgumentError):
    """A child start without ``session_id`` (V3). Fix the command."""

    reason = "CHILD_SESSION_ID_REQUIRED"
    default_message = "child session id is required"


class InvalidTranscriptPositionError(InvalidArgumentError):
    """``through_record_id`` / ``after_record_id`` / ``limit`` of
    ListRunTranscriptRecords is not a valid position of this run (§9.6.5). Use
    record IDs of this run returned by the store."""

    reason = "INVALID_TRANSCRIPT_POSITION"
    default_message = "invalid transcript position"


# --- Seeds and preparations (§9.7, current generation only) ---------------------


class SeedNotFoundError(NotFoundError):
    """No seed attempt, or no published seed, has this run ID."""

    reason = "SEED_NOT_FOUND"
    default_message = "run seed not found"


class SeedConflictError(ConflictError):
    """A seed's declaration, record or publication differs from the accepted one."""

    reason = "SEED_CONFLICT"
    default_message = "run seed conflict"


class SeedNotPublishedError(PreconditionError):
    """The seed is not published yet, so it cannot be read or started from."""

    reason = "SEED_NOT_PUBLISHED"
    default_message = "run seed is not published"


class PreparationAbandonedError(PreconditionError):
    """SettleRunPreparation closed this attempt forever."""

    reason = "PREPARATION_ABANDONED"
    default_message = "run preparation attempt abandoned"


# --- Access (authentication and roles) ------------------------------------------


class AccessError(ContractError):
    """The caller may not make this call; retrying with the same credentials cannot help.

    Metadata ``method`` names the refused gRPC method. Neither error says
    whether the session or run asked about exists.
    """

    @property
    def method(self) -> str:
        """The refused gRPC method, e.g. ``/runstore.v1.SessionAdmin/EndSession``."""
        return self.details.get("method", "")


class UnauthenticatedError(AccessError):
    """No credential, or one the server does not know (a wrong or revoked token)."""

    reason = "UNAUTHENTICATED"
    code = "UNAUTHENTICATED"
    default_message = "authentication required"


class PermissionDeniedError(AccessError):
    """The caller is known, but its role may not call the method."""

    reason = "PERMISSION_DENIED"
    code = "PERMISSION_DENIED"
    default_message = "permission denied"


# --- Product memory (D5) ----------------------------------------------------------


class IdempotencyConflictError(ConflictError):
    """An idempotency key was already used by a call with different content."""

    reason = "IDEMPOTENCY_CONFLICT"
    default_message = "idempotency key was used with different content"


class ContextNotFoundError(NotFoundError):
    """No snapshot was ever saved under the context key (or it was deleted)."""

    reason = "CONTEXT_NOT_FOUND"
    default_message = "context not found"


class ContextVersionNotFoundError(NotFoundError):
    """The asked-for version is not kept (never existed or pruned)."""

    reason = "CONTEXT_VERSION_NOT_FOUND"
    default_message = "context version not found"


class ContextVersionConflictError(ContractError):
    """A save named a version that is no longer current; metadata
    ``current_version`` says which one is. Reload, merge and save again."""

    reason = "CONTEXT_VERSION_CONFLICT"
    code = "ABORTED"
    default_message = "context version conflict"

    @property
    def current_version(self) -> int:
        return int(self.details.get("current_version", "0"))


class CorruptStateError(ContractError):
    """The store's own data violates the contract; never repaired silently."""

    reason = "STORED_STATE_CORRUPT"
    code = "DATA_LOSS"
    default_message = "stored run is missing a required lifecycle record"


# --- Namespaces (docs/namespaces.md) -------------------------------------------


class NamespaceError(ContractError):
    """About a namespace; metadata ``namespace`` names it."""

    @property
    def namespace(self) -> str:
        return self.details.get("namespace", "")


class NamespaceRequiredError(NamespaceError, InvalidArgumentError):
    """The call names no namespace and its principal is bound to several (or
    to every one): send ``x-runstore-namespace`` (``namespace=`` in the client)."""

    reason = "NAMESPACE_REQUIRED"
    default_message = "a namespace is required: send x-runstore-namespace"


class NamespaceNotFoundError(NamespaceError, NotFoundError):
    """The namespace does not exist, or is being deleted."""

    reason = "NAMESPACE_NOT_FOUND"
    default_message = "namespace not found"


class NamespaceExistsError(NamespaceError, ConflictError):
    """CreateNamespace named a namespace that exists."""

    reason = "NAMESPACE_ALREADY_EXISTS"
    default_message = "namespace already exists"


class NamespaceTombstonedError(NamespaceError, PreconditionError):
    """The name belonged to a deleted namespace and is never reused."""

    reason = "NAMESPACE_TOMBSTONED"
    default_message = "namespace name was deleted and cannot be reused"


class NamespaceProtectedError(NamespaceError, PreconditionError):
    """The namespace ``default`` always exists and cannot be deleted."""

    reason = "NAMESPACE_PROTECTED"
    default_message = "the default namespace cannot be deleted"
