package runstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
	runstore "github.com/runstore/runstore/go"
)

// fakeStore is a RuntimeStore that answers each call with the next scripted
// error (then success), recording the bytes and metadata of every request.
type fakeStore struct {
	runstorev1.UnimplementedRuntimeStoreServer
	mu       sync.Mutex
	script   []func(ctx context.Context) error
	always   func(ctx context.Context) error
	bodies   [][]byte
	metadata []metadata.MD
	watches  []string
	streams  []func(cursor string, send func(*runstorev1.WatchRunRecordsResponse) error) error
}

func (f *fakeStore) next(ctx context.Context) error {
	f.mu.Lock()
	md, _ := metadata.FromIncomingContext(ctx)
	f.metadata = append(f.metadata, md)
	var step func(context.Context) error
	if len(f.script) > 0 {
		step, f.script = f.script[0], f.script[1:]
	} else {
		step = f.always
	}
	f.mu.Unlock()
	if step == nil {
		return nil
	}
	return step(ctx)
}

func (f *fakeStore) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.metadata)
}

func (f *fakeStore) AppendRunRecord(ctx context.Context, _ *runstorev1.AppendRunRecordRequest) (*runstorev1.AppendRunRecordResponse, error) {
	if err := f.next(ctx); err != nil {
		return nil, err
	}
	return &runstorev1.AppendRunRecordResponse{Id: "7", Inserted: true}, nil
}

func (f *fakeStore) StartRootRun(ctx context.Context, _ *runstorev1.StartRootRunRequest) (*runstorev1.StartRootRunResponse, error) {
	if err := f.next(ctx); err != nil {
		return nil, err
	}
	return &runstorev1.StartRootRunResponse{
		Outcome: runstorev1.RunStartOutcome_RUN_START_OUTCOME_PROCEED,
		Started: &runstorev1.AppendResult{Id: "1", Inserted: true},
	}, nil
}

func (f *fakeStore) WatchRunRecords(request *runstorev1.WatchRunRecordsRequest, stream grpc.ServerStreamingServer[runstorev1.WatchRunRecordsResponse]) error {
	f.mu.Lock()
	f.watches = append(f.watches, request.GetCursor())
	serve := f.streams[0]
	f.streams = f.streams[1:]
	f.mu.Unlock()
	return serve(request.GetCursor(), stream.Send)
}

// recordingCodec keeps the bytes of every request the server decodes.
type recordingCodec struct{ store *fakeStore }

func (recordingCodec) Name() string                  { return "proto" }
func (recordingCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (c recordingCodec) Unmarshal(data []byte, v any) error {
	c.store.mu.Lock()
	c.store.bodies = append(c.store.bodies, bytes.Clone(data))
	c.store.mu.Unlock()
	return proto.Unmarshal(data, v.(proto.Message))
}

func serveFake(t *testing.T, store *fakeStore) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(grpc.ForceServerCodec(recordingCodec{store}))
	runstorev1.RegisterRuntimeStoreServer(server, store)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return listener.Addr().String()
}

func refusal(code codes.Code, reason string, metadata map[string]string, retryDelay time.Duration) func(context.Context) error {
	return func(context.Context) error {
		st, _ := status.New(code, "scripted "+reason).WithDetails(&errdetails.ErrorInfo{Domain: "runstore", Reason: reason, Metadata: metadata})
		if retryDelay > 0 {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)})
		}
		return st.Err()
	}
}

var (
	transient = refusal(codes.Unavailable, "TRANSIENT", map[string]string{"permanent": "false"}, 0)
	fast      = runstore.RetryPolicy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Multiplier: 2, Deadline: 20 * time.Second}
)

// refusals collects what the refusal hook reports.
type refusals struct {
	mu   sync.Mutex
	seen []runstore.Refusal
}

func (r *refusals) hook(refusal runstore.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, refusal)
}

func (r *refusals) decisions() []runstore.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runstore.Decision
	for _, refusal := range r.seen {
		out = append(out, refusal.Decision)
	}
	return out
}

func sampleRecord() runstore.Record {
	return runstore.Record{
		EventKey: "k", RunID: "r", AgentID: "a", SessionID: "s", Type: "note",
		Payload: []byte(`{"x":1}`), Timestamp: time.UnixMilli(1_800_000_000_000),
	}
}

func TestRetryResendsTheIdenticalBytes(t *testing.T) {
	store := &fakeStore{script: []func(context.Context) error{
		transient, refusal(codes.ResourceExhausted, "OVERLOADED", map[string]string{"permanent": "false"}, 0),
	}}
	seen := &refusals{}
	c := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithRefusalHook(seen.hook))
	run := runstore.RunStart{
		RunID: "r", AgentID: "a", SessionID: "s", StartedAt: time.UnixMilli(1_800_000_000_000),
		Labels: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"},
	}
	result, err := c.StartRootRun(testContext(t), run, sampleRecord(), sampleRecord())
	if err != nil || !result.Started.Inserted {
		t.Fatalf("StartRootRun: %+v %v", result, err)
	}
	if len(store.bodies) != 3 || !bytes.Equal(store.bodies[0], store.bodies[1]) || !bytes.Equal(store.bodies[0], store.bodies[2]) {
		t.Fatalf("%d attempts, bodies differ", len(store.bodies))
	}
	if got := seen.decisions(); len(got) != 2 || got[0] != runstore.Retrying || got[1] != runstore.Retrying {
		t.Fatalf("refusals: %v", got)
	}
	if seen.seen[1].Attempt != 2 || !errors.Is(seen.seen[1].Err, runstore.ErrOverloaded) ||
		seen.seen[0].Method != runstorev1.RuntimeStore_StartRootRun_FullMethodName {
		t.Fatalf("refusal: %+v", seen.seen[1])
	}
}

func TestRetryWaitsForRetryInfo(t *testing.T) {
	const asked = 150 * time.Millisecond
	store := &fakeStore{script: []func(context.Context) error{
		refusal(codes.ResourceExhausted, "QUOTA_EXCEEDED", map[string]string{"permanent": "false", "quota": "writes_per_second"}, asked),
	}}
	seen := &refusals{}
	c := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithRefusalHook(seen.hook))
	began := time.Now()
	if _, err := c.AppendRunRecord(testContext(t), sampleRecord()); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(began); elapsed < asked || seen.seen[0].Delay < asked {
		t.Fatalf("retried after %s (delay %s), before the %s RetryInfo asked", elapsed, seen.seen[0].Delay, asked)
	}
}

func TestNotRetried(t *testing.T) {
	cases := []struct {
		name     string
		answer   func(context.Context) error
		sentinel error
	}{
		{"context version conflict (ABORTED, permanent)",
			refusal(codes.Aborted, "CONTEXT_VERSION_CONFLICT", map[string]string{"permanent": "true", "current_version": "3"}, 0),
			runstore.ErrContextVersionConflict},
		{"stored_bytes quota",
			refusal(codes.ResourceExhausted, "QUOTA_EXCEEDED", map[string]string{"permanent": "false", "quota": "stored_bytes"}, time.Second),
			runstore.ErrQuotaExceeded},
		{"event conflict", refusal(codes.AlreadyExists, "EVENT_CONFLICT", map[string]string{"permanent": "true"}, 0), runstore.ErrEventConflict},
		{"resource exhausted without ErrorInfo", func(context.Context) error {
			return status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
		}, runstore.ErrRPC},
		{"unimplemented", func(context.Context) error { return status.Error(codes.Unimplemented, "no") }, runstore.ErrRPC},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := &fakeStore{always: c.answer}
			seen := &refusals{}
			client := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithRefusalHook(seen.hook))
			_, err := client.AppendRunRecord(testContext(t), sampleRecord())
			if !errors.Is(err, c.sentinel) || store.attempts() != 1 {
				t.Fatalf("%v after %d attempts", err, store.attempts())
			}
			if got := seen.decisions(); len(got) != 1 || got[0] != runstore.NotRetryable {
				t.Fatalf("refusals: %v", got)
			}
		})
	}
}

func TestRetryGivesUp(t *testing.T) {
	t.Run("max attempts", func(t *testing.T) {
		store := &fakeStore{always: transient}
		seen := &refusals{}
		policy := fast
		policy.MaxAttempts = 3
		c := dial(t, serveFake(t, store), runstore.WithRetry(policy), runstore.WithRefusalHook(seen.hook))
		_, err := c.AppendRunRecord(testContext(t), sampleRecord())
		if !errors.Is(err, runstore.ErrTransient) || store.attempts() != 3 {
			t.Fatalf("%v after %d attempts", err, store.attempts())
		}
		if got := seen.decisions(); len(got) != 3 || got[2] != runstore.AttemptsExhausted {
			t.Fatalf("refusals: %v", got)
		}
	})
	t.Run("without retry", func(t *testing.T) {
		store := &fakeStore{always: transient}
		c := dial(t, serveFake(t, store), runstore.WithoutRetry())
		if _, err := c.AppendRunRecord(testContext(t), sampleRecord()); !errors.Is(err, runstore.ErrTransient) || store.attempts() != 1 {
			t.Fatalf("%v after %d attempts", err, store.attempts())
		}
	})
	t.Run("caller's deadline before the asked delay", func(t *testing.T) {
		store := &fakeStore{always: refusal(codes.ResourceExhausted, "OVERLOADED", map[string]string{"permanent": "false"}, time.Hour)}
		seen := &refusals{}
		c := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithRefusalHook(seen.hook))
		ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
		defer cancel()
		_, err := c.AppendRunRecord(ctx, sampleRecord())
		if !errors.Is(err, runstore.ErrOverloaded) || store.attempts() != 1 || ctx.Err() != nil {
			t.Fatalf("%v after %d attempts", err, store.attempts())
		}
		if got := seen.decisions(); len(got) != 1 || got[0] != runstore.DeadlineReached {
			t.Fatalf("refusals: %v", got)
		}
	})
}

// A server-side DEADLINE_EXCEEDED (the attempt's WithCallTimeout ran out)
// is retried while the caller's context is alive.
func TestAttemptTimeoutRetried(t *testing.T) {
	store := &fakeStore{script: []func(context.Context) error{
		func(ctx context.Context) error { <-ctx.Done(); return status.FromContextError(ctx.Err()).Err() },
	}}
	seen := &refusals{}
	c := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithRefusalHook(seen.hook),
		runstore.WithCallTimeout(100*time.Millisecond))
	if _, err := c.AppendRunRecord(testContext(t), sampleRecord()); err != nil {
		t.Fatal(err)
	}
	if store.attempts() != 2 || seen.seen[0].Err.Code() != codes.DeadlineExceeded {
		t.Fatalf("%d attempts, refusals %+v", store.attempts(), seen.seen)
	}
}

// Cancelling the context while the client sleeps before a retry returns
// ctx.Err() at once, and no attempt follows.
func TestContextCancelledDuringRetry(t *testing.T) {
	store := &fakeStore{always: refusal(codes.Unavailable, "TRANSIENT", map[string]string{"permanent": "false"}, time.Hour)}
	ctx, cancel := context.WithCancel(t.Context()) // no deadline: the sleep is the hour asked for
	defer cancel()
	sleeping := make(chan struct{})
	policy := fast
	policy.Deadline = 0
	c := dial(t, serveFake(t, store), runstore.WithRetry(policy), runstore.WithRefusalHook(func(r runstore.Refusal) {
		if r.Decision == runstore.Retrying {
			close(sleeping)
		}
	}))
	go func() {
		<-sleeping
		cancel()
	}()
	began := time.Now()
	_, err := c.AppendRunRecord(ctx, sampleRecord())
	if !errors.Is(err, context.Canceled) || err != ctx.Err() {
		t.Fatalf("want ctx.Err(), got %v", err)
	}
	if elapsed := time.Since(began); elapsed > 5*time.Second || store.attempts() != 1 {
		t.Fatalf("returned after %s and %d attempts", elapsed, store.attempts())
	}
}

func TestTooLargeIsNeverSent(t *testing.T) {
	store := &fakeStore{}
	seen := &refusals{}
	c := dial(t, serveFake(t, store), runstore.WithMaxMessageBytes(1000), runstore.WithRefusalHook(seen.hook))
	record := sampleRecord()
	record.Payload = bytes.Repeat([]byte("x"), 2000)
	_, err := c.AppendRunRecord(testContext(t), record)
	var failure *runstore.Error
	if !errors.As(err, &failure) || failure.Code() != codes.ResourceExhausted || !failure.Permanent() || store.attempts() != 0 {
		t.Fatalf("%v after %d attempts", err, store.attempts())
	}
	if got := seen.decisions(); len(got) != 1 || got[0] != runstore.TooLarge {
		t.Fatalf("refusals: %v", got)
	}
}

func TestTokenAndNamespaceMetadata(t *testing.T) {
	store := &fakeStore{}
	target := serveFake(t, store)
	ctx := testContext(t)
	c := dial(t, target, runstore.WithToken("  secret-1\n"), runstore.WithNamespace("team-a"))
	ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", "mine")
	if _, err := c.AppendRunRecord(ctx, sampleRecord()); err != nil {
		t.Fatal(err)
	}
	md := store.metadata[0]
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer secret-1" {
		t.Fatalf("authorization %v", got)
	}
	if got := md.Get(runstore.NamespaceMetadataKey); len(got) != 1 || got[0] != "team-a" {
		t.Fatalf("namespace %v", got)
	}
	if got := md.Get("x-request-id"); len(got) != 1 || got[0] != "mine" {
		t.Fatalf("the caller's metadata was lost: %v", got)
	}

	// A token file is read again once it changes.
	path := filepath.Join(t.TempDir(), "worker.token")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := dial(t, target, runstore.WithTokenFile(path))
	if _, err := fromFile.AppendRunRecord(ctx, sampleRecord()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("rotated-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fromFile.AppendRunRecord(ctx, sampleRecord()); err != nil {
		t.Fatal(err)
	}
	if first, second := store.metadata[1].Get("authorization"), store.metadata[2].Get("authorization"); first[0] != "Bearer first" || second[0] != "Bearer rotated-token" {
		t.Fatalf("token file: %v then %v", first, second)
	}
}

func TestOptionsRefused(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.token")
	empty := filepath.Join(t.TempDir(), "empty.token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]runstore.Option{
		"no transport":       nil,
		"empty token":        {runstore.WithInsecure(), runstore.WithToken(" \n")},
		"control character":  {runstore.WithInsecure(), runstore.WithToken("a\x00b")},
		"missing token file": {runstore.WithInsecure(), runstore.WithTokenFile(missing)},
		"empty token file":   {runstore.WithInsecure(), runstore.WithTokenFile(empty)},
		"two tokens":         {runstore.WithInsecure(), runstore.WithToken("a"), runstore.WithTokenFile(empty)},
		"bad namespace":      {runstore.WithInsecure(), runstore.WithNamespace("Team_A")},
		"bad policy":         {runstore.WithInsecure(), runstore.WithRetry(runstore.RetryPolicy{})},
		"zero call timeout":  {runstore.WithInsecure(), runstore.WithCallTimeout(0)},
		"tls and insecure":   {runstore.WithInsecure(), runstore.WithTLS(nil)},
	}
	for name, opts := range cases {
		if c, err := runstore.Dial("127.0.0.1:1", opts...); err == nil {
			_ = c.Close()
			t.Errorf("%s: Dial accepted it", name)
		}
	}
	if _, err := runstore.New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

// A Watch whose stream breaks is reopened from the last cursor received.
func TestWatchResumesFromItsCursor(t *testing.T) {
	batch := func(key, cursor string) *runstorev1.WatchRunRecordsResponse {
		return &runstorev1.WatchRunRecordsResponse{Events: []*runstorev1.RunRecord{{Id: cursor, EventKey: key}}, NextCursor: cursor}
	}
	store := &fakeStore{streams: []func(string, func(*runstorev1.WatchRunRecordsResponse) error) error{
		func(_ string, send func(*runstorev1.WatchRunRecordsResponse) error) error {
			if err := send(batch("a", "1")); err != nil {
				return err
			}
			if err := send(&runstorev1.WatchRunRecordsResponse{NextCursor: "1"}); err != nil { // a heartbeat
				return err
			}
			return transient(context.Background())
		},
		func(_ string, send func(*runstorev1.WatchRunRecordsResponse) error) error {
			return send(batch("b", "2"))
		},
	}}
	seen := &refusals{}
	c := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithRefusalHook(seen.hook))
	watch := c.WatchRunRecords(testContext(t), "r", "")
	defer watch.Close()
	var keys []string
	for {
		page, err := watch.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		keys = append(keys, page.Records[0].EventKey)
	}
	if len(keys) != 2 || keys[1] != "b" || len(store.watches) != 2 || store.watches[0] != "" || store.watches[1] != "1" || watch.Cursor() != "2" {
		t.Fatalf("keys %v, opened at %q", keys, store.watches)
	}
	if got := seen.decisions(); len(got) != 1 || got[0] != runstore.Retrying {
		t.Fatalf("refusals: %v", got)
	}
}

// A stream that served longer than RetryPolicy.Deadline before it broke is
// still reopened: the deadline runs from the failure, not from Next's start.
func TestWatchDeadlineRunsFromTheFailure(t *testing.T) {
	const served = 150 * time.Millisecond
	store := &fakeStore{streams: []func(string, func(*runstorev1.WatchRunRecordsResponse) error) error{
		func(string, func(*runstorev1.WatchRunRecordsResponse) error) error {
			time.Sleep(served) // a stream that lived longer than the retry deadline
			return transient(context.Background())
		},
		func(_ string, send func(*runstorev1.WatchRunRecordsResponse) error) error {
			return send(&runstorev1.WatchRunRecordsResponse{Events: []*runstorev1.RunRecord{{Id: "1", EventKey: "a"}}, NextCursor: "1"})
		},
	}}
	policy := fast
	policy.Deadline = served / 3
	c := dial(t, serveFake(t, store), runstore.WithRetry(policy))
	watch := c.WatchRunRecords(testContext(t), "r", "")
	defer watch.Close()
	page, err := watch.Next()
	if err != nil || len(page.Records) != 1 || len(store.watches) != 2 {
		t.Fatalf("%+v %v after %d streams", page, err, len(store.watches))
	}
}

// No retry is silent: each is a warning on the client's logger.
func TestRetriesAreLogged(t *testing.T) {
	store := &fakeStore{script: []func(context.Context) error{transient}}
	var logged bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	c := dial(t, serveFake(t, store), runstore.WithRetry(fast), runstore.WithLogger(logger))
	if _, err := c.AppendRunRecord(testContext(t), sampleRecord()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	line := logged.String()
	for _, want := range []string{"level=WARN", "decision=retrying", "reason=TRANSIENT", "attempt=1", "method=/runstore.v1.RuntimeStore/AppendRunRecord"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the log lacks %q: %s", want, line)
		}
	}
}

type lockedWriter struct {
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}
