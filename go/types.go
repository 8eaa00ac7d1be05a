package runstore

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// The enums are the generated ones.
type (
	SessionStatus    = runstorev1.SessionStatus
	RunStatus        = runstorev1.RunStatus
	RunStartOutcome  = runstorev1.RunStartOutcome
	RunRepairOutcome = runstorev1.RunRepairOutcome
)

// Record is one run record (runstorev1.RunRecord). Payload travels byte for
// byte; Timestamp must be whole milliseconds. ID is assigned by the store
// and ignored on input. Build a record once and resend that same value: a
// rebuilt one with a new Timestamp is a different record (docs/errors.md).
type Record struct {
	ID        string
	EventKey  string
	RunID     string
	AgentID   string
	SessionID string
	TurnID    string
	Type      string
	Payload   []byte
	Timestamp time.Time
}

// RunStart is the identity of a run a start command supplies.
type RunStart struct {
	RunID            string
	AgentID          string
	SessionID        string
	ParentRunID      string
	PredecessorRunID string
	StartedAt        time.Time
	Labels           map[string]string
	// SeedEndID names the run's published seed a synchronous or
	// current-generation start attaches (docs/contract.md §9.7.9).
	SeedEndID string
}

// AppendResult is the outcome of writing one record; all zero means "no
// such record" (the canceled record of a run that proceeded).
type AppendResult struct {
	ID            string
	Inserted      bool
	SessionStatus SessionStatus
}

// StartResult is what a start answered. Outcome is fixed by the first start
// of the run; ParentRecord is set by child starts, Canceled when the session
// had ended (Outcome STOP).
type StartResult struct {
	Outcome      RunStartOutcome
	Started      AppendResult
	Canceled     AppendResult
	ParentRecord AppendResult
}

// RepairResult is what a repair did and the status stored after it.
type RepairResult struct {
	Outcome RunRepairOutcome
	Status  RunStatus
	Record  AppendResult
}

// RunMeta is a run's metadata.
type RunMeta struct {
	RunID              string
	AgentID            string
	SessionID          string
	ParentRunID        string
	StartedAt          time.Time
	Labels             map[string]string
	StartOutcome       RunStartOutcome
	Status             RunStatus
	CancellationReason string
	UpdatedAt          time.Time
}

// Checkpoint is a suspended run's continuation checkpoint.
type Checkpoint struct {
	ID   string
	Data []byte
}

// Session is a session as the host sees it; EndedAt is zero while active.
type Session struct {
	ID        string
	Status    SessionStatus
	CreatedAt time.Time
	EndedAt   time.Time
}

// Page is one page of records; pass NextCursor back unchanged for the next
// one, empty when the page reached the end at read time.
type Page struct {
	Records    []Record
	NextCursor string
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func fromTimestamp(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func (r Record) wire() *runstorev1.RunRecord {
	return &runstorev1.RunRecord{
		Id:        r.ID,
		EventKey:  r.EventKey,
		RunId:     r.RunID,
		AgentId:   r.AgentID,
		SessionId: r.SessionID,
		TurnId:    r.TurnID,
		Type:      r.Type,
		Payload:   r.Payload,
		Timestamp: timestamp(r.Timestamp),
	}
}

func recordFromWire(r *runstorev1.RunRecord) Record {
	return Record{
		ID:        r.GetId(),
		EventKey:  r.GetEventKey(),
		RunID:     r.GetRunId(),
		AgentID:   r.GetAgentId(),
		SessionID: r.GetSessionId(),
		TurnID:    r.GetTurnId(),
		Type:      r.GetType(),
		Payload:   r.GetPayload(),
		Timestamp: fromTimestamp(r.GetTimestamp()),
	}
}

func recordsFromWire(records []*runstorev1.RunRecord) []Record {
	out := make([]Record, len(records))
	for i, r := range records {
		out[i] = recordFromWire(r)
	}
	return out
}

func (s RunStart) wire() *runstorev1.RunStart {
	return &runstorev1.RunStart{
		RunId:            s.RunID,
		AgentId:          s.AgentID,
		SessionId:        s.SessionID,
		ParentRunId:      s.ParentRunID,
		PredecessorRunId: s.PredecessorRunID,
		StartedAt:        timestamp(s.StartedAt),
		Labels:           s.Labels,
		SeedEndId:        s.SeedEndID,
	}
}

func appendFromWire(r *runstorev1.AppendResult) AppendResult {
	return AppendResult{ID: r.GetId(), Inserted: r.GetInserted(), SessionStatus: r.GetSessionStatus()}
}

func runMetaFromWire(m *runstorev1.RunMeta) RunMeta {
	return RunMeta{
		RunID:              m.GetRunId(),
		AgentID:            m.GetAgentId(),
		SessionID:          m.GetSessionId(),
		ParentRunID:        m.GetParentRunId(),
		StartedAt:          fromTimestamp(m.GetStartedAt()),
		Labels:             m.GetLabels(),
		StartOutcome:       m.GetStartOutcome(),
		Status:             m.GetStatus(),
		CancellationReason: m.GetCancellationReason(),
		UpdatedAt:          fromTimestamp(m.GetUpdatedAt()),
	}
}

func runMetasFromWire(metas []*runstorev1.RunMeta) []RunMeta {
	out := make([]RunMeta, len(metas))
	for i, m := range metas {
		out[i] = runMetaFromWire(m)
	}
	return out
}

func sessionFromWire(s *runstorev1.Session) Session {
	return Session{
		ID:        s.GetId(),
		Status:    s.GetStatus(),
		CreatedAt: fromTimestamp(s.GetCreatedAt()),
		EndedAt:   fromTimestamp(s.GetEndedAt()),
	}
}

func checkpointWire(c Checkpoint) *runstorev1.Checkpoint {
	return &runstorev1.Checkpoint{Id: c.ID, Data: c.Data}
}
