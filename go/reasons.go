package runstore

import "errors"

// The families of reasons, by what a caller does about them; each reason's
// own sentinel is below. errors.Is(err, ErrNotFound) is true for every
// *_NOT_FOUND reason.
var (
	// ErrNotFound: the session, run, checkpoint, context or namespace does not exist.
	ErrNotFound = errors.New("runstore: not found")
	// ErrConflict: the ID or key already holds something else; resend the
	// original or use a new one.
	ErrConflict = errors.New("runstore: conflict")
	// ErrFailedPrecondition: the session or run is not in a state that takes
	// the command.
	ErrFailedPrecondition = errors.New("runstore: failed precondition")
	// ErrInvalidArgument: the command breaks a rule; fix the command.
	ErrInvalidArgument = errors.New("runstore: invalid argument")
	// ErrAccessDenied: no accepted credential, or a role that may not call the method.
	ErrAccessDenied = errors.New("runstore: access denied")
	// ErrUnavailable: the server or one of its limits refused the call for
	// now; the client already retried it as its RetryPolicy allows.
	ErrUnavailable = errors.New("runstore: unavailable")
)

// One sentinel per runstorev1.ErrorReason (protos/runstore/v1/error_reason.proto,
// docs/errors.md), for errors.Is.
var (
	ErrTransient                 = errors.New("runstore: TRANSIENT")
	ErrSessionNotFound           = errors.New("runstore: SESSION_NOT_FOUND")
	ErrRunNotFound               = errors.New("runstore: RUN_NOT_FOUND")
	ErrRunSuspensionNotFound     = errors.New("runstore: RUN_SUSPENSION_NOT_FOUND")
	ErrSessionPurged             = errors.New("runstore: SESSION_PURGED")
	ErrSessionEnded              = errors.New("runstore: SESSION_ENDED")
	ErrSessionActive             = errors.New("runstore: SESSION_ACTIVE")
	ErrSessionHasActiveRuns      = errors.New("runstore: SESSION_HAS_ACTIVE_RUNS")
	ErrRunNotActive              = errors.New("runstore: RUN_NOT_ACTIVE")
	ErrRunSessionMismatch        = errors.New("runstore: RUN_SESSION_MISMATCH")
	ErrRunRecordOwnerMismatch    = errors.New("runstore: RUN_RECORD_OWNER_MISMATCH")
	ErrContinuationMismatch      = errors.New("runstore: CONTINUATION_MISMATCH")
	ErrRunConflict               = errors.New("runstore: RUN_CONFLICT")
	ErrRunTerminalConflict       = errors.New("runstore: RUN_TERMINAL_CONFLICT")
	ErrRunCancellationConflict   = errors.New("runstore: RUN_CANCELLATION_CONFLICT")
	ErrRunSuspensionConflict     = errors.New("runstore: RUN_SUSPENSION_CONFLICT")
	ErrEventConflict             = errors.New("runstore: EVENT_CONFLICT")
	ErrContractValidation        = errors.New("runstore: CONTRACT_VALIDATION")
	ErrInvalidArgumentRead       = errors.New("runstore: INVALID_ARGUMENT_READ")
	ErrParentRunIDRequired       = errors.New("runstore: PARENT_RUN_ID_REQUIRED")
	ErrChildRunIDRequired        = errors.New("runstore: CHILD_RUN_ID_REQUIRED")
	ErrChildAgentIDRequired      = errors.New("runstore: CHILD_AGENT_ID_REQUIRED")
	ErrChildSessionIDRequired    = errors.New("runstore: CHILD_SESSION_ID_REQUIRED")
	ErrInvalidTranscriptPosition = errors.New("runstore: INVALID_TRANSCRIPT_POSITION")
	ErrIdempotencyConflict       = errors.New("runstore: IDEMPOTENCY_CONFLICT")
	ErrContextNotFound           = errors.New("runstore: CONTEXT_NOT_FOUND")
	ErrContextVersionNotFound    = errors.New("runstore: CONTEXT_VERSION_NOT_FOUND")
	ErrContextVersionConflict    = errors.New("runstore: CONTEXT_VERSION_CONFLICT")
	ErrStoredStateCorrupt        = errors.New("runstore: STORED_STATE_CORRUPT")
	ErrRPC                       = errors.New("runstore: RPC_ERROR")
	ErrMalformedRequest          = errors.New("runstore: MALFORMED_REQUEST")
	ErrOverloaded                = errors.New("runstore: OVERLOADED")
	ErrUnauthenticated           = errors.New("runstore: UNAUTHENTICATED")
	ErrPermissionDenied          = errors.New("runstore: PERMISSION_DENIED")
	ErrRunPurged                 = errors.New("runstore: RUN_PURGED")
	ErrNamespaceRequired         = errors.New("runstore: NAMESPACE_REQUIRED")
	ErrNamespaceNotFound         = errors.New("runstore: NAMESPACE_NOT_FOUND")
	ErrNamespaceAlreadyExists    = errors.New("runstore: NAMESPACE_ALREADY_EXISTS")
	ErrNamespaceTombstoned       = errors.New("runstore: NAMESPACE_TOMBSTONED")
	ErrNamespaceProtected        = errors.New("runstore: NAMESPACE_PROTECTED")
	ErrQuotaExceeded             = errors.New("runstore: QUOTA_EXCEEDED")
	ErrSeedNotFound              = errors.New("runstore: SEED_NOT_FOUND")
	ErrSeedConflict              = errors.New("runstore: SEED_CONFLICT")
	ErrSeedNotPublished          = errors.New("runstore: SEED_NOT_PUBLISHED")
	ErrPreparationAbandoned      = errors.New("runstore: PREPARATION_ABANDONED")
)

type reasonInfo struct {
	sentinel error
	// nil: deliberately in no family (STORED_STATE_CORRUPT needs an operator,
	// RPC_ERROR is whatever gRPC said).
	family error
}

// reasons maps every reason a server sends (and the client's RPC_ERROR) to
// its sentinels; ERROR_REASON_UNSPECIFIED is never sent and maps to nothing.
// A test walks runstorev1.ErrorReason so that a new reason cannot be missed.
var reasons = map[string]reasonInfo{
	"TRANSIENT":                   {ErrTransient, ErrUnavailable},
	"SESSION_NOT_FOUND":           {ErrSessionNotFound, ErrNotFound},
	"RUN_NOT_FOUND":               {ErrRunNotFound, ErrNotFound},
	"RUN_SUSPENSION_NOT_FOUND":    {ErrRunSuspensionNotFound, ErrNotFound},
	"SESSION_PURGED":              {ErrSessionPurged, ErrFailedPrecondition},
	"SESSION_ENDED":               {ErrSessionEnded, ErrFailedPrecondition},
	"SESSION_ACTIVE":              {ErrSessionActive, ErrFailedPrecondition},
	"SESSION_HAS_ACTIVE_RUNS":     {ErrSessionHasActiveRuns, ErrFailedPrecondition},
	"RUN_NOT_ACTIVE":              {ErrRunNotActive, ErrFailedPrecondition},
	"RUN_SESSION_MISMATCH":        {ErrRunSessionMismatch, ErrFailedPrecondition},
	"RUN_RECORD_OWNER_MISMATCH":   {ErrRunRecordOwnerMismatch, ErrFailedPrecondition},
	"CONTINUATION_MISMATCH":       {ErrContinuationMismatch, ErrFailedPrecondition},
	"RUN_CONFLICT":                {ErrRunConflict, ErrConflict},
	"RUN_TERMINAL_CONFLICT":       {ErrRunTerminalConflict, ErrConflict},
	"RUN_CANCELLATION_CONFLICT":   {ErrRunCancellationConflict, ErrConflict},
	"RUN_SUSPENSION_CONFLICT":     {ErrRunSuspensionConflict, ErrConflict},
	"EVENT_CONFLICT":              {ErrEventConflict, ErrConflict},
	"CONTRACT_VALIDATION":         {ErrContractValidation, ErrInvalidArgument},
	"INVALID_ARGUMENT_READ":       {ErrInvalidArgumentRead, ErrInvalidArgument},
	"PARENT_RUN_ID_REQUIRED":      {ErrParentRunIDRequired, ErrInvalidArgument},
	"CHILD_RUN_ID_REQUIRED":       {ErrChildRunIDRequired, ErrInvalidArgument},
	"CHILD_AGENT_ID_REQUIRED":     {ErrChildAgentIDRequired, ErrInvalidArgument},
	"CHILD_SESSION_ID_REQUIRED":   {ErrChildSessionIDRequired, ErrInvalidArgument},
	"INVALID_TRANSCRIPT_POSITION": {ErrInvalidTranscriptPosition, ErrInvalidArgument},
	"IDEMPOTENCY_CONFLICT":        {ErrIdempotencyConflict, ErrConflict},
	"CONTEXT_NOT_FOUND":           {ErrContextNotFound, ErrNotFound},
	"CONTEXT_VERSION_NOT_FOUND":   {ErrContextVersionNotFound, ErrNotFound},
	"CONTEXT_VERSION_CONFLICT":    {ErrContextVersionConflict, ErrConflict},
	"STORED_STATE_CORRUPT":        {ErrStoredStateCorrupt, nil},
	"RPC_ERROR":                   {ErrRPC, nil},
	"MALFORMED_REQUEST":           {ErrMalformedRequest, ErrInvalidArgument},
	"OVERLOADED":                  {ErrOverloaded, ErrUnavailable},
	"UNAUTHENTICATED":             {ErrUnauthenticated, ErrAccessDenied},
	"PERMISSION_DENIED":           {ErrPermissionDenied, ErrAccessDenied},
	"RUN_PURGED":                  {ErrRunPurged, ErrFailedPrecondition},
	"NAMESPACE_REQUIRED":          {ErrNamespaceRequired, ErrInvalidArgument},
	"NAMESPACE_NOT_FOUND":         {ErrNamespaceNotFound, ErrNotFound},
	"NAMESPACE_ALREADY_EXISTS":    {ErrNamespaceAlreadyExists, ErrConflict},
	"NAMESPACE_TOMBSTONED":        {ErrNamespaceTombstoned, ErrFailedPrecondition},
	"NAMESPACE_PROTECTED":         {ErrNamespaceProtected, ErrFailedPrecondition},
	"QUOTA_EXCEEDED":              {ErrQuotaExceeded, ErrUnavailable},
	"SEED_NOT_FOUND":              {ErrSeedNotFound, ErrNotFound},
	"SEED_CONFLICT":               {ErrSeedConflict, ErrConflict},
	"SEED_NOT_PUBLISHED":          {ErrSeedNotPublished, ErrFailedPrecondition},
	"PREPARATION_ABANDONED":       {ErrPreparationAbandoned, ErrFailedPrecondition},
}
