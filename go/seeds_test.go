package runstore_test

import (
	"errors"
	"testing"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
	runstore "github.com/runstore/runstore/go"
)

// TestSeedsAndSynchronousStart calls every seed and preparation method on one
// literal seed, then starts its run synchronously: the seed attached, exact
// retries answered, another seed end and an unseeded run refused.
func TestSeedsAndSynchronousStart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, target string) {
		ctx := testContext(t)
		c := dial(t, target)
		w := newWorker("", uid("seeded"), "callback")
		declaration := &runstorev1.SeedDeclaration{
			AgentId: w.run.AgentID, RunId: w.run.RunID, CommandId: uid("command"), AttemptId: uid("attempt"),
			Kind: runstorev1.SeedKind_SEED_KIND_LITERAL,
		}
		operation := &runstorev1.PreparationOperation{
			AgentId: declaration.AgentId, RunId: declaration.RunId, CommandId: declaration.CommandId,
		}

		seed := ok(c.BeginRunSeed(ctx, declaration))(t)
		if seed.GetEndId() != "0" || seed.GetSource() != nil {
			t.Fatalf("BeginRunSeed: %v", seed)
		}
		history := ok(c.AppendRunSeed(ctx, w.run.RunID, declaration.AttemptId,
			&runstorev1.SeedRecord{Key: "m", PreviousId: "0", Body: &runstorev1.SeedRecord_Messages{Messages: []byte(`[]`)}}))(t)
		end := ok(c.AppendRunSeed(ctx, w.run.RunID, declaration.AttemptId,
			&runstorev1.SeedRecord{Key: "p", PreviousId: history, Body: &runstorev1.SeedRecord_Prepared{Prepared: []byte("xy")}}))(t)
		if history != "1" || end != "2" {
			t.Fatalf("AppendRunSeed: %q, %q", history, end)
		}
		if _, found, err := c.FindRunPreparation(ctx, operation); err != nil || found {
			t.Fatalf("FindRunPreparation before publishing: %v, %v", found, err)
		}
		if err := c.PublishRunSeed(ctx, w.run.RunID, declaration.AttemptId, history, end, 2); err != nil {
			t.Fatalf("PublishRunSeed: %v", err)
		}
		preparation, found, err := c.FindRunPreparation(ctx, operation)
		if err != nil || !found || preparation.GetEndId() != end || preparation.GetPreparedBytes() != 2 {
			t.Fatalf("FindRunPreparation: %v, %v, %v", preparation, found, err)
		}
		settled, found, err := c.SettleRunPreparation(ctx, operation, uid("late-attempt"))
		if err != nil || !found || settled.GetSeed().GetEndId() != history {
			t.Fatalf("SettleRunPreparation: %v, %v, %v", settled, found, err)
		}
		if loaded := ok(c.LoadRunSeed(ctx, w.run.RunID, history))(t); loaded.GetDeclaration().GetCommandId() != declaration.CommandId {
			t.Fatalf("LoadRunSeed: %v", loaded)
		}
		if page := ok(c.ListRunSeedRecords(ctx, w.run.RunID, history, "", 10))(t); len(page.Records) != 1 || page.NextCursor != "" ||
			string(page.Records[0].GetMessages()) != `[]` {
			t.Fatalf("ListRunSeedRecords: %+v", page)
		}
		if page := ok(c.ListRunPreparationRecords(ctx, w.run.RunID, end, "", 10))(t); len(page.Records) != 1 ||
			string(page.Records[0].GetPrepared()) != "xy" {
			t.Fatalf("ListRunPreparationRecords: %+v", page)
		}
		if _, err := c.LoadRunSeed(ctx, w.run.RunID, end); !errors.Is(err, runstore.ErrSeedConflict) || !errors.Is(err, runstore.ErrConflict) {
			t.Fatalf("LoadRunSeed at the body's end: %v", err)
		}

		w.run.SeedEndID = history
		record, status, err := c.StartSynchronousRun(ctx, w.run, w.started())
		if err != nil || record.ID != "1" || !record.Inserted || status != running {
			t.Fatalf("StartSynchronousRun: %+v, %s, %v", record, status, err)
		}
		record, status, err = c.StartSynchronousRun(ctx, w.run, w.started())
		if err != nil || record.ID != "1" || record.Inserted || status != running {
			t.Fatalf("StartSynchronousRun retry: %+v, %s, %v", record, status, err)
		}
		other := w.run
		other.SeedEndID = end
		if _, _, err := c.StartSynchronousRun(ctx, other, w.started()); !errors.Is(err, runstore.ErrSeedConflict) {
			t.Fatalf("StartSynchronousRun at another end: %v", err)
		}

		unseeded := newWorker("", uid("unseeded"), "callback")
		unseeded.run.SeedEndID = "1"
		if _, _, err := c.StartSynchronousRun(ctx, unseeded.run, unseeded.started()); !errors.Is(err, runstore.ErrSeedNotFound) ||
			!errors.Is(err, runstore.ErrNotFound) {
			t.Fatalf("StartSynchronousRun without a seed: %v", err)
		}
		abandoned := &runstorev1.PreparationOperation{AgentId: "callback", RunId: uid("abandoned"), CommandId: uid("command")}
		attempt := uid("attempt")
		if _, found, err := c.SettleRunPreparation(ctx, abandoned, attempt); err != nil || found {
			t.Fatalf("SettleRunPreparation of an unseen attempt: %v, %v", found, err)
		}
		late := &runstorev1.SeedDeclaration{
			AgentId: abandoned.AgentId, RunId: abandoned.RunId, CommandId: abandoned.CommandId, AttemptId: attempt,
			Kind: runstorev1.SeedKind_SEED_KIND_LITERAL,
		}
		if _, err := c.BeginRunSeed(ctx, late); !errors.Is(err, runstore.ErrPreparationAbandoned) ||
			!errors.Is(err, runstore.ErrFailedPrecondition) {
			t.Fatalf("BeginRunSeed of an abandoned attempt: %v", err)
		}
	})
}
