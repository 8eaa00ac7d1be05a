package runstore

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how a call resends its identical request after a
// retryable failure (Error.Retryable): each sleep is drawn uniformly below a
// cap that starts at Initial and grows by Multiplier up to Max, added to the
// delay a google.rpc.RetryInfo asks for. The call gives up, returning the last
// error, when MaxAttempts attempts failed, when the next sleep would pass
// Deadline (counted from the call's start) or the context's deadline, and at
// once with ctx.Err() when the context ends.
type RetryPolicy struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	// MaxAttempts counts the first attempt; 0: no limit, 1: no retries.
	MaxAttempts int
	// Deadline bounds all attempts of one call (of a Watch's Next: from the
	// stream's first failure); 0: only the context does.
	Deadline time.Duration
}

// DefaultRetryPolicy is the Python client's: 50 ms growing to 2 s, for 30 s.
var DefaultRetryPolicy = RetryPolicy{
	Initial:    50 * time.Millisecond,
	Max:        2 * time.Second,
	Multiplier: 2,
	Deadline:   30 * time.Second,
}

// NoRetry makes every call a single attempt.
var NoRetry = RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, MaxAttempts: 1}

func (p RetryPolicy) validate() error {
	if p.Initial <= 0 || p.Max < p.Initial || p.Multiplier < 1 || p.MaxAttempts < 0 || p.Deadline < 0 {
		return fmt.Errorf("runstore: RetryPolicy %+v: need 0 < Initial <= Max, Multiplier >= 1, MaxAttempts >= 0, Deadline >= 0", p)
	}
	return nil
}

// Decision is what the client did after a failed attempt.
type Decision string

const (
	// Retrying: the identical request is resent after Refusal.Delay.
	Retrying Decision = "retrying"
	// NotRetryable: the error is returned at once (Error.Retryable is false).
	NotRetryable Decision = "not retryable"
	// AttemptsExhausted: RetryPolicy.MaxAttempts attempts failed.
	AttemptsExhausted Decision = "max attempts reached"
	// DeadlineReached: the next sleep would pass RetryPolicy.Deadline or the
	// context's deadline.
	DeadlineReached Decision = "deadline reached"
	// ContextEnded: the caller's context ended; the call returns ctx.Err().
	ContextEnded Decision = "context ended"
	// TooLarge: the request is over the message size limit and was not sent.
	TooLarge Decision = "request too large"
)

// Refusal reports one failed attempt of a call (WithRefusalHook, WithLogger).
type Refusal struct {
	// Method is the gRPC method, e.g. /runstore.v1.RuntimeStore/AppendRunRecord.
	Method string
	// Attempt is the number of the attempt that failed, from 1.
	Attempt  int
	Err      *Error
	Decision Decision
	// Delay is the sleep before the next attempt when Decision is Retrying.
	Delay time.Duration
}

// report hands a refusal to the hook and the logger: a retry, or a retryable
// failure given up, as a warning (never a silent retry); the rest at debug
// level, since the caller gets the error.
func (c *Client) report(ctx context.Context, refusal Refusal) {
	if c.opts.hook != nil {
		c.opts.hook(refusal)
	}
	level := slog.LevelWarn
	if refusal.Decision == NotRetryable || refusal.Decision == ContextEnded {
		level = slog.LevelDebug
	}
	c.opts.logger.LogAttrs(ctx, level, "runstore: call failed",
		slog.String("method", refusal.Method),
		slog.Int("attempt", refusal.Attempt),
		slog.String("code", refusal.Err.Code().String()),
		slog.String("reason", refusal.Err.Reason()),
		slog.String("decision", string(refusal.Decision)),
		slog.Duration("delay", refusal.Delay),
		slog.String("error", refusal.Err.Error()),
	)
}

// withRetry runs attempt until it succeeds, fails for good, or the policy or
// the context end the call. With bounded, attempt gets a context bounded by
// the call timeout and the policy's deadline (a Watch stream's is not).
func (c *Client) withRetry(ctx context.Context, method string, bounded bool, attempt func(context.Context) error) error {
	policy := c.opts.retry
	// The policy's deadline runs from the call's start; for a stream, which
	// may run for hours before it breaks, from its first failure.
	deadline := c.retryDeadline(ctx, time.Now())
	backoffCap := policy.Initial
	for number := 1; ; number++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if bounded {
			attemptCtx, cancel := c.attemptContext(ctx, deadline)
			err = attempt(attemptCtx)
			cancel()
		} else {
			err = attempt(ctx)
		}
		if err == nil {
			return nil
		}
		failure, ok := asError(err).(*Error)
		if !ok {
			return err
		}
		if !bounded && number == 1 {
			deadline = c.retryDeadline(ctx, time.Now())
		}
		refusal := Refusal{Method: method, Attempt: number, Err: failure}
		switch {
		case ctx.Err() != nil && (failure.Retryable() || !failure.fromServer):
			refusal.Decision = ContextEnded
			c.report(ctx, refusal)
			return ctx.Err()
		case !failure.Retryable():
			refusal.Decision = NotRetryable
			c.report(ctx, refusal)
			return failure
		case policy.MaxAttempts > 0 && number >= policy.MaxAttempts:
			refusal.Decision = AttemptsExhausted
			c.report(ctx, refusal)
			return failure
		}
		delay := time.Duration(rand.Int64N(int64(backoffCap)))
		if asked, ok := failure.RetryDelay(); ok {
			delay += asked
		}
		backoffCap = min(time.Duration(float64(backoffCap)*policy.Multiplier), policy.Max)
		if !deadline.IsZero() && !time.Now().Add(delay).Before(deadline) {
			refusal.Decision = DeadlineReached
			c.report(ctx, refusal)
			return failure
		}
		refusal.Decision, refusal.Delay = Retrying, delay
		c.report(ctx, refusal)
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// retryDeadline is when retries stop: RetryPolicy.Deadline after from, or
// the context's deadline if sooner; zero for none.
func (c *Client) retryDeadline(ctx context.Context, from time.Time) time.Time {
	var deadline time.Time
	if c.opts.retry.Deadline > 0 {
		deadline = from.Add(c.opts.retry.Deadline)
	}
	if ctxDeadline, ok := ctx.Deadline(); ok && (deadline.IsZero() || ctxDeadline.Before(deadline)) {
		deadline = ctxDeadline
	}
	return deadline
}

func (c *Client) attemptContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if c.opts.callTimeout > 0 {
		attemptDeadline := time.Now().Add(c.opts.callTimeout)
		if deadline.IsZero() || attemptDeadline.Before(deadline) {
			deadline = attemptDeadline
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}
