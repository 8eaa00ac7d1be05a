// A minimal runstore worker in Go: create a session, start its root run,
// append a record, complete the run (docs/clients/go.md).
//
//	RUNSTORE_TARGET=127.0.0.1:50051 go run .
//
// RUNSTORE_TOKEN_FILE and RUNSTORE_NAMESPACE are used when set.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
	runstore "github.com/runstore/runstore/go"
)

func main() {
	target := os.Getenv("RUNSTORE_TARGET")
	if target == "" {
		log.Fatal("set RUNSTORE_TARGET (host:port of a runstore server)")
	}
	options := []runstore.Option{runstore.WithInsecure(), runstore.WithCallTimeout(5 * time.Second)}
	if path := os.Getenv("RUNSTORE_TOKEN_FILE"); path != "" {
		options = append(options, runstore.WithTokenFile(path))
	}
	if namespace := os.Getenv("RUNSTORE_NAMESPACE"); namespace != "" {
		options = append(options, runstore.WithNamespace(namespace))
	}
	client, err := runstore.Dial(target, options...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	suffix := time.Now().Format("20060102T150405.000000000")
	sessionID, runID := "chat-"+suffix, "turn-"+suffix
	if _, err := client.CreateSession(ctx, sessionID, time.Now()); err != nil {
		log.Fatal(err)
	}

	// Records are built once and resent as they are: a retry must be identical.
	startedAt := time.Now().UTC().Truncate(time.Millisecond)
	record := func(key, recordType, payload string, at time.Time) runstore.Record {
		return runstore.Record{
			EventKey: key, RunID: runID, AgentID: "chat", SessionID: sessionID,
			Type: recordType, Payload: []byte(payload), Timestamp: at,
		}
	}
	run := runstore.RunStart{RunID: runID, AgentID: "chat", SessionID: sessionID, StartedAt: startedAt}
	started := record("start", "run_started", `{}`, startedAt)
	canceled := record("stop", "run_completed",
		`{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"}}`, startedAt)
	start, err := client.StartRootRun(ctx, run, started, canceled)
	if err != nil {
		log.Fatal(err)
	}
	if start.Outcome != runstorev1.RunStartOutcome_RUN_START_OUTCOME_PROCEED {
		log.Fatalf("the session has ended: run %s stopped", runID)
	}

	step := record("prompt-1", "prompt_rendered", `{"text":"Hello"}`, time.Now().UTC().Truncate(time.Millisecond))
	appended, err := client.AppendRunRecord(ctx, step)
	if err != nil {
		log.Fatal(err)
	}
	// Sending the same record again is an exact retry: the original ID, not inserted.
	again, err := client.AppendRunRecord(ctx, step)
	if err != nil {
		log.Fatal(err)
	}
	// The same event key with other content is refused.
	changed := step
	changed.Payload = []byte(`{"text":"Bye"}`)
	if _, err := client.AppendRunRecord(ctx, changed); !errors.Is(err, runstore.ErrEventConflict) {
		log.Fatalf("want EVENT_CONFLICT, got %v", err)
	}

	done := record("done", "run_completed", `{"status":"success","phase":"completed"}`, time.Now().UTC().Truncate(time.Millisecond))
	if _, err := client.RecordRunTerminal(ctx, runID, runstorev1.RunStatus_RUN_STATUS_COMPLETED, done); err != nil {
		log.Fatal(err)
	}
	meta, err := client.LoadRun(ctx, runID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("run %s: record %s inserted=%v, retry inserted=%v, status %s\n",
		runID, appended.ID, appended.Inserted, again.Inserted, meta.Status)
}
