"""The error table of §11.3 and D4, checked against every error class."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from runstore.contract import errors
from runstore.server import call_request_id
from runstore.server.error_status import (
    CUT_MARK,
    MAX_ECHOED_VALUE_BYTES,
    MAX_MESSAGE_BYTES,
    bounded,
    maps_errors,
    to_status,
)

# reason -> (gRPC code, permanent), transcribed from docs/errors.md (§11.3, D4).
EXPECTED = {
    "SESSION_NOT_FOUND": ("NOT_FOUND", True),
    "SESSION_PURGED": ("FAILED_PRECONDITION", True),
    "RUN_PURGED": ("FAILED_PRECONDITION", True),
    "SESSION_ENDED": ("FAILED_PRECONDITION", True),
    "SESSION_ACTIVE": ("FAILED_PRECONDITION", True),
    "SESSION_HAS_ACTIVE_RUNS": ("FAILED_PRECONDITION", True),
    "RUN_NOT_FOUND": ("NOT_FOUND", True),
    "RUN_CONFLICT": ("ALREADY_EXISTS", True),
    "RUN_TERMINAL_CONFLICT": ("ALREADY_EXISTS", True),
    "RUN_CANCELLATION_CONFLICT": ("ALREADY_EXISTS", True),
    "RUN_SUSPENSION_CONFLICT": ("ALREADY_EXISTS", True),
    "RUN_NOT_ACTIVE": ("FAILED_PRECONDITION", True),
    "RUN_SUSPENSION_NOT_FOUND": ("NOT_FOUND", True),
    "RUN_SESSION_MISMATCH": ("FAILED_PRECONDITION", True),
    "RUN_RECORD_OWNER_MISMATCH": ("FAILED_PRECONDITION", True),
    "PARENT_RUN_ID_REQUIRED": ("INVALID_ARGUMENT", True),
    "CHILD_RUN_ID_REQUIRED": ("INVALID_ARGUMENT", True),
    "CHILD_AGENT_ID_REQUIRED": ("INVALID_ARGUMENT", True),
    "CHILD_SESSION_ID_REQUIRED": ("INVALID_ARGUMENT", True),
    "EVENT_CONFLICT": ("ALREADY_EXISTS", True),
    "INVALID_TRANSCRIPT_POSITION": ("INVALID_ARGUMENT", True),
    "CONTINUATION_MISMATCH": ("FAILED_PRECONDITION", True),
    "CONTRACT_VALIDATION": ("INVALID_ARGUMENT", True),
    "INVALID_ARGUMENT_READ": ("INVALID_ARGUMENT", True),
    "MALFORMED_REQUEST": ("INVALID_ARGUMENT", True),
    "STORED_STATE_CORRUPT": ("DATA_LOSS", True),
    "SEED_NOT_FOUND": ("NOT_FOUND", True),
    "SEED_CONFLICT": ("ALREADY_EXISTS", True),
    "SEED_NOT_PUBLISHED": ("FAILED_PRECONDITION", True),
    "PREPARATION_ABANDONED": ("FAILED_PRECONDITION", True),
    "TRANSIENT": ("UNAVAILABLE", False),
    # Product memory (D5): a stale context save is ABORTED but permanent, so
    # clients reload instead of retrying blindly.
    "IDEMPOTENCY_CONFLICT": ("ALREADY_EXISTS", True),
    "CONTEXT_NOT_FOUND": ("NOT_FOUND", True),
    "CONTEXT_VERSION_NOT_FOUND": ("NOT_FOUND", True),
    "CONTEXT_VERSION_CONFLICT": ("ABORTED", True),
    # Namespaces (docs/namespaces.md): permanent.
    "NAMESPACE_REQUIRED": ("INVALID_ARGUMENT", True),
    "NAMESPACE_NOT_FOUND": ("NOT_FOUND", True),
    "NAMESPACE_ALREADY_EXISTS": ("ALREADY_EXISTS", True),
    "NAMESPACE_TOMBSTONED": ("FAILED_PRECONDITION", True),
    "NAMESPACE_PROTECTED": ("FAILED_PRECONDITION", True),
    # Access (authentication and roles): permanent, never retried.
    "UNAUTHENTICATED": ("UNAUTHENTICATED", True),
    "PERMISSION_DENIED": ("PERMISSION_DENIED", True),
    # An operating limit of the server (docs/limits.md): retry later.
    "OVERLOADED": ("RESOURCE_EXHAUSTED", False),
    "QUOTA_EXCEEDED": ("RESOURCE_EXHAUSTED", False),
    # Client-side only: a status outside the table (no ErrorInfo from runstore).
    "RPC_ERROR": ("UNKNOWN", False),
}


def test_every_reason_of_the_table_has_its_class_and_nothing_else() -> None:
    registered = {
        reason: (cls.code, cls.permanent) for reason, cls in errors.error_classes().items()
    }
    assert registered == EXPECTED


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.UnavailableError(), grpc.StatusCode.UNAVAILABLE),
        (errors.AbortedError(), grpc.StatusCode.ABORTED),
        (errors.InternalError(), grpc.StatusCode.INTERNAL),
    ],
)
def test_transient_errors_keep_their_code_and_are_not_permanent(
    error: errors.RunstoreError, code: grpc.StatusCode
) -> None:
    status = to_status(error)
    assert status.code is code
    info = _error_info(status)
    assert (info.reason, info.metadata["permanent"]) == ("TRANSIENT", "false")


def test_status_carries_one_error_info_with_context() -> None:
    error = errors.EventConflictError(run_id="r1", session_id="s1", event_key="k1")
    status = to_status(error)
    assert status.code is grpc.StatusCode.ALREADY_EXISTS
    assert status.details == 'run "r1" event key "k1": runlog: event conflict'
    info = _error_info(status)
    assert info.domain == "runstore"
    assert info.reason == "EVENT_CONFLICT"
    assert dict(info.metadata) == {
        "permanent": "true",
        "run_id": "r1",
        "session_id": "s1",
        "event_key": "k1",
    }


def _error_info(status: grpc.Status) -> error_details_pb2.ErrorInfo:
    (key, value), *_ = [item for item in status.trailing_metadata if item[0].endswith("-bin")]
    assert key == "grpc-status-details-bin"
    rich = status_pb2.Status.FromString(value)
    assert len(rich.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert rich.details[0].Unpack(info)
    return info


class _AbortingContext:
    """Just enough of a ServicerContext to see what ``abort`` sends."""

    def __init__(self) -> None:
        self.sent: tuple[grpc.StatusCode, str, tuple[tuple[str, str | bytes], ...]] | None = None

    async def abort(
        self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str | bytes], ...]
    ) -> None:
        self.sent = (code, details, trailing)
        raise grpc.aio.AbortError()


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (
            errors.UnavailableError(
                "database unavailable: ConnectionRefusedError: connect to 10.1.2.3:5432 failed"
            ),
            grpc.StatusCode.UNAVAILABLE,
            "runstore is temporarily unavailable",
        ),
        (
            errors.InternalError(
                "database error: 22021 asyncpg.exceptions.CharacterNotInRepertoire"
            ),
            grpc.StatusCode.INTERNAL,
            "internal error",
        ),
        (
            RuntimeError("asyncpg.exceptions.InternalClientError at postgres://db:5432"),
            grpc.StatusCode.INTERNAL,
            "internal error",
        ),
    ],
)
async def test_failures_that_are_not_contract_errors_leak_nothing(
    raised: Exception, code: grpc.StatusCode, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller gets a generic message and the request id; the detail is
    logged under that id."""

    class Servicer:
        @maps_errors
        async def Method(self, request: object, context: object) -> object:
            raise raised

    call_request_id.set_current("req-7")
    context = _AbortingContext()
    with pytest.raises(grpc.aio.AbortError):
        await Servicer().Method(object(), context)  # type: ignore[arg-type]
    assert context.sent is not None
    sent_code, details, trailing = context.sent
    assert (sent_code, details) == (code, message)
    assert ("x-request-id", "req-7") in trailing
    rich = status_pb2.Status.FromString(dict(trailing)["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    rich.details[0].Unpack(info)
    assert info.metadata["request_id"] == "req-7"
    assert rich.message == message
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "req-7" in logged


def test_bounded_cuts_at_a_character_boundary_and_marks_the_cut() -> None:
    assert bounded("short", 256) == "short"
    cut = bounded("é" * 300, 256)
    assert len(cut.encode()) <= 256 and cut.endswith(CUT_MARK)
    assert set(cut.removesuffix(CUT_MARK)) == {"é"}
    error = errors.RunNotFoundError(run_id="r" * 10_000)
    status = to_status(error)
    info = _error_info(status)
    assert len(info.metadata["run_id"].encode()) <= MAX_ECHOED_VALUE_BYTES
    long_message = errors.ValidationError("m" * 10_000)
    assert len(to_status(long_message).details.encode()) <= MAX_MESSAGE_BYTES
