package runstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	runstore "github.com/runstore/runstore/go"
)

// backend is a live server started by tests/go_servers.py (make test-go).
type backend struct {
	name   string
	target string
}

// forEachBackend runs test as a subtest against every live server of this
// run. It skips when none was started (go test outside make test-go) and
// fails when PostgreSQL is mandatory (CI sets RUNSTORE_REQUIRE_POSTGRES) but
// its server is missing.
func forEachBackend(t *testing.T, test func(t *testing.T, target string)) {
	t.Helper()
	var found []backend
	for _, b := range []backend{
		{"sqlite", os.Getenv("RUNSTORE_TEST_TARGET_SQLITE")},
		{"postgres", os.Getenv("RUNSTORE_TEST_TARGET_POSTGRES")},
	} {
		switch {
		case b.target != "":
			found = append(found, b)
		case b.name == "postgres" && os.Getenv("RUNSTORE_REQUIRE_POSTGRES") != "" && os.Getenv("RUNSTORE_REQUIRE_POSTGRES") != "0":
			t.Fatal("RUNSTORE_REQUIRE_POSTGRES is set but RUNSTORE_TEST_TARGET_POSTGRES is not")
		}
	}
	if len(found) == 0 {
		t.Skip("no live server: run through `make test-go` (tests/go_servers.py)")
	}
	for _, b := range found {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b.target)
		})
	}
}

// dial connects in plaintext; the client's log goes to the test's log.
func dial(t *testing.T, target string, opts ...runstore.Option) *runstore.Client {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := runstore.Dial(target, append([]runstore.Option{runstore.WithInsecure(), runstore.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// uid is a fresh ID: the servers are shared by every test of the run.
func uid(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// now is the current time in whole milliseconds, as records need.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// worker builds the records of one run as a goa-ai worker would.
type worker struct {
	run   runstore.RunStart
	count int
}

func newWorker(sessionID, runID, agentID string) *worker {
	return &worker{run: runstore.RunStart{RunID: runID, AgentID: agentID, SessionID: sessionID, StartedAt: now()}}
}

func (w *worker) record(key, recordType, payload string) runstore.Record {
	at := now()
	if recordType == "run_started" {
		at = w.run.StartedAt
	}
	return runstore.Record{
		EventKey: key, RunID: w.run.RunID, AgentID: w.run.AgentID, SessionID: w.run.SessionID,
		Type: recordType, Payload: []byte(payload), Timestamp: at,
	}
}

func (w *worker) started() runstore.Record {
	payload := "{}"
	if w.run.ParentRunID != "" {
		payload = `{"parent_run_id":"` + w.run.ParentRunID + `"}`
	}
	return w.record("start", "run_started", payload)
}

// canceled is the record a start stores when the session has ended; it is
// stamped with the run's start time.
func (w *worker) canceled() runstore.Record {
	record := w.record("stop", "run_completed",
		`{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"}}`)
	record.Timestamp = w.run.StartedAt
	return record
}

func (w *worker) completed() runstore.Record {
	return w.record("done", "run_completed", `{"status":"success","phase":"completed"}`)
}

// linked is the child_run_linked record the parent run owns.
func (w *worker) linked(child *worker, toolCallID string) runstore.Record {
	return w.record("link-"+child.run.RunID, "child_run_linked",
		`{"ToolName":"weather.lookup","ToolCallID":"`+toolCallID+`","ChildRunID":"`+child.run.RunID+`","ChildAgentID":"`+child.run.AgentID+`"}`)
}

func (w *worker) ordinary() runstore.Record {
	w.count++
	return w.record("step-"+strconv.Itoa(w.count), "tool_call_scheduled", `{"n":`+strconv.Itoa(w.count)+`}`)
}

// ok(call())(t) is call's value, or the test's end with its error.
func ok[T any](value T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return value
	}
}

func contextWithExpiredDeadline(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, time.Now().Add(-time.Second))
}
