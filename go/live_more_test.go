package runstore_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
	runstore "github.com/runstore/runstore/go"
)

// TestPaging walks a run's and a session's records page by page, passing the
// cursors back unchanged, and a transcript by its record IDs.
func TestPaging(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		sessionID := uid("session")
		ok(c.CreateSession(ctx, sessionID, now()))(t)
		w := newWorker(sessionID, uid("run"), "chat")
		ok(c.StartRootRun(ctx, w.run, w.started(), w.canceled()))(t)
		var want []string
		for range 24 {
			record := w.ordinary()
			if len(want)%3 == 0 {
				record.Type = "transcript_messages_appended"
			}
			want = append(want, record.EventKey)
			ok(c.AppendRunRecord(ctx, record))(t)
		}
		want = append([]string{"start"}, want...)

		var got []string
		var sizes []int
		cursor := ""
		for {
			page := ok(c.ListRunRecords(ctx, w.run.RunID, cursor, 10))(t)
			sizes = append(sizes, len(page.Records))
			for _, r := range page.Records {
				got = append(got, r.EventKey)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if !slices.Equal(got, want) || !slices.Equal(sizes, []int{10, 10, 5}) {
			t.Fatalf("run pages %v: %v", sizes, got)
		}

		var sessionKeys []string
		cursor = ""
		for {
			page := ok(c.ListSessionRunRecords(ctx, sessionID, cursor, 7))(t)
			for _, r := range page.Records {
				sessionKeys = append(sessionKeys, r.EventKey)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if !slices.Equal(sessionKeys, want) {
			t.Fatalf("session pages: %v", sessionKeys)
		}
		_, err := c.ListSessionRunRecords(ctx, sessionID, "not-a-cursor", 7)
		expectReason(t, err, runstore.ErrInvalidArgumentRead, runstore.ErrInvalidArgument, codes.InvalidArgument)

		var transcript []string
		after := ""
		for {
			page := ok(c.ListRunTranscriptRecords(ctx, w.run.RunID, "25", after, 3))(t)
			for _, r := range page.Records {
				transcript = append(transcript, r.EventKey)
			}
			if page.NextCursor == "" {
				break
			}
			after = page.NextCursor
		}
		if len(transcript) != 8 || transcript[0] != "step-1" || transcript[7] != "step-22" {
			t.Fatalf("transcript: %v", transcript)
		}

		sessions := map[string]bool{}
		token := ""
		for {
			page := ok(c.ListSessions(ctx, &runstorev1.ListSessionsRequest{PageSize: 2, PageToken: token}))(t)
			for _, s := range page.GetSessions() {
				sessions[s.GetId()] = true
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		if !sessions[sessionID] {
			t.Fatal("ListSessions pages: the session is missing")
		}
	})
}

// TestConcurrentStarts: identical starts released together store the run
// once (one Inserted); differing starts of one run ID leave one winner and
// ErrRunConflict for the rest.
func TestConcurrentStarts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		sessionID := uid("session")
		ok(c.CreateSession(ctx, sessionID, now()))(t)
		const callers = 8

		race := func(start func(i int) (runstore.StartResult, error)) ([]runstore.StartResult, []error) {
			results := make([]runstore.StartResult, callers)
			errs := make([]error, callers)
			gate := make(chan struct{})
			var done sync.WaitGroup
			for i := range callers {
				done.Add(1)
				go func() {
					defer done.Done()
					<-gate
					results[i], errs[i] = start(i)
				}()
			}
			close(gate)
			done.Wait()
			return results, errs
		}

		same := newWorker(sessionID, uid("same"), "chat")
		started, canceled := same.started(), same.canceled()
		results, errs := race(func(int) (runstore.StartResult, error) {
			return c.StartRootRun(ctx, same.run, started, canceled)
		})
		inserted := 0
		for i, result := range results {
			if errs[i] != nil {
				t.Fatalf("identical start %d: %v", i, errs[i])
			}
			if result.Outcome != proceed || result.Started.ID != "1" {
				t.Fatalf("identical start %d: %+v", i, result)
			}
			if result.Started.Inserted {
				inserted++
			}
		}
		if inserted != 1 {
			t.Fatalf("identical starts: %d inserted, want 1", inserted)
		}

		runID := uid("contested")
		results, errs = race(func(i int) (runstore.StartResult, error) {
			w := newWorker(sessionID, runID, "agent-"+strconv.Itoa(i))
			return c.StartRootRun(ctx, w.run, w.started(), w.canceled())
		})
		winners := 0
		for i, err := range errs {
			switch {
			case err == nil && results[i].Started.Inserted:
				winners++
			case errors.Is(err, runstore.ErrRunConflict):
			default:
				t.Fatalf("differing start %d: %+v %v", i, results[i], err)
			}
		}
		meta := ok(c.LoadRun(ctx, runID))(t)
		if winners != 1 || len(ok(c.ListRunRecords(ctx, runID, "", 100))(t).Records) != 1 {
			t.Fatalf("differing starts: %d winners; stored %+v", winners, meta)
		}
	})
}

// TestMemoryAndContext calls every MemoryStore and ContextStore method.
func TestMemoryAndContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		seen := &refusals{}
		c := dial(t, target, runstore.WithRefusalHook(seen.hook))
		runID := uid("memory")
		at := timestamppb.New(now())
		events := []*runstorev1.MemoryEvent{
			{Type: "user_message", Timestamp: at, Data: []byte(`{"text":"hi"}`)},
			{Type: "planner_note", Timestamp: at, Data: []byte(`{"note":"check"}`), Labels: map[string]string{"k": "v"}},
		}
		appended := ok(c.MemoryAppendEvents(ctx, &runstorev1.AppendEventsRequest{AgentId: "chat", RunId: runID, Events: events, IdempotencyKey: "step-1"}))(t)
		again := ok(c.MemoryAppendEvents(ctx, &runstorev1.AppendEventsRequest{AgentId: "chat", RunId: runID, Events: events, IdempotencyKey: "step-1"}))(t)
		if appended.GetCount() != 2 || !appended.GetInserted() || again.GetInserted() {
			t.Fatalf("AppendEvents: %v then %v", appended, again)
		}
		_, err := c.MemoryAppendEvents(ctx, &runstorev1.AppendEventsRequest{AgentId: "chat", RunId: runID, Events: events[:1], IdempotencyKey: "step-1"})
		expectReason(t, err, runstore.ErrIdempotencyConflict, runstore.ErrConflict, codes.AlreadyExists)
		loaded := ok(c.MemoryLoadRun(ctx, &runstorev1.MemoryLoadRunRequest{AgentId: "chat", RunId: runID, Limit: 1}))(t)
		if len(loaded.GetEvents()) != 1 || loaded.GetNextCursor() == "" || string(loaded.GetEvents()[0].GetData()) != `{"text":"hi"}` {
			t.Fatalf("MemoryLoadRun: %v", loaded)
		}
		if deleted := ok(c.MemoryDeleteRun(ctx, &runstorev1.MemoryDeleteRunRequest{AgentId: "chat", RunId: runID}))(t); !deleted.GetDeleted() {
			t.Fatal("MemoryDeleteRun: nothing deleted")
		}

		key := uid("conversation")
		snapshot := &runstorev1.ContextSnapshot{SystemPrompt: "Be concise.", Messages: []*runstorev1.ContextMessage{{
			Type:    "user",
			Content: []*runstorev1.ContentBlock{{Type: "text", Block: &runstorev1.ContentBlock_Text{Text: &runstorev1.TextBlock{Text: "Hello"}}}},
		}}}
		saved := ok(c.SaveContext(ctx, &runstorev1.SaveContextRequest{Key: key, Snapshot: snapshot}))(t)
		got := ok(c.GetContext(ctx, &runstorev1.GetContextRequest{Key: key}))(t)
		if saved.GetVersion() != 1 || got.GetSnapshot().GetMessages()[0].GetContent()[0].GetText().GetText() != "Hello" {
			t.Fatalf("SaveContext %v, GetContext %v", saved, got)
		}
		before := len(seen.decisions())
		_, err = c.SaveContext(ctx, &runstorev1.SaveContextRequest{Key: key, Snapshot: snapshot, ExpectedVersion: 7})
		failure := expectReason(t, err, runstore.ErrContextVersionConflict, runstore.ErrConflict, codes.Aborted)
		if failure.Metadata()["current_version"] != "1" || len(seen.decisions()) != before+1 {
			t.Fatalf("a stale save: %v, %d refusals", failure.Metadata(), len(seen.decisions())-before)
		}
		_, err = c.GetContext(ctx, &runstorev1.GetContextRequest{Key: uid("missing")})
		expectReason(t, err, runstore.ErrContextNotFound, runstore.ErrNotFound, codes.NotFound)

		messages := []*runstorev1.ContextMessage{{Type: "assistant", Content: []*runstorev1.ContentBlock{
			{Type: "text", Block: &runstorev1.ContentBlock_Text{Text: &runstorev1.TextBlock{Text: "one"}}},
		}}}
		transcript := ok(c.AppendTranscript(ctx, &runstorev1.AppendTranscriptRequest{Key: key, Messages: messages, IdempotencyKey: "t-1"}))(t)
		listed := ok(c.ListTranscript(ctx, &runstorev1.ListTranscriptRequest{Key: key, Limit: 10}))(t)
		if !transcript.GetInserted() || len(listed.GetMessages()) != 1 {
			t.Fatalf("AppendTranscript %v, ListTranscript %v", transcript, listed)
		}
		if deleted := ok(c.DeleteContext(ctx, &runstorev1.DeleteContextRequest{Key: key}))(t); !deleted.GetDeleted() {
			t.Fatal("DeleteContext: nothing deleted")
		}
	})
}

// TestCallTimeoutAgainstALiveServer: a live server answers within the
// attempt's timeout; a caller's expired context is returned as ctx.Err().
func TestCallerDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		c := dial(t, target, runstore.WithCallTimeout(5*time.Second))
		ctx := testContext(t)
		if _, err := c.LoadSessionStatus(ctx, uid("none")); !errors.Is(err, runstore.ErrSessionNotFound) {
			t.Fatal(err)
		}
		expired, cancel := contextWithExpiredDeadline(ctx)
		defer cancel()
		if _, err := c.LoadRun(expired, "x"); !errors.Is(err, expired.Err()) {
			t.Fatalf("want %v, got %v", expired.Err(), err)
		}
	})
}

// TestNewOverAConnection: New wraps a connection the caller made (and
// closes); the generated stubs of the rest share it through Conn.
func TestNewOverAConnection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := runstore.New(conn, runstore.WithInsecure()); err == nil {
			t.Fatal("New took a transport option")
		}
		c, err := runstore.New(conn, runstore.WithNamespace("default"))
		if err != nil {
			t.Fatal(err)
		}
		ctx := testContext(t)
		if _, err := c.LoadSessionStatus(ctx, uid("none")); !errors.Is(err, runstore.ErrSessionNotFound) {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		namespaces := ok(runstorev1.NewNamespaceAdminClient(c.Conn()).ListNamespaces(ctx, &runstorev1.ListNamespacesRequest{}))(t)
		if len(namespaces.GetNamespaces()) == 0 {
			t.Fatal("ListNamespaces over the same connection: none")
		}
	})
}
