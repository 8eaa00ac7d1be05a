package runstore

import (
	"context"

	"google.golang.org/protobuf/proto"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// The worker's calls: RuntimeStore (docs/contract.md §9). Every mutation
// may be retried; an exact retry answers the original result with
// Inserted false, a changed one a conflict (ErrRunConflict, ErrEventConflict, ...).

// LoadSessionStatus is the status of one session (ErrSessionNotFound, the
// empty ID included; ErrSessionPurged).
func (c *Client) LoadSessionStatus(ctx context.Context, sessionID string) (SessionStatus, error) {
	var response runstorev1.LoadSessionStatusResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_LoadSessionStatus_FullMethodName,
		&runstorev1.LoadSessionStatusRequest{SessionId: sessionID}, &response)
	return response.GetStatus(), err
}

// StartRootRun stores a session root run's first state and its run_started
// record; canceled is the run_completed record stored instead when the
// session has ended (Outcome STOP), always required.
func (c *Client) StartRootRun(ctx context.Context, run RunStart, started, canceled Record) (StartResult, error) {
	var response runstorev1.StartRootRunResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_StartRootRun_FullMethodName,
		&runstorev1.StartRootRunRequest{Run: run.wire(), Started: started.wire(), Canceled: canceled.wire()}, &response)
	if err != nil {
		return StartResult{}, err
	}
	return StartResult{
		Outcome:  response.GetOutcome(),
		Started:  appendFromWire(response.GetStarted()),
		Canceled: appendFromWire(response.GetCanceled()),
	}, nil
}

// StartChildRun stores a session child run: the parent's child_run_linked
// record, the child's first state and its run_started (or canceled) record.
func (c *Client) StartChildRun(ctx context.Context, run RunStart, parentLinked, started, canceled Record) (StartResult, error) {
	var response runstorev1.StartChildRunResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_StartChildRun_FullMethodName,
		&runstorev1.StartChildRunRequest{
			Run: run.wire(), ParentLinked: parentLinked.wire(), Started: started.wire(), Canceled: canceled.wire(),
		}, &response)
	if err != nil {
		return StartResult{}, err
	}
	return StartResult{
		Outcome:      response.GetOutcome(),
		ParentRecord: appendFromWire(response.GetParentRecord()),
		Started:      appendFromWire(response.GetStarted()),
		Canceled:     appendFromWire(response.GetCanceled()),
	}, nil
}

// StartOneShotRun stores a sessionless run and its run_started record.
func (c *Client) StartOneShotRun(ctx context.Context, run RunStart, started Record) (AppendResult, error) {
	var response runstorev1.StartOneShotRunResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_StartOneShotRun_FullMethodName,
		&runstorev1.StartOneShotRunRequest{Run: run.wire(), Started: started.wire()}, &response)
	return appendFromWire(response.GetRecord()), err
}

// StartOneShotChildRun stores a sessionless child run with its parent link.
func (c *Client) StartOneShotChildRun(ctx context.Context, run RunStart, parentLinked, started Record) (StartResult, error) {
	var response runstorev1.StartOneShotChildRunResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_StartOneShotChildRun_FullMethodName,
		&runstorev1.StartOneShotChildRunRequest{Run: run.wire(), ParentLinked: parentLinked.wire(), Started: started.wire()},
		&response)
	if err != nil {
		return StartResult{}, err
	}
	return StartResult{
		Outcome:      runstorev1.RunStartOutcome_RUN_START_OUTCOME_PROCEED,
		ParentRecord: appendFromWire(response.GetParentRecord()),
		Started:      appendFromWire(response.GetStarted()),
	}, nil
}

// AppendRunRecord stores one ordinary (non-lifecycle) record. Concurrent
// calls share messages (Coalescing) unless the client was made with
// WithoutCoalescing; each keeps its own result, error, retries and deadline.
func (c *Client) AppendRunRecord(ctx context.Context, record Record) (AppendResult, error) {
	request := &runstorev1.AppendRunRecordRequest{Record: record.wire()}
	var response *runstorev1.AppendRunRecordResponse
	var err error
	if c.coalescer == nil || proto.Size(request) > c.opts.maxSend {
		response = &runstorev1.AppendRunRecordResponse{}
		err = c.invoke(ctx, runstorev1.RuntimeStore_AppendRunRecord_FullMethodName, request, response)
	} else {
		err = c.withRetry(ctx, runstorev1.RuntimeStore_AppendRunRecord_FullMethodName, true, func(attemptCtx context.Context) error {
			var attemptErr error
			response, attemptErr = c.coalescer.append(attemptCtx, request)
			return attemptErr
		})
	}
	return AppendResult{ID: response.GetId(), Inserted: response.GetInserted(), SessionStatus: response.GetSessionStatus()}, err
}

// AppendRunRecords stores up to 128 ordinary records of one run in one
// transaction, all or none; one result per record, in order.
func (c *Client) AppendRunRecords(ctx context.Context, records []Record) ([]AppendResult, error) {
	request := &runstorev1.AppendRunRecordsRequest{Records: make([]*runstorev1.RunRecord, len(records))}
	for i, record := range records {
		request.Records[i] = record.wire()
	}
	var response runstorev1.AppendRunRecordsResponse
	if err := c.invoke(ctx, runstorev1.RuntimeStore_AppendRunRecords_FullMethodName, request, &response); err != nil {
		return nil, err
	}
	results := make([]AppendResult, len(response.GetResults()))
	for i, result := range response.GetResults() {
		results[i] = appendFromWire(result)
	}
	return results, nil
}

// RecordRunCancellation records the first cancellation reason with its
// runtime.cancellation_intent record.
func (c *Client) RecordRunCancellation(ctx context.Context, runID, reason string, record Record) (AppendResult, error) {
	var response runstorev1.RecordRunCancellationResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_RecordRunCancellation_FullMethodName,
		&runstorev1.RecordRunCancellationRequest{RunId: runID, Reason: reason, Record: record.wire()}, &response)
	return AppendResult{ID: response.GetId(), Inserted: response.GetInserted(), SessionStatus: response.GetSessionStatus()}, err
}

// RecordRunSuspension stores the checkpoint, the run_suspended record and
// status SUSPENDED.
func (c *Client) RecordRunSuspension(ctx context.Context, runID string, suspension Checkpoint, record Record) (AppendResult, error) {
	var response runstorev1.RecordRunSuspensionResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_RecordRunSuspension_FullMethodName,
		&runstorev1.RecordRunSuspensionRequest{RunId: runID, Suspension: checkpointWire(suspension), Record: record.wire()},
		&response)
	return AppendResult{ID: response.GetId(), Inserted: response.GetInserted(), SessionStatus: response.GetSessionStatus()}, err
}

// RecordRunTerminal stores the run_completed record and a terminal status
// (COMPLETED, FAILED or CANCELED).
func (c *Client) RecordRunTerminal(ctx context.Context, runID string, status RunStatus, record Record) (AppendResult, error) {
	var response runstorev1.RecordRunTerminalResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_RecordRunTerminal_FullMethodName,
		&runstorev1.RecordRunTerminalRequest{RunId: runID, Status: status, Record: record.wire()}, &response)
	return AppendResult{ID: response.GetId(), Inserted: response.GetInserted(), SessionStatus: response.GetSessionStatus()}, err
}

// RepairRunSuspension suspends only a still-running run and reports who owns
// the ending.
func (c *Client) RepairRunSuspension(ctx context.Context, runID string, suspension Checkpoint, record Record) (RepairResult, error) {
	var response runstorev1.RepairRunSuspensionResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_RepairRunSuspension_FullMethodName,
		&runstorev1.RepairRunSuspensionRequest{RunId: runID, Suspension: checkpointWire(suspension), Record: record.wire()},
		&response)
	return RepairResult{Outcome: response.GetOutcome(), Status: response.GetStatus(), Record: appendFromWire(response.GetRecord())}, err
}

// RepairRunTerminal ends only a still-running run and reports who owns the
// ending.
func (c *Client) RepairRunTerminal(ctx context.Context, runID string, status RunStatus, record Record) (RepairResult, error) {
	var response runstorev1.RepairRunTerminalResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_RepairRunTerminal_FullMethodName,
		&runstorev1.RepairRunTerminalRequest{RunId: runID, Status: status, Record: record.wire()}, &response)
	return RepairResult{Outcome: response.GetOutcome(), Status: response.GetStatus(), Record: appendFromWire(response.GetRecord())}, err
}

// LoadRun is a run's metadata (ErrRunNotFound).
func (c *Client) LoadRun(ctx context.Context, runID string) (RunMeta, error) {
	var response runstorev1.LoadRunResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_LoadRun_FullMethodName, &runstorev1.LoadRunRequest{RunId: runID}, &response)
	if err != nil {
		return RunMeta{}, err
	}
	return runMetaFromWire(response.GetRun()), nil
}

// LoadRunSuspension is the exact checkpoint of a suspended run
// (ErrRunSuspensionNotFound when it was never suspended).
func (c *Client) LoadRunSuspension(ctx context.Context, runID string) (Checkpoint, error) {
	var response runstorev1.LoadRunSuspensionResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_LoadRunSuspension_FullMethodName,
		&runstorev1.LoadRunSuspensionRequest{RunId: runID}, &response)
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{ID: response.GetSuspension().GetId(), Data: response.GetSuspension().GetData()}, nil
}

// ListRunRecords is one page of a run's records in run order, from cursor
// ("" for the first page); limit must be > 0 (the server caps it).
func (c *Client) ListRunRecords(ctx context.Context, runID, cursor string, limit int) (Page, error) {
	var response runstorev1.ListRunRecordsResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_ListRunRecords_FullMethodName,
		&runstorev1.ListRunRecordsRequest{RunId: runID, Cursor: cursor, Limit: clampLimit(limit)}, &response)
	if err != nil {
		return Page{}, err
	}
	return Page{Records: recordsFromWire(response.GetEvents()), NextCursor: response.GetNextCursor()}, nil
}

// ListSessionRunRecords is one page of a session's records in commit order.
func (c *Client) ListSessionRunRecords(ctx context.Context, sessionID, cursor string, limit int) (Page, error) {
	var response runstorev1.ListSessionRunRecordsResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_ListSessionRunRecords_FullMethodName,
		&runstorev1.ListSessionRunRecordsRequest{SessionId: sessionID, Cursor: cursor, Limit: clampLimit(limit)}, &response)
	if err != nil {
		return Page{}, err
	}
	return Page{Records: recordsFromWire(response.GetEvents()), NextCursor: response.GetNextCursor()}, nil
}

// ListRunTranscriptRecords is one page of a run's transcript records through
// the fixed end record throughRecordID, after afterRecordID ("" from the
// start). NextCursor is the last record's ID: the next page passes it as
// afterRecordID; it is empty when no transcript record is left.
func (c *Client) ListRunTranscriptRecords(ctx context.Context, runID, throughRecordID, afterRecordID string, limit int) (Page, error) {
	var response runstorev1.ListRunTranscriptRecordsResponse
	err := c.invoke(ctx, runstorev1.RuntimeStore_ListRunTranscriptRecords_FullMethodName,
		&runstorev1.ListRunTranscriptRecordsRequest{
			RunId: runID, ThroughRecordId: throughRecordID, AfterRecordId: afterRecordID, Limit: clampLimit(limit),
		}, &response)
	if err != nil {
		return Page{}, err
	}
	return Page{Records: recordsFromWire(response.GetEvents()), NextCursor: response.GetNextCursor()}, nil
}

// clampLimit keeps an int in int32 range; the server judges the value.
func clampLimit(limit int) int32 {
	const most = 1<<31 - 1
	return int32(max(min(limit, most), -most))
}
