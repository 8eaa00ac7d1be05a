package runstore_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
	runstore "github.com/runstore/runstore/go"
)

const (
	proceed   = runstorev1.RunStartOutcome_RUN_START_OUTCOME_PROCEED
	stop      = runstorev1.RunStartOutcome_RUN_START_OUTCOME_STOP
	active    = runstorev1.SessionStatus_SESSION_STATUS_ACTIVE
	ended     = runstorev1.SessionStatus_SESSION_STATUS_ENDED
	running   = runstorev1.RunStatus_RUN_STATUS_RUNNING
	suspended = runstorev1.RunStatus_RUN_STATUS_SUSPENDED
	completed = runstorev1.RunStatus_RUN_STATUS_COMPLETED
	canceledS = runstorev1.RunStatus_RUN_STATUS_CANCELED
)

// TestSessionLifecycle calls every RuntimeStore and SessionAdmin method on a
// session's life: create, root and child runs, records, cancellation,
// suspension, repairs, reads, watches, end, purge.
func TestSessionLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		sessionID := uid("session")

		session := ok(c.CreateSession(ctx, sessionID, now()))(t)
		if session.ID != sessionID || session.Status != active || !session.EndedAt.IsZero() {
			t.Fatalf("CreateSession: %+v", session)
		}
		if loaded := ok(c.LoadSession(ctx, sessionID))(t); loaded.CreatedAt != session.CreatedAt {
			t.Fatalf("LoadSession: %+v, created %+v", loaded, session)
		}
		if status := ok(c.LoadSessionStatus(ctx, sessionID))(t); status != active {
			t.Fatalf("LoadSessionStatus: %s", status)
		}

		root := newWorker(sessionID, uid("root"), "chat")
		root.run.Labels = map[string]string{"team": "support"}
		started := root.record("start", "run_started", `{"labels":{"team":"support"}}`)
		canceled := root.record("stop", "run_completed",
			`{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"},"labels":{"team":"support"}}`)
		canceled.Timestamp = root.run.StartedAt
		start := ok(c.StartRootRun(ctx, root.run, started, canceled))(t)
		if start.Outcome != proceed || !start.Started.Inserted || start.Started.ID != "1" || start.Canceled != (runstore.AppendResult{}) {
			t.Fatalf("StartRootRun: %+v", start)
		}

		// Ordinary records, one and a batch; payload bytes come back as sent.
		step := root.ordinary()
		step.Payload = []byte("{\"text\":\"caf\xc3\xa9 <&>\"}")
		appended := ok(c.AppendRunRecord(ctx, step))(t)
		if !appended.Inserted || appended.SessionStatus != active {
			t.Fatalf("AppendRunRecord: %+v", appended)
		}
		batch := []runstore.Record{root.ordinary(), root.ordinary(), root.ordinary()}
		results := ok(c.AppendRunRecords(ctx, batch))(t)
		if len(results) != 3 || !results[0].Inserted || results[2].ID != "5" {
			t.Fatalf("AppendRunRecords: %+v", results)
		}

		// A child run, linked from the root, canceled on request.
		child := newWorker(sessionID, uid("child"), "weather")
		child.run.ParentRunID = root.run.RunID
		linked := root.linked(child, "call-1")
		childStart := ok(c.StartChildRun(ctx, child.run, linked, child.started(), child.canceled()))(t)
		if childStart.Outcome != proceed || !childStart.ParentRecord.Inserted || !childStart.Started.Inserted {
			t.Fatalf("StartChildRun: %+v", childStart)
		}
		intent := child.record("cancel", "runtime.cancellation_intent", `{"reason":"user_requested"}`)
		if result := ok(c.RecordRunCancellation(ctx, child.run.RunID, "user_requested", intent))(t); !result.Inserted {
			t.Fatalf("RecordRunCancellation: %+v", result)
		}
		childEnd := child.record("done", "run_completed",
			`{"status":"canceled","phase":"canceled","cancellation":{"reason":"user_requested"}}`)
		if result := ok(c.RecordRunTerminal(ctx, child.run.RunID, canceledS, childEnd))(t); !result.Inserted {
			t.Fatalf("RecordRunTerminal: %+v", result)
		}
		meta := ok(c.LoadRun(ctx, child.run.RunID))(t)
		if meta.Status != canceledS || meta.CancellationReason != "user_requested" || meta.ParentRunID != root.run.RunID ||
			!meta.StartedAt.Equal(child.run.StartedAt) || meta.UpdatedAt.IsZero() {
			t.Fatalf("LoadRun(child): %+v", meta)
		}

		// Transcript records, read back through a fixed end.
		seeded := root.record("seed", "transcript_messages_seeded", `{"messages":[]}`)
		seededResult := ok(c.AppendRunRecord(ctx, seeded))(t)
		firstPage := ok(c.ListRunTranscriptRecords(ctx, root.run.RunID, seededResult.ID, "", 10))(t)
		if len(firstPage.Records) != 1 || firstPage.Records[0].EventKey != "seed" || firstPage.NextCursor != "" {
			t.Fatalf("ListRunTranscriptRecords: %+v", firstPage)
		}

		// The root suspends; its checkpoint comes back byte for byte.
		checkpoint := runstore.Checkpoint{ID: "await-user-1", Data: []byte{0, 1, 2, 255}}
		suspendedRecord := root.record("suspend", "run_suspended",
			`{"SuspensionID":"await-user-1","Version":"1","PendingCount":1,"RequiredTools":["ask_user"]}`)
		if result := ok(c.RecordRunSuspension(ctx, root.run.RunID, checkpoint, suspendedRecord))(t); !result.Inserted {
			t.Fatalf("RecordRunSuspension: %+v", result)
		}
		if loaded := ok(c.LoadRunSuspension(ctx, root.run.RunID))(t); loaded.ID != checkpoint.ID || !bytes.Equal(loaded.Data, checkpoint.Data) {
			t.Fatalf("LoadRunSuspension: %+v", loaded)
		}

		// Repairs: one run ended by RepairRunTerminal, one suspended by RepairRunSuspension.
		repaired := newWorker(sessionID, uid("repaired"), "chat")
		ok(c.StartRootRun(ctx, repaired.run, repaired.started(), repaired.canceled()))(t)
		repair := ok(c.RepairRunTerminal(ctx, repaired.run.RunID, completed, repaired.completed()))(t)
		if repair.Outcome != runstorev1.RunRepairOutcome_RUN_REPAIR_OUTCOME_STORED || repair.Status != completed || !repair.Record.Inserted {
			t.Fatalf("RepairRunTerminal: %+v", repair)
		}
		parked := newWorker(sessionID, uid("parked"), "chat")
		ok(c.StartRootRun(ctx, parked.run, parked.started(), parked.canceled()))(t)
		parkedRecord := parked.record("suspend", "run_suspended",
			`{"SuspensionID":"cp","Version":"","PendingCount":0,"RequiredTools":null}`)
		repairSuspension := ok(c.RepairRunSuspension(ctx, parked.run.RunID, runstore.Checkpoint{ID: "cp", Data: []byte("x")}, parkedRecord))(t)
		if repairSuspension.Outcome != runstorev1.RunRepairOutcome_RUN_REPAIR_OUTCOME_STORED || repairSuspension.Status != suspended {
			t.Fatalf("RepairRunSuspension: %+v", repairSuspension)
		}

		// Reads: the root's records in run order, the session's in commit order.
		page := ok(c.ListRunRecords(ctx, root.run.RunID, "", 100))(t)
		wantKeys := []string{"start", "step-1", "step-2", "step-3", "step-4", "link-" + child.run.RunID, "seed", "suspend"}
		if len(page.Records) != len(wantKeys) || page.NextCursor != "" {
			t.Fatalf("ListRunRecords: %d records, cursor %q", len(page.Records), page.NextCursor)
		}
		for i, key := range wantKeys {
			if page.Records[i].EventKey != key {
				t.Fatalf("ListRunRecords[%d] = %q, want %q", i, page.Records[i].EventKey, key)
			}
		}
		if got := page.Records[1]; !bytes.Equal(got.Payload, step.Payload) || !got.Timestamp.Equal(step.Timestamp) || got.SessionID != sessionID {
			t.Fatalf("record not returned as sent: %+v", got)
		}
		sessionPage := ok(c.ListSessionRunRecords(ctx, sessionID, "", 1000))(t)
		if len(sessionPage.Records) != len(wantKeys)+3+2+2 {
			t.Fatalf("ListSessionRunRecords: %d records", len(sessionPage.Records))
		}

		// Watches: a run's stream ends after its terminal record.
		watch := c.WatchRunRecords(ctx, child.run.RunID, "")
		var watched []string
		for {
			batch, err := watch.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("WatchRunRecords: %v", err)
			}
			for _, r := range batch.Records {
				watched = append(watched, r.EventKey)
			}
		}
		if len(watched) != 3 || watched[2] != "done" {
			t.Fatalf("WatchRunRecords: %v", watched)
		}
		// A session's stream resumes after a cursor of ListSessionRunRecords.
		middle := ok(c.ListSessionRunRecords(ctx, sessionID, "", len(sessionPage.Records)-1))(t)
		sessionWatch := c.WatchSessionRunRecords(ctx, sessionID, middle.NextCursor)
		rest := ok(sessionWatch.Next())(t)
		sessionWatch.Close()
		last := sessionPage.Records[len(sessionPage.Records)-1]
		if len(rest.Records) != 1 || rest.Records[0].EventKey != last.EventKey || rest.Records[0].RunID != last.RunID ||
			sessionWatch.Cursor() != rest.NextCursor {
			t.Fatalf("WatchSessionRunRecords: %+v", rest)
		}

		// Admin listings.
		runs := ok(c.ListRunsBySession(ctx, sessionID))(t)
		if len(runs) != 4 {
			t.Fatalf("ListRunsBySession: %d runs", len(runs))
		}
		suspendedRuns := ok(c.ListRunsBySession(ctx, sessionID, suspended))(t)
		if len(suspendedRuns) != 2 {
			t.Fatalf("ListRunsBySession(suspended): %d runs", len(suspendedRuns))
		}
		listed := ok(c.ListRuns(ctx, &runstorev1.ListRunsRequest{SessionId: sessionID, PageSize: 2}))(t)
		if len(listed.GetRuns()) != 2 || listed.GetNextPageToken() == "" {
			t.Fatalf("ListRuns: %d runs, token %q", len(listed.GetRuns()), listed.GetNextPageToken())
		}
		sessions := ok(c.ListSessions(ctx, &runstorev1.ListSessionsRequest{
			CreatedAfter: timestamppb.New(session.CreatedAt.Add(-time.Millisecond)), PageSize: 1000,
		}))(t)
		if !containsSession(sessions.GetSessions(), sessionID) {
			t.Fatalf("ListSessions: %s missing", sessionID)
		}

		// End: a new start in the ended session stops with its canceled record.
		if endedSession := ok(c.EndSession(ctx, sessionID, now()))(t); endedSession.Status != ended || endedSession.EndedAt.IsZero() {
			t.Fatalf("EndSession: %+v", endedSession)
		}
		late := newWorker(sessionID, uid("late"), "chat")
		lateStart := ok(c.StartRootRun(ctx, late.run, late.started(), late.canceled()))(t)
		if lateStart.Outcome != stop || !lateStart.Canceled.Inserted || lateStart.Canceled.SessionStatus != ended {
			t.Fatalf("StartRootRun in an ended session: %+v", lateStart)
		}
		_, err := c.AppendRunRecord(ctx, late.ordinary())
		expectReason(t, err, runstore.ErrRunNotActive, runstore.ErrFailedPrecondition, codes.FailedPrecondition)

		// Purge: the session becomes a tombstone.
		if err := c.PurgeSession(ctx, sessionID); err != nil {
			t.Fatalf("PurgeSession: %v", err)
		}
		_, err = c.LoadSession(ctx, sessionID)
		expectReason(t, err, runstore.ErrSessionPurged, runstore.ErrFailedPrecondition, codes.FailedPrecondition)
		purged := ok(c.PurgeEndedSessions(ctx, &runstorev1.PurgeEndedSessionsRequest{
			EndedBefore: timestamppb.New(time.Unix(0, 0)), Limit: 10,
		}))(t)
		if len(purged.GetPurgedSessionIds()) != 0 {
			t.Fatalf("PurgeEndedSessions before 1970: %v", purged.GetPurgedSessionIds())
		}
		purgedRuns := ok(c.PurgeSessionlessRuns(ctx, &runstorev1.PurgeSessionlessRunsRequest{
			FinishedBefore: timestamppb.New(time.Unix(0, 0)), Limit: 10,
		}))(t)
		if len(purgedRuns.GetPurgedRunIds()) != 0 {
			t.Fatalf("PurgeSessionlessRuns before 1970: %v", purgedRuns.GetPurgedRunIds())
		}
	})
}

// TestOneShotRuns starts a sessionless run and its child.
func TestOneShotRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		parent := newWorker("", uid("oneshot"), "batch")
		result := ok(c.StartOneShotRun(ctx, parent.run, parent.started()))(t)
		if !result.Inserted || result.SessionStatus != runstorev1.SessionStatus_SESSION_STATUS_UNSPECIFIED {
			t.Fatalf("StartOneShotRun: %+v", result)
		}
		child := newWorker("", uid("oneshot-child"), "helper")
		child.run.ParentRunID = parent.run.RunID
		childStart := ok(c.StartOneShotChildRun(ctx, child.run, parent.linked(child, "call-9"), child.started()))(t)
		if !childStart.ParentRecord.Inserted || !childStart.Started.Inserted {
			t.Fatalf("StartOneShotChildRun: %+v", childStart)
		}
		meta := ok(c.LoadRun(ctx, child.run.RunID))(t)
		if meta.SessionID != "" || meta.ParentRunID != parent.run.RunID || meta.Status != running {
			t.Fatalf("LoadRun: %+v", meta)
		}
	})
}

// TestExactAndChangedRetries: resending a command answers the original result
// (Inserted false); changing it answers the conflict's sentinel.
func TestExactAndChangedRetries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		sessionID := uid("session")
		ok(c.CreateSession(ctx, sessionID, now()))(t)
		w := newWorker(sessionID, uid("run"), "chat")
		started, canceled := w.started(), w.canceled()
		first := ok(c.StartRootRun(ctx, w.run, started, canceled))(t)
		again := ok(c.StartRootRun(ctx, w.run, started, canceled))(t)
		if again.Outcome != first.Outcome || again.Started.ID != first.Started.ID || again.Started.Inserted {
			t.Fatalf("exact start retry: %+v after %+v", again, first)
		}
		other := *w
		other.run.AgentID = "someone-else"
		_, err := c.StartRootRun(ctx, other.run, other.started(), other.canceled())
		expectReason(t, err, runstore.ErrRunConflict, runstore.ErrConflict, codes.AlreadyExists)

		record := w.ordinary()
		stored := ok(c.AppendRunRecord(ctx, record))(t)
		retried := ok(c.AppendRunRecord(ctx, record))(t)
		if retried.ID != stored.ID || retried.Inserted || !stored.Inserted {
			t.Fatalf("exact append retry: %+v after %+v", retried, stored)
		}
		changed := record
		changed.Payload = []byte(`{"n":"changed"}`)
		_, err = c.AppendRunRecord(ctx, changed)
		failure := expectReason(t, err, runstore.ErrEventConflict, runstore.ErrConflict, codes.AlreadyExists)
		if failure.Metadata()["event_key"] != record.EventKey || !failure.Permanent() {
			t.Fatalf("EVENT_CONFLICT metadata: %v", failure.Metadata())
		}

		done := w.completed()
		ok(c.RecordRunTerminal(ctx, w.run.RunID, completed, done))(t)
		if result := ok(c.RecordRunTerminal(ctx, w.run.RunID, completed, done))(t); result.Inserted {
			t.Fatalf("exact terminal retry inserted: %+v", result)
		}
		failed := w.record("done", "run_completed",
			`{"status":"failed","phase":"failed","failure":{"message":"m","kind":"k","retryable":false}}`)
		_, err = c.RecordRunTerminal(ctx, w.run.RunID, runstorev1.RunStatus_RUN_STATUS_FAILED, failed)
		expectReason(t, err, runstore.ErrRunTerminalConflict, runstore.ErrConflict, codes.AlreadyExists)
	})
}

// TestErrors: each refusal is an *Error with its reason's sentinel, family,
// status and metadata.
func TestErrors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		_, err := c.LoadRun(ctx, "no-such-run")
		failure := expectReason(t, err, runstore.ErrRunNotFound, runstore.ErrNotFound, codes.NotFound)
		if failure.Metadata()["run_id"] != "no-such-run" || failure.Metadata()["request_id"] == "" || failure.Retryable() {
			t.Fatalf("RUN_NOT_FOUND: %v", failure.Metadata())
		}
		if errors.Is(err, runstore.ErrSessionNotFound) || errors.Is(err, runstore.ErrConflict) {
			t.Fatal("RUN_NOT_FOUND matched another sentinel")
		}
		_, err = c.LoadSessionStatus(ctx, "")
		expectReason(t, err, runstore.ErrSessionNotFound, runstore.ErrNotFound, codes.NotFound)
		_, err = c.ListRunRecords(ctx, "no-such-run", "", 0)
		expectReason(t, err, runstore.ErrInvalidArgumentRead, runstore.ErrInvalidArgument, codes.InvalidArgument)
		_, err = c.LoadRunSuspension(ctx, "no-such-run")
		expectReason(t, err, runstore.ErrRunNotFound, runstore.ErrNotFound, codes.NotFound)
		w := newWorker(uid("no-session"), uid("run"), "chat")
		_, err = c.StartRootRun(ctx, w.run, w.started(), w.canceled())
		expectReason(t, err, runstore.ErrSessionNotFound, runstore.ErrNotFound, codes.NotFound)
		bad := w.started()
		bad.Timestamp = bad.Timestamp.Add(time.Microsecond)
		_, err = c.StartOneShotRun(ctx, runstore.RunStart{RunID: w.run.RunID, AgentID: "a", StartedAt: w.run.StartedAt}, bad)
		failure = expectReason(t, err, runstore.ErrContractValidation, runstore.ErrInvalidArgument, codes.InvalidArgument)
		if failure.Metadata()["field"] == "" {
			t.Fatalf("CONTRACT_VALIDATION names no field: %v", failure.Metadata())
		}

		// The namespace travels as x-runstore-namespace.
		inDefault := dial(t, target, runstore.WithNamespace("default"))
		if _, err := inDefault.LoadSessionStatus(ctx, uid("none")); !errors.Is(err, runstore.ErrSessionNotFound) {
			t.Fatalf("in namespace default: %v", err)
		}
		elsewhere := dial(t, target, runstore.WithNamespace(uid("nowhere")))
		_, err = elsewhere.LoadSessionStatus(ctx, "x")
		expectReason(t, err, runstore.ErrNamespaceNotFound, runstore.ErrNotFound, codes.NotFound)
	})
}

func expectReason(t *testing.T, err error, sentinel, family error, code codes.Code) *runstore.Error {
	t.Helper()
	var failure *runstore.Error
	if !errors.As(err, &failure) {
		t.Fatalf("want %v, got %v", sentinel, err)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, family) || failure.GRPCStatus().Code() != code {
		t.Fatalf("want %v (%v, %s), got %v", sentinel, family, code, err)
	}
	return failure
}

func containsSession(sessions []*runstorev1.Session, id string) bool {
	for _, s := range sessions {
		if s.GetId() == id {
			return true
		}
	}
	return false
}
