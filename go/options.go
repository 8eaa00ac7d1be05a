package runstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"google.golang.org/grpc"
)

// Limits and keepalive matching the server's defaults (docs/limits.md,
// server --max-message-bytes and --keepalive-min-ping-interval).
const (
	// DefaultMaxMessageBytes is the server's default --max-message-bytes: a
	// larger request is refused before it is sent, and never retried.
	DefaultMaxMessageBytes = 16 << 20
	// DefaultMaxReceiveBytes bounds a response; the server's largest page
	// (its message limit plus the page envelope) fits.
	DefaultMaxReceiveBytes = 64 << 20
	// KeepaliveTime is the ping interval of Dial's connections: the server
	// accepts a ping every 10 s at most and disconnects (GOAWAY
	// too_many_pings) a client that pings more often.
	KeepaliveTime = 30 * time.Second
	// KeepaliveTimeout is how long a ping's answer may take before the
	// connection is dropped.
	KeepaliveTimeout = 10 * time.Second
	// IdleTimeout closes an idle connection before the server's 300 s idle
	// limit would (the next call reconnects).
	IdleTimeout = 240 * time.Second
)

// NamespaceMetadataKey is the gRPC metadata key that names a call's
// namespace (docs/namespaces.md).
const NamespaceMetadataKey = "x-runstore-namespace"

var namespaceRule = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Option configures a Client (New and Dial).
type Option func(*options) error

type options struct {
	tls          *tls.Config
	insecure     bool
	token        tokenSource
	namespace    string
	callTimeout  time.Duration
	retry        RetryPolicy
	logger       *slog.Logger
	hook         func(Refusal)
	maxSend      int
	maxReceive   int
	dialOptions  []grpc.DialOption
	transportSet bool
	// coalescing: nil with coalescingOff (WithoutCoalescing), else DefaultCoalescing's or WithCoalescing's.
	coalescing    *Coalescing
	coalescingOff bool
}

// WithTLS makes Dial connect over TLS with this configuration (its RootCAs,
// Certificates for mTLS, ServerName). Dial needs WithTLS or WithInsecure.
func WithTLS(config *tls.Config) Option {
	return func(o *options) error {
		if config == nil {
			return errors.New("runstore: WithTLS(nil): pass a *tls.Config, or WithInsecure()")
		}
		if o.insecure {
			return errors.New("runstore: WithTLS and WithInsecure together")
		}
		o.tls = config.Clone()
		return nil
	}
}

// WithInsecure makes Dial connect in plaintext: loopback or a trusted
// network only (docs/security.md).
func WithInsecure() Option {
	return func(o *options) error {
		if o.tls != nil {
			return errors.New("runstore: WithTLS and WithInsecure together")
		}
		o.insecure = true
		return nil
	}
}

// WithToken sends "authorization: Bearer <token>" with every call; the
// token's surrounding whitespace is dropped, and an empty one or one with a
// character a gRPC header cannot carry is refused.
func WithToken(token string) Option {
	return func(o *options) error {
		if o.token != nil {
			return errors.New("runstore: WithToken and WithTokenFile together")
		}
		cleaned, err := cleanToken(token, "WithToken")
		if err != nil {
			return err
		}
		o.token = staticToken(cleaned)
		return nil
	}
}

// WithTokenFile sends the token the file at path holds, read now (an
// unreadable or unusable file fails New or Dial) and read again before an
// attempt whenever the file changed, so a rotated token is picked up.
func WithTokenFile(path string) Option {
	return func(o *options) error {
		if o.token != nil {
			return errors.New("runstore: WithToken and WithTokenFile together")
		}
		file, err := newTokenFile(path)
		if err != nil {
			return err
		}
		o.token = file
		return nil
	}
}

// WithNamespace makes every call act in this namespace, sent as
// x-runstore-namespace; without it the server decides (the principal's only
// namespace, or "default").
func WithNamespace(namespace string) Option {
	return func(o *options) error {
		if !namespaceRule.MatchString(namespace) {
			return fmt.Errorf("runstore: WithNamespace(%q): a namespace matches %s", namespace, namespaceRule)
		}
		o.namespace = namespace
		return nil
	}
}

// WithCallTimeout bounds each attempt of a call (not the call: the caller's
// context and RetryPolicy.Deadline do); an attempt that runs out is retried.
func WithCallTimeout(timeout time.Duration) Option {
	return func(o *options) error {
		if timeout <= 0 {
			return fmt.Errorf("runstore: WithCallTimeout(%s): must be positive", timeout)
		}
		o.callTimeout = timeout
		return nil
	}
}

// WithRetry replaces DefaultRetryPolicy.
func WithRetry(policy RetryPolicy) Option {
	return func(o *options) error {
		if err := policy.validate(); err != nil {
			return err
		}
		o.retry = policy
		return nil
	}
}

// WithoutRetry makes every call one attempt (RetryPolicy{MaxAttempts: 1}).
func WithoutRetry() Option {
	return WithRetry(NoRetry)
}

// WithLogger reports every retry, and every retryable failure given up, on
// this logger (slog.Default() otherwise); see Refusal.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) error {
		if logger == nil {
			return errors.New("runstore: WithLogger(nil)")
		}
		o.logger = logger
		return nil
	}
}

// WithRefusalHook calls hook for every failed attempt, with what the client
// did about it, before the retry's sleep; it must not block.
func WithRefusalHook(hook func(Refusal)) Option {
	return func(o *options) error {
		o.hook = hook
		return nil
	}
}

// WithMaxMessageBytes sets the largest request sent (the server's
// --max-message-bytes; DefaultMaxMessageBytes).
func WithMaxMessageBytes(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("runstore: WithMaxMessageBytes(%d): must be positive", n)
		}
		o.maxSend = n
		return nil
	}
}

// WithDialOptions adds gRPC dial options to Dial's (interceptors, a
// resolver, ...); ignored by New.
func WithDialOptions(dialOptions ...grpc.DialOption) Option {
	return func(o *options) error {
		o.dialOptions = append(o.dialOptions, dialOptions...)
		return nil
	}
}

func buildOptions(given []Option) (options, error) {
	o := options{
		retry:      DefaultRetryPolicy,
		logger:     slog.Default(),
		maxSend:    DefaultMaxMessageBytes,
		maxReceive: DefaultMaxReceiveBytes,
	}
	for _, option := range given {
		if err := option(&o); err != nil {
			return options{}, err
		}
	}
	if o.coalescing == nil && !o.coalescingOff {
		bounds := DefaultCoalescing
		o.coalescing = &bounds
	}
	return o, nil
}
