package runstore

import (
	"context"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// Seeds and preparations of goa-ai's current contract (docs/contract.md §9.7)
// and StartSynchronousRun (§9.2.5). The seed values are the generated
// messages of runstore/v1/seeds.proto, which already carry goa-ai's shapes;
// the calls retry as every other mutation does: an exact retry answers the
// original result, a changed one ErrSeedConflict.

// SeedPage is one page of a seed's or a preparation's records; NextCursor is
// empty on the last page.
type SeedPage struct {
	Records    []*runstorev1.SeedRecord
	NextCursor string
}

// BeginRunSeed declares a seed attempt for a run that does not exist yet
// (§9.7.1) and returns the seed as begun.
func (c *Client) BeginRunSeed(ctx context.Context, declaration *runstorev1.SeedDeclaration) (*runstorev1.RunSeed, error) {
	var response runstorev1.BeginRunSeedResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_BeginRunSeed_FullMethodName,
		&runstorev1.BeginRunSeedRequest{Declaration: declaration}, &response)
	return response.GetSeed(), err
}

// AppendRunSeed appends one record to an open attempt (§9.7.2) and returns
// the ID the store assigned it.
func (c *Client) AppendRunSeed(ctx context.Context, runID, attemptID string, record *runstorev1.SeedRecord) (string, error) {
	var response runstorev1.AppendRunSeedResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_AppendRunSeed_FullMethodName,
		&runstorev1.AppendRunSeedRequest{RunId: runID, AttemptId: attemptID, Record: record}, &response)
	return response.GetId(), err
}

// PublishRunSeed seals an attempt as its run's seed (§9.7.3): seedEndID is
// the history's last record, endID the attempt's, preparedBytes the
// compiled-start parts' bytes.
func (c *Client) PublishRunSeed(ctx context.Context, runID, attemptID, seedEndID, endID string, preparedBytes int64) error {
	var response runstorev1.PublishRunSeedResponse
	return c.invoke(ctx, runstorev1.RuntimeStore_PublishRunSeed_FullMethodName,
		&runstorev1.PublishRunSeedRequest{
			RunId: runID, AttemptId: attemptID, SeedEndId: seedEndID, EndId: endID, PreparedBytes: preparedBytes,
		}, &response)
}

// FindRunPreparation is the operation's published preparation, and false
// when it has none yet (§9.7.4).
func (c *Client) FindRunPreparation(ctx context.Context, operation *runstorev1.PreparationOperation) (*runstorev1.RunPreparation, bool, error) {
	var response runstorev1.FindRunPreparationResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_FindRunPreparation_FullMethodName,
		&runstorev1.FindRunPreparationRequest{Operation: operation}, &response)
	return response.GetPreparation(), response.GetFound(), err
}

// SettleRunPreparation is the operation's published preparation, or false
// with attemptID abandoned for good (§9.7.5).
func (c *Client) SettleRunPreparation(ctx context.Context, operation *runstorev1.PreparationOperation, attemptID string) (*runstorev1.RunPreparation, bool, error) {
	var response runstorev1.SettleRunPreparationResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_SettleRunPreparation_FullMethodName,
		&runstorev1.SettleRunPreparationRequest{Operation: operation, AttemptId: attemptID}, &response)
	return response.GetPreparation(), response.GetFound(), err
}

// LoadRunSeed is the run's published seed whose history ends at endID (§9.7.6).
func (c *Client) LoadRunSeed(ctx context.Context, runID, endID string) (*runstorev1.RunSeed, error) {
	var response runstorev1.LoadRunSeedResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_LoadRunSeed_FullMethodName,
		&runstorev1.LoadRunSeedRequest{RunId: runID, EndId: endID}, &response)
	return response.GetSeed(), err
}

// ListRunSeedRecords is a page of a published seed's history after afterID
// (§9.7.7).
func (c *Client) ListRunSeedRecords(ctx context.Context, runID, endID, afterID string, limit int) (SeedPage, error) {
	var response runstorev1.ListRunSeedRecordsResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_ListRunSeedRecords_FullMethodName,
		&runstorev1.ListRunSeedRecordsRequest{RunId: runID, EndId: endID, AfterId: afterID, Limit: clampLimit(limit)},
		&response)
	return SeedPage{Records: response.GetRecords(), NextCursor: response.GetNextCursor()}, err
}

// ListRunPreparationRecords is a page of a published preparation's
// compiled-start parts after afterID; endID is the preparation's end (§9.7.8).
func (c *Client) ListRunPreparationRecords(ctx context.Context, runID, endID, afterID string, limit int) (SeedPage, error) {
	var response runstorev1.ListRunPreparationRecordsResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_ListRunPreparationRecords_FullMethodName,
		&runstorev1.ListRunPreparationRecordsRequest{RunId: runID, EndId: endID, AfterId: afterID, Limit: clampLimit(limit)},
		&response)
	return SeedPage{Records: response.GetRecords(), NextCursor: response.GetNextCursor()}, err
}

// StartSynchronousRun starts a callback's sessionless run, attaching the
// run's published seed named by run.SeedEndID (§9.2.5); a retry must repeat
// the start exactly. It returns the run_started record's result and the
// run's status.
func (c *Client) StartSynchronousRun(ctx context.Context, run RunStart, started Record) (AppendResult, RunStatus, error) {
	var response runstorev1.StartSynchronousRunResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_StartSynchronousRun_FullMethodName,
		&runstorev1.StartSynchronousRunRequest{Run: run.wire(), Started: started.wire()}, &response)
	return appendFromWire(response.GetRecord()), response.GetRunStatus(), err
}
