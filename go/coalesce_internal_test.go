package runstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// fakeConn answers AppendRunRecord and AppendRunRecordCalls as a server
// would, holding every call until gate is closed, and records what reached it.
type fakeConn struct {
	gate chan struct{}

	mu      sync.Mutex
	methods []string
	keys    [][]string // the event keys of each message, in order
}

func newFakeConn() *fakeConn { return &fakeConn{gate: make(chan struct{})} }

// answer is a key's outcome: keys starting "bad" are refused with an ErrorInfo naming them.
func answer(record *runstorev1.RunRecord, id int) (*runstorev1.AppendRunRecordResponse, *status.Status) {
	if strings.HasPrefix(record.GetEventKey(), "bad") {
		st, _ := status.New(codes.InvalidArgument, "bad record "+record.GetEventKey()).WithDetails(&errdetails.ErrorInfo{
			Domain: ErrorDomain, Reason: "INVALID_ARGUMENT",
			Metadata: map[string]string{"field": "record.event_key", "key": record.GetEventKey()},
		})
		return nil, st
	}
	return &runstorev1.AppendRunRecordResponse{Id: fmt.Sprint(id), Inserted: true}, nil
}

func (f *fakeConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if encoded, ok := args.(frozen); ok { // what invoke sends: the request already encoded
		request := &runstorev1.AppendRunRecordRequest{}
		if err := proto.Unmarshal(encoded, request); err != nil {
			return err
		}
		args = request
	}
	var keys []string
	switch request := args.(type) {
	case *runstorev1.AppendRunRecordRequest:
		keys = []string{request.GetRecord().GetEventKey()}
	case *runstorev1.AppendRunRecordCallsRequest:
		for _, call := range request.GetCalls() {
			keys = append(keys, call.GetRequest().GetRecord().GetEventKey())
		}
	default:
		return status.Errorf(codes.Unimplemented, "fake: %s", method)
	}
	f.mu.Lock()
	f.methods = append(f.methods, method)
	f.keys = append(f.keys, keys)
	f.mu.Unlock()
	select {
	case <-f.gate:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	switch request := args.(type) {
	case *runstorev1.AppendRunRecordRequest:
		response, st := answer(request.GetRecord(), 1)
		if st != nil {
			return st.Err()
		}
		proto.Merge(reply.(proto.Message), response)
	case *runstorev1.AppendRunRecordCallsRequest:
		out := reply.(*runstorev1.AppendRunRecordCallsResponse)
		for i, call := range request.GetCalls() {
			response, st := answer(call.GetRequest().GetRecord(), i+1)
			outcome := &runstorev1.AppendRunRecordCallOutcome{}
			if st != nil {
				details := make([]*anypb.Any, 0)
				details = append(details, st.Proto().GetDetails()...)
				outcome.Outcome = &runstorev1.AppendRunRecordCallOutcome_Error{Error: &runstorev1.CallStatus{
					Code: int32(st.Code()), Message: st.Message(), Details: details,
				}}
			} else {
				outcome.Outcome = &runstorev1.AppendRunRecordCallOutcome_Response{Response: response}
			}
			out.Outcomes = append(out.Outcomes, outcome)
		}
	}
	return nil
}

func (f *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("fake: no streams")
}

func (f *fakeConn) seen() ([]string, [][]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.methods...), append([][]string(nil), f.keys...)
}

// waitFor polls cond for up to 10 s (no sleep stands for a race).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *coalescer) waitingForRoom() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

func (c *coalescer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

func record(key string, payload int) Record {
	return Record{
		EventKey: key, RunID: "run", AgentID: "agent", Type: "tool_result_received",
		Payload: []byte(strings.Repeat("x", payload)), Timestamp: time.UnixMilli(1).UTC(),
	}
}

type outcome struct {
	result AppendResult
	err    error
}

func appendAsync(ctx context.Context, c *Client, r Record) chan outcome {
	done := make(chan outcome, 1)
	go func() {
		result, err := c.AppendRunRecord(ctx, r)
		done <- outcome{result, err}
	}()
	return done
}

func TestCoalescingLoneCallGoesAtOnceAlone(t *testing.T) {
	conn := newFakeConn()
	c, err := New(conn, WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	done := appendAsync(t.Context(), c, record("k1", 10))
	// It reaches the wire while nothing else is in flight: no wait for company.
	waitFor(t, "the lone call on the wire", func() bool { methods, _ := conn.seen(); return len(methods) == 1 })
	close(conn.gate)
	got := <-done
	if got.err != nil || got.result.ID != "1" {
		t.Fatalf("lone append: %+v", got)
	}
	methods, _ := conn.seen()
	if methods[0] != runstorev1.RuntimeStore_AppendRunRecord_FullMethodName {
		t.Fatalf("a lone append went as %s, not a plain AppendRunRecord", methods[0])
	}
}

func TestCoalescingSharesMessagesEachCallerItsOwnOutcome(t *testing.T) {
	conn := newFakeConn()
	c, err := New(conn, WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	first := []chan outcome{appendAsync(ctx, c, record("a1", 10)), appendAsync(ctx, c, record("a2", 10))}
	waitFor(t, "two messages in flight", func() bool { methods, _ := conn.seen(); return len(methods) == 2 })
	var rest []chan outcome
	keys := []string{"b1", "bad2", "b3", "b4"}
	for _, key := range keys {
		rest = append(rest, appendAsync(ctx, c, record(key, 10)))
		waitFor(t, key+" queued", func() bool { return c.coalescer.queued() == len(rest) })
	}
	close(conn.gate)
	for _, done := range first {
		if got := <-done; got.err != nil {
			t.Fatal(got.err)
		}
	}
	for i, done := range rest {
		got := <-done
		if keys[i] == "bad2" {
			var failure *Error
			if !errors.As(got.err, &failure) || failure.Code() != codes.InvalidArgument || failure.Metadata()["key"] != "bad2" {
				t.Fatalf("bad2: want its own INVALID_ARGUMENT, got %v", got.err)
			}
			continue
		}
		if got.err != nil || got.result.ID != fmt.Sprint(i+1) || !got.result.Inserted {
			t.Fatalf("%s: its neighbour's error must not be its own: %+v", keys[i], got)
		}
	}
	methods, sent := conn.seen()
	if len(methods) != 3 || methods[2] != runstorev1.RuntimeStore_AppendRunRecordCalls_FullMethodName ||
		strings.Join(sent[2], ",") != strings.Join(keys, ",") {
		t.Fatalf("want 2 plain calls then one AppendRunRecordCalls of %v, got %v %v", keys, methods, sent)
	}
}

func TestCoalescingOffSendsEveryCallAlone(t *testing.T) {
	conn := newFakeConn()
	c, err := New(conn, WithoutRetry(), WithoutCoalescing())
	if err != nil {
		t.Fatal(err)
	}
	var dones []chan outcome
	for i := range 6 {
		dones = append(dones, appendAsync(t.Context(), c, record(fmt.Sprint("k", i), 10)))
	}
	// All six reach the wire at once, each its own call.
	waitFor(t, "six calls on the wire", func() bool { methods, _ := conn.seen(); return len(methods) == 6 })
	close(conn.gate)
	for _, done := range dones {
		if got := <-done; got.err != nil {
			t.Fatal(got.err)
		}
	}
	methods, _ := conn.seen()
	for _, method := range methods {
		if method != runstorev1.RuntimeStore_AppendRunRecord_FullMethodName {
			t.Fatalf("with coalescing off every append is its own AppendRunRecord, got %v", methods)
		}
	}
}

func TestCoalescingQueuedBytesBound(t *testing.T) {
	conn := newFakeConn()
	c, err := New(conn, WithoutRetry(), WithCoalescing(Coalescing{
		MaxMessagesInFlight: 1, MaxCalls: 128, MaxMessageBytes: 1000, MaxQueuedBytes: 1000,
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	inFlight := appendAsync(ctx, c, record("k0", 600))
	waitFor(t, "one message in flight", func() bool { methods, _ := conn.seen(); return len(methods) == 1 })
	queued := appendAsync(ctx, c, record("k1", 600))
	waitFor(t, "k1 queued", func() bool { return c.coalescer.queued() == 1 })

	// Past the bound a caller waits (not queued), within its deadline, and is never sent.
	short, cancel := context.WithCancel(ctx)
	over := appendAsync(short, c, record("over", 600))
	waitFor(t, "a caller waiting for room", func() bool { return c.coalescer.waitingForRoom() == 1 })
	if c.coalescer.queued() != 1 {
		t.Fatalf("a caller past the bound must wait, not queue")
	}
	cancel()
	if got := <-over; status.Code(got.err) != codes.Canceled && !errors.Is(got.err, context.Canceled) {
		t.Fatalf("over the queued bytes bound: want its own context's end, got %+v", got)
	}
	if c.coalescer.waitingForRoom() != 0 || c.coalescer.queued() != 1 {
		t.Fatalf("the caller that gave up must leave no trace")
	}
	// A deadline bounds the wait too.
	expired, cancelExpired := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelExpired()
	if _, err := c.AppendRunRecord(expired, record("over", 600)); status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	// One without a deadline waits for room, then goes.
	waiting := appendAsync(ctx, c, record("k2", 600))
	close(conn.gate)
	for _, done := range []chan outcome{inFlight, queued, waiting} {
		if got := <-done; got.err != nil {
			t.Fatal(got.err)
		}
	}
	_, sent := conn.seen()
	for _, keys := range sent {
		for _, key := range keys {
			if key == "over" {
				t.Fatalf("an append that gave up waiting was sent: %v", sent)
			}
		}
	}
	if len(sent) != 3 {
		t.Fatalf("want k0, k1 and k2 each in its own message (the bound), got %v", sent)
	}
}

func TestCoalescingRejectsBadBounds(t *testing.T) {
	for _, bounds := range []Coalescing{
		{MaxMessagesInFlight: 0, MaxCalls: 1, MaxMessageBytes: 1, MaxQueuedBytes: 1},
		{MaxMessagesInFlight: 1, MaxCalls: 129, MaxMessageBytes: 1, MaxQueuedBytes: 1},
		{MaxMessagesInFlight: 1, MaxCalls: 1, MaxMessageBytes: 10, MaxQueuedBytes: 5},
	} {
		if _, err := New(newFakeConn(), WithCoalescing(bounds)); err == nil {
			t.Fatalf("WithCoalescing(%+v) accepted", bounds)
		}
	}
}
