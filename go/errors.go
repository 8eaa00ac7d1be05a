package runstore

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the ErrorInfo domain of every runstore error (docs/errors.md).
const ErrorDomain = "runstore"

// Error is a failed call: the gRPC status and, when runstore's own code
// refused the call, the google.rpc.ErrorInfo it carries (docs/errors.md).
// errors.Is matches it against the sentinel of its reason (ErrRunNotFound,
// ...) and of the reason's family (ErrNotFound, ...).
type Error struct {
	status     *status.Status
	reason     string
	metadata   map[string]string
	fromServer bool
	retryDelay time.Duration
	hasDelay   bool
}

// Reason is the ErrorInfo reason, one of the runstorev1.ErrorReason names;
// without an ErrorInfo, TRANSIENT for the codes a dropped connection or an
// expired deadline gives, else RPC_ERROR (as the Python client names them).
func (e *Error) Reason() string { return e.reason }

// Metadata is a copy of the ErrorInfo metadata ("permanent", "request_id",
// "run_id", "field", ...); empty without an ErrorInfo.
func (e *Error) Metadata() map[string]string { return maps.Clone(e.metadata) }

// GRPCStatus is the call's status (status.FromError and status.Code read it).
func (e *Error) GRPCStatus() *status.Status { return e.status }

// Code is the status code.
func (e *Error) Code() codes.Code { return e.status.Code() }

// Permanent reports whether resending the same command can never succeed:
// the ErrorInfo's "permanent" metadata; without an ErrorInfo, a request over
// the message size limit (RESOURCE_EXHAUSTED) is permanent, the rest not.
func (e *Error) Permanent() bool {
	if e.fromServer {
		return e.metadata["permanent"] == "true"
	}
	return e.status.Code() == codes.ResourceExhausted
}

// Retryable reports whether the client resends the identical command after
// this failure: TRANSIENT, OVERLOADED, QUOTA_EXCEEDED but for the
// stored_bytes quota, which no wait clears, and the codes of a dropped
// connection or an expired attempt (UNAVAILABLE, ABORTED, DEADLINE_EXCEEDED,
// CANCELLED) without an ErrorInfo, but not a failed TLS handshake, which
// looks like an outage and is a configuration mistake.
func (e *Error) Retryable() bool {
	if e.fromServer {
		switch e.reason {
		case "TRANSIENT", "OVERLOADED":
			return true
		case "QUOTA_EXCEEDED":
			return e.metadata["quota"] != "stored_bytes"
		}
		return false
	}
	switch e.status.Code() {
	case codes.Unavailable:
		return !strings.Contains(e.status.Message(), "authentication handshake failed")
	case codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// RetryDelay is the delay a google.rpc.RetryInfo asked for, if any.
func (e *Error) RetryDelay() (time.Duration, bool) { return e.retryDelay, e.hasDelay }

func (e *Error) Error() string {
	return fmt.Sprintf("runstore: %s %s: %s", e.status.Code(), e.reason, e.status.Message())
}

// Is matches the sentinel of the error's reason and of its family.
func (e *Error) Is(target error) bool {
	known, ok := reasons[e.reason]
	if !ok {
		return false
	}
	return target == known.sentinel || (known.family != nil && target == known.family)
}

// asError turns a call's error into an *Error (a non-status error is kept).
func asError(err error) error {
	var already *Error
	if errors.As(err, &already) {
		return already
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return fromStatus(st)
}

func fromStatus(st *status.Status) *Error {
	e := &Error{status: st, metadata: map[string]string{}}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == ErrorDomain && !e.fromServer {
				e.fromServer = true
				e.reason = d.GetReason()
				maps.Copy(e.metadata, d.GetMetadata())
			}
		case *errdetails.RetryInfo:
			if delay := d.GetRetryDelay(); delay != nil {
				e.retryDelay, e.hasDelay = delay.AsDuration(), true
			}
		}
	}
	if !e.fromServer {
		e.reason = "RPC_ERROR"
		if e.Retryable() {
			e.reason = "TRANSIENT"
		}
	}
	return e
}

// ReasonOf is the reason of err when it is (or wraps) an *Error, else "".
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.reason
	}
	return ""
}
