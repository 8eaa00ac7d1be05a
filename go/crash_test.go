package runstore_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	runstore "github.com/runstore/runstore/go"
)

// ownServer is a `runstore serve` process of the test's own (SQLite), which
// the test may kill and start again on the same port and file.
type ownServer struct {
	t        *testing.T
	binary   string
	target   string
	database string
	command  *exec.Cmd
	args     []string
	log      *strings.Builder
	logMu    sync.Mutex
}

func newOwnServer(t *testing.T) *ownServer {
	t.Helper()
	binary := os.Getenv("RUNSTORE_TEST_SERVER_BINARY")
	if binary == "" {
		t.Skip("RUNSTORE_TEST_SERVER_BINARY names no runstore executable: run through `make test-go`")
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := listener.Addr().String()
	_ = listener.Close()
	server := &ownServer{t: t, binary: binary, target: target, database: filepath.Join(t.TempDir(), "crash.db"), log: &strings.Builder{}}
	t.Cleanup(func() {
		server.kill()
		if t.Failed() {
			server.logMu.Lock()
			t.Logf("server log:\n%s", server.log.String())
			server.logMu.Unlock()
		}
	})
	return server
}

// start runs the server and returns once it logged that it serves.
func (s *ownServer) start() {
	s.t.Helper()
	command := exec.Command(s.binary, append([]string{"serve", "--listen", s.target, "--database-url", "sqlite:///" + s.database}, s.args...)...)
	stderr, err := command.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := command.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.command = command
	serving := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(stderr)
		announced := false
		for scanner.Scan() {
			s.logMu.Lock()
			fmt.Fprintln(s.log, scanner.Text())
			s.logMu.Unlock()
			if !announced && strings.Contains(scanner.Text(), "serving on") {
				announced = true
				close(serving)
			}
		}
		if !announced {
			close(serving)
		}
	}()
	select {
	case <-serving:
	case <-time.After(60 * time.Second):
		s.t.Fatal("the server did not start serving within 60 s")
	}
	if command.ProcessState != nil {
		s.t.Fatal("the server exited before serving")
	}
}

// kill ends the server with SIGKILL: nothing of it runs afterwards.
func (s *ownServer) kill() {
	if s.command == nil {
		return
	}
	_ = s.command.Process.Kill()
	_ = s.command.Wait()
	s.command = nil
}

// TestServerKilledMidFlight: writers append records while the server is
// killed (SIGKILL) and started again. Every call succeeds through retries;
// every acknowledged record is stored with the ID acknowledged, and no record
// is stored twice.
func TestServerKilledMidFlight(t *testing.T) {
	server := newOwnServer(t)
	server.start()
	var retries atomic.Int64
	c := dial(t, server.target,
		runstore.WithRetry(runstore.RetryPolicy{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2, Deadline: 90 * time.Second}),
		runstore.WithCallTimeout(10*time.Second),
		runstore.WithRefusalHook(func(r runstore.Refusal) {
			if r.Decision == runstore.Retrying {
				retries.Add(1)
			}
		}),
		// Reconnect quickly once the server is back (gRPC's default waits up to 120 s).
		runstore.WithDialOptions(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		})))
	ctx := testContext(t)
	sessionID := uid("session")
	ok(c.CreateSession(ctx, sessionID, now()))(t)
	w := newWorker(sessionID, uid("run"), "chat")
	ok(c.StartRootRun(ctx, w.run, w.started(), w.canceled()))(t)

	const writers, perWriter = 4, 40
	acknowledged := sync.Map{} // event key -> record ID
	var acks atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	errs := make(chan error, writers)
	var done sync.WaitGroup
	for writer := range writers {
		done.Add(1)
		go func() {
			defer done.Done()
			for n := range perWriter {
				record := w.record(fmt.Sprintf("w%d-%d", writer, n), "tool_call_scheduled", fmt.Sprintf(`{"w":%d,"n":%d}`, writer, n))
				result, err := c.AppendRunRecord(ctx, record)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", record.EventKey, err)
					return
				}
				acknowledged.Store(record.EventKey, result.ID)
				if acks.Add(1) == writers*4 {
					once.Do(func() { close(enough) })
				}
			}
		}()
	}
	<-enough // writers are mid-stream: kill the server under them
	server.kill()
	server.start()
	done.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call failed across the restart: %v", err)
	}
	if retries.Load() == 0 {
		t.Fatal("no call was retried: the kill did not land mid-flight")
	}

	stored := map[string]string{}
	cursor := ""
	for {
		page := ok(c.ListRunRecords(ctx, w.run.RunID, cursor, 1000))(t)
		for _, r := range page.Records {
			if _, twice := stored[r.EventKey]; twice {
				t.Fatalf("%s stored twice", r.EventKey)
			}
			stored[r.EventKey] = r.ID
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(stored) != 1+writers*perWriter {
		t.Fatalf("%d records stored, want %d", len(stored), 1+writers*perWriter)
	}
	acknowledged.Range(func(key, id any) bool {
		if stored[key.(string)] != id.(string) {
			t.Errorf("%s acknowledged as %s, stored as %q", key, id, stored[key.(string)])
		}
		return true
	})
	t.Logf("%d retries across the restart", retries.Load())
}
