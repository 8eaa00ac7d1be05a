package runstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestCoalescedAppendsLive sends a message of carried appends to each live
// server (tests/go_servers.py), good and bad records mixed: each caller gets
// its own result or its own error, and every good record is stored.
func TestCoalescedAppendsLive(t *testing.T) {
	targets := map[string]string{
		"sqlite": os.Getenv("RUNSTORE_TEST_TARGET_SQLITE"), "postgres": os.Getenv("RUNSTORE_TEST_TARGET_POSTGRES"),
	}
	ran := false
	for name, target := range targets {
		if target == "" {
			continue
		}
		ran = true
		t.Run(name, func(t *testing.T) { coalescedAppendsLive(t, target) })
	}
	if !ran {
		t.Skip("no live server: run through `make test-go` (tests/go_servers.py)")
	}
}

func coalescedAppendsLive(t *testing.T, target string) {
	// The first two plain appends are held until the rest have queued behind them.
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{}
	hold := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		calls[method]++
		mu.Unlock()
		if method == "/runstore.v1.RuntimeStore/AppendRunRecord" {
			<-release
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c, err := Dial(target, WithInsecure(), WithoutRetry(), WithDialOptions(grpc.WithUnaryInterceptor(hold)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	suffix := fmt.Sprint(time.Now().UnixNano())
	session := "coalesce-" + suffix
	if _, err := c.CreateSession(ctx, session, time.Now().UTC().Truncate(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	run := RunStart{RunID: "run-" + suffix, AgentID: "agent", SessionID: session, StartedAt: at}
	rec := func(key, kind, payload string) Record {
		return Record{EventKey: key, RunID: run.RunID, AgentID: "agent", SessionID: session, Type: kind, Payload: []byte(payload), Timestamp: at}
	}
	if _, err := c.StartRootRun(ctx, run, rec("start", "run_started", "{}"),
		rec("stop", "run_completed", `{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"}}`)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		key string
		res AppendResult
		err error
	}
	results := make(chan result, 12)
	appendOne := func(r Record) {
		res, err := c.AppendRunRecord(ctx, r)
		results <- result{r.EventKey, res, err}
	}
	for i := range 2 {
		go appendOne(rec(fmt.Sprint("held", i), "tool_call_scheduled", "{}"))
	}
	waitFor(t, "two held calls", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["/runstore.v1.RuntimeStore/AppendRunRecord"] == 2
	})
	for i := range 10 {
		r := rec(fmt.Sprint("k", i), "tool_call_scheduled", "{}")
		if i%3 == 1 { // another run's: refused on its own
			r.RunID = "missing-" + suffix
		}
		go appendOne(r)
		waitFor(t, "queued", func() bool { return c.coalescer.queued() == i+1 })
	}
	close(release)
	ids := map[string]bool{}
	for range 12 {
		got := <-results
		var i int
		_, scanErr := fmt.Sscanf(got.key, "k%d", &i)
		if scanErr == nil && i%3 == 1 {
			if !errors.Is(got.err, ErrRunNotFound) {
				t.Fatalf("%s: want its own RUN_NOT_FOUND, got %v", got.key, got.err)
			}
			continue
		}
		if got.err != nil || !got.res.Inserted || ids[got.res.ID] {
			t.Fatalf("%s: a neighbour's error is not its own: %+v %v", got.key, got.res, got.err)
		}
		ids[got.res.ID] = true
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["/runstore.v1.RuntimeStore/AppendRunRecordCalls"] == 0 {
		t.Fatalf("no AppendRunRecordCalls message: %v", calls)
	}
}
