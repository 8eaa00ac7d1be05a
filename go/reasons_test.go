package runstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

var families = []error{ErrNotFound, ErrConflict, ErrFailedPrecondition, ErrInvalidArgument, ErrAccessDenied, ErrUnavailable}

func statusWith(code codes.Code, reason string, metadata map[string]string, retryDelay time.Duration) *status.Status {
	info := &errdetails.ErrorInfo{Domain: ErrorDomain, Reason: reason, Metadata: metadata}
	st, err := status.New(code, "refused").WithDetails(info)
	if err != nil {
		panic(err)
	}
	if retryDelay > 0 {
		st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)})
		if err != nil {
			panic(err)
		}
	}
	return st
}

// TestEveryErrorReasonMaps walks the generated enum: every reason a server
// may send has a sentinel of its own (and one family, or deliberately none),
// so a reason added to error_reason.proto fails here until it is mapped.
func TestEveryErrorReasonMaps(t *testing.T) {
	seen := map[error]string{}
	for number, name := range runstorev1.ErrorReason_name {
		if number == int32(runstorev1.ErrorReason_ERROR_REASON_UNSPECIFIED) {
			if _, mapped := reasons[name]; mapped {
				t.Errorf("%s is never sent and must map to nothing", name)
			}
			continue
		}
		info, mapped := reasons[name]
		if !mapped {
			t.Errorf("ErrorReason %s (%d) has no sentinel in reasons", name, number)
			continue
		}
		if info.sentinel == nil || info.sentinel.Error() != "runstore: "+name {
			t.Errorf("%s: sentinel %v", name, info.sentinel)
		}
		if other, taken := seen[info.sentinel]; taken {
			t.Errorf("%s and %s share a sentinel", name, other)
		}
		seen[info.sentinel] = name
		isFamily := info.family == nil && (name == "STORED_STATE_CORRUPT" || name == "RPC_ERROR")
		for _, family := range families {
			isFamily = isFamily || info.family == family
		}
		if !isFamily {
			t.Errorf("%s: family %v is not one of the families (nil only for STORED_STATE_CORRUPT, RPC_ERROR)", name, info.family)
		}
		failure := fromStatus(statusWith(codes.Unknown, name, map[string]string{"permanent": "true"}, 0))
		if failure.Reason() != name || !errors.Is(failure, info.sentinel) || (info.family != nil && !errors.Is(failure, info.family)) {
			t.Errorf("%s: %v does not match its sentinels", name, failure)
		}
		for _, family := range families {
			if family != info.family && errors.Is(failure, family) {
				t.Errorf("%s matches the family %v too", name, family)
			}
		}
	}
	for name := range reasons {
		if _, known := runstorev1.ErrorReason_value[name]; !known {
			t.Errorf("reasons maps %s, which ErrorReason does not have", name)
		}
	}
	for sentinel, name := range seen {
		for other := range seen {
			if other != sentinel && errors.Is(fromStatus(statusWith(codes.Unknown, name, nil, 0)), other) {
				t.Errorf("%s matches %v", name, other)
			}
		}
	}
}

// TestRetryable is the rule of which failures are resent.
func TestRetryable(t *testing.T) {
	handshake := status.New(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: x509\"")
	cases := []struct {
		name      string
		status    *status.Status
		retry     bool
		permanent bool
		reason    string
	}{
		{"unavailable transient", statusWith(codes.Unavailable, "TRANSIENT", map[string]string{"permanent": "false"}, 0), true, false, "TRANSIENT"},
		{"internal transient", statusWith(codes.Internal, "TRANSIENT", map[string]string{"permanent": "false"}, 0), true, false, "TRANSIENT"},
		{"overloaded", statusWith(codes.ResourceExhausted, "OVERLOADED", map[string]string{"permanent": "false"}, 0), true, false, "OVERLOADED"},
		{"rate quota", statusWith(codes.ResourceExhausted, "QUOTA_EXCEEDED", map[string]string{"permanent": "false", "quota": "writes_per_second"}, 0), true, false, "QUOTA_EXCEEDED"},
		{"watch quota", statusWith(codes.ResourceExhausted, "QUOTA_EXCEEDED", map[string]string{"permanent": "false", "quota": "watch_streams"}, 0), true, false, "QUOTA_EXCEEDED"},
		{"stored bytes quota", statusWith(codes.ResourceExhausted, "QUOTA_EXCEEDED", map[string]string{"permanent": "false", "quota": "stored_bytes"}, 0), false, false, "QUOTA_EXCEEDED"},
		{"context version conflict", statusWith(codes.Aborted, "CONTEXT_VERSION_CONFLICT", map[string]string{"permanent": "true"}, 0), false, true, "CONTEXT_VERSION_CONFLICT"},
		{"run not found", statusWith(codes.NotFound, "RUN_NOT_FOUND", map[string]string{"permanent": "true"}, 0), false, true, "RUN_NOT_FOUND"},
		{"bare unavailable", status.New(codes.Unavailable, "connection refused"), true, false, "TRANSIENT"},
		{"bare aborted", status.New(codes.Aborted, "aborted"), true, false, "TRANSIENT"},
		{"bare deadline", status.New(codes.DeadlineExceeded, "deadline"), true, false, "TRANSIENT"},
		{"bare cancelled", status.New(codes.Canceled, "server shutting down"), true, false, "TRANSIENT"},
		{"tls handshake", handshake, false, false, "RPC_ERROR"},
		{"too large", status.New(codes.ResourceExhausted, "message larger than max"), false, true, "RPC_ERROR"},
		{"unimplemented", status.New(codes.Unimplemented, "unknown method"), false, false, "RPC_ERROR"},
		{"other domain", func() *status.Status {
			st, _ := status.New(codes.Unavailable, "x").WithDetails(&errdetails.ErrorInfo{Domain: "googleapis.com", Reason: "RUN_NOT_FOUND"})
			return st
		}(), true, false, "TRANSIENT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failure := fromStatus(c.status)
			if failure.Retryable() != c.retry || failure.Permanent() != c.permanent || failure.Reason() != c.reason {
				t.Fatalf("%v: retryable %v permanent %v reason %s", failure, failure.Retryable(), failure.Permanent(), failure.Reason())
			}
			if failure.GRPCStatus() != c.status || status.Code(failure) != c.status.Code() {
				t.Fatalf("status not kept: %v", failure.GRPCStatus())
			}
			if !strings.Contains(failure.Error(), c.reason) {
				t.Fatalf("message %q", failure.Error())
			}
		})
	}
}

func TestRetryInfoAndMetadata(t *testing.T) {
	metadata := map[string]string{"permanent": "false", "quota": "writes_per_second", "namespace": "team-a"}
	failure := fromStatus(statusWith(codes.ResourceExhausted, "QUOTA_EXCEEDED", metadata, 1500*time.Millisecond))
	if delay, ok := failure.RetryDelay(); !ok || delay != 1500*time.Millisecond {
		t.Fatalf("RetryDelay: %s %v", delay, ok)
	}
	copied := failure.Metadata()
	copied["quota"] = "changed"
	if failure.Metadata()["quota"] != "writes_per_second" || failure.Metadata()["namespace"] != "team-a" {
		t.Fatalf("Metadata is not a copy: %v", failure.Metadata())
	}
	if !errors.Is(failure, ErrQuotaExceeded) || !errors.Is(failure, ErrUnavailable) || ReasonOf(failure) != "QUOTA_EXCEEDED" {
		t.Fatalf("sentinels: %v", failure)
	}
	if _, ok := fromStatus(status.New(codes.Unavailable, "x")).RetryDelay(); ok {
		t.Fatal("a delay without RetryInfo")
	}
}
