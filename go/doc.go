// Package runstore is a typed Go client of the runstore gRPC service
// (docs/clients/go.md): the worker-facing RuntimeStore, the host's
// SessionAdmin, MemoryStore and ContextStore over the generated stubs of
// github.com/runstore/runstore/gen/go/runstore/v1.
//
// Every call resends the identical request on transient failures (the
// store's exact-retry rules make that safe), with jittered exponential
// backoff bounded by the caller's context and RetryPolicy; every other
// failure is an *Error whose reason matches one of the Err* sentinels with
// errors.Is.
package runstore
