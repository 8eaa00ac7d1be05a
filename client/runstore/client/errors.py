"""Rebuilding runstore errors from gRPC failures, by ErrorInfo reason (D4).

The client raises the very classes the server core raises
(``runstore.contract.errors``): ``except RunConflictError`` works the same
in-process and remotely. A status without runstore's ErrorInfo (a transport
failure, a deadline, a proxy) is classified by its code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import grpc
from google.rpc import error_details_pb2, status_pb2

from runstore.contract.errors import (
    ERROR_DOMAIN,
    AbortedError,
    CallCancelledError,
    DeadlineExceededError,
    InternalError,
    PermissionDeniedError,
    RunstoreError,
    TransientError,
    UnauthenticatedError,
    UnavailableError,
    UnexpectedRpcError,
    error_class_for,
)

_STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
_CONTEXT_KEYS: Final = ("run_id", "session_id", "event_key", "field")

_BY_CODE: Final[Mapping[grpc.StatusCode, type[RunstoreError]]] = {
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CallCancelledError,
    # A proxy or gRPC itself may refuse without runstore's ErrorInfo: still
    # never retried.
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
}


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """runstore's ErrorInfo from a failed call's trailers, if it carries one."""
    trailers = getattr(error, "trailing_metadata", lambda: None)() or ()
    for key, value in trailers:
        if key != _STATUS_DETAILS_KEY:
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                if info.domain == ERROR_DOMAIN:
                    return info
    return None


def retry_delay(error: grpc.RpcError) -> float | None:
    """The seconds a failed call's ``google.rpc.RetryInfo`` asks to wait, if it has one."""
    trailers = getattr(error, "trailing_metadata", lambda: None)() or ()
    for key, value in trailers:
        if key != _STATUS_DETAILS_KEY:
            continue
        for detail in status_pb2.Status.FromString(value).details:
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                return max(0.0, float(info.retry_delay.ToNanoseconds()) / 1e9)
    return None


def from_rpc_error(error: grpc.RpcError) -> RunstoreError:
    """The runstore error a failed gRPC call stands for; the call is its cause."""
    code: grpc.StatusCode = error.code()
    message: str = error.details() or code.name
    info = error_info(error)
    cls: type[RunstoreError] | None = None
    context: dict[str, str] = {}
    details: dict[str, str] = {}
    if info is not None:
        cls = error_class_for(info.reason)
        for key, value in info.metadata.items():
            if key in _CONTEXT_KEYS:
                context[key] = value
            elif key != "permanent":
                details[key] = value
    if cls is None or cls is TransientError:
        cls = _BY_CODE.get(code, UnexpectedRpcError)
    rebuilt = cls(message, details=details, **context)
    rebuilt.status_code = code.name
    rebuilt.retry_delay = retry_delay(error)
    rebuilt.__cause__ = error
    return rebuilt
