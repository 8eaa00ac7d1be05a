package runstore

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Client calls one runstore server. It is safe for concurrent use.
type Client struct {
	conn      grpc.ClientConnInterface
	owned     *grpc.ClientConn
	opts      options
	coalescer *coalescer // nil: WithoutCoalescing
}

func newClient(conn grpc.ClientConnInterface, owned *grpc.ClientConn, o options) *Client {
	c := &Client{conn: conn, owned: owned, opts: o}
	if o.coalescing != nil {
		c.coalescer = newCoalescer(c, *o.coalescing)
	}
	return c
}

// New makes a client over conn, which the caller owns (and closes). Transport
// options (WithTLS, WithInsecure, WithDialOptions) belong to Dial and are
// refused here.
func New(conn grpc.ClientConnInterface, opts ...Option) (*Client, error) {
	if conn == nil {
		return nil, errors.New("runstore: New(nil)")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.tls != nil || o.insecure || len(o.dialOptions) > 0 {
		return nil, errors.New("runstore: WithTLS, WithInsecure and WithDialOptions are Dial's; New takes a connection made with them")
	}
	return newClient(conn, nil, o), nil
}

// Dial connects to target (host:port or any gRPC target) with the server's
// keepalive policy and message limits; it needs WithTLS or WithInsecure.
// Close releases the connection.
func Dial(target string, opts ...Option) (*Client, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	var transport credentials.TransportCredentials
	switch {
	case o.tls != nil:
		transport = credentials.NewTLS(o.tls)
	case o.insecure:
		transport = insecure.NewCredentials()
	default:
		return nil, errors.New("runstore: Dial needs WithTLS(config) or WithInsecure()")
	}
	dialOptions := append([]grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                KeepaliveTime,
			Timeout:             KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithIdleTimeout(IdleTimeout),
	}, o.dialOptions...)
	conn, err := grpc.NewClient(target, dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("runstore: Dial(%q): %w", target, err)
	}
	return newClient(conn, conn, o), nil
}

// Close closes the connection Dial made; a client made by New leaves its
// connection to the caller.
func (c *Client) Close() error {
	if c.owned == nil {
		return nil
	}
	return c.owned.Close()
}

// Conn is the connection the client calls through.
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// outgoing adds the namespace and the token to the caller's metadata.
func (c *Client) outgoing(ctx context.Context) (context.Context, error) {
	var pairs []string
	if c.opts.namespace != "" {
		pairs = append(pairs, NamespaceMetadataKey, c.opts.namespace)
	}
	if c.opts.token != nil {
		token, err := c.opts.token.token()
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, "authorization", "Bearer "+token)
	}
	if len(pairs) == 0 {
		return ctx, nil
	}
	return metadata.AppendToOutgoingContext(ctx, pairs...), nil
}

// invoke makes a unary call: the request is encoded once and those bytes are
// sent by every attempt, so a retry is the identical message.
func (c *Client) invoke(ctx context.Context, method string, request, response proto.Message) error {
	encoded, err := proto.MarshalOptions{Deterministic: true}.Marshal(request)
	if err != nil {
		return fmt.Errorf("runstore: encoding %s: %w", method, err)
	}
	if len(encoded) > c.opts.maxSend {
		failure := fromStatus(status.Newf(codes.ResourceExhausted,
			"request of %d bytes is over the %d-byte message limit (WithMaxMessageBytes, the server's --max-message-bytes); not sent",
			len(encoded), c.opts.maxSend))
		c.report(ctx, Refusal{Method: method, Attempt: 0, Err: failure, Decision: TooLarge})
		return failure
	}
	callOptions := []grpc.CallOption{
		// ForceCodec is marked experimental in gRPC-Go; the version is pinned
		// in go.mod and the tests send through it on every call.
		grpc.ForceCodec(frozenCodec{}),
		grpc.MaxCallSendMsgSize(c.opts.maxSend + 1024),
		grpc.MaxCallRecvMsgSize(c.opts.maxReceive),
	}
	return c.withRetry(ctx, method, true, func(attemptCtx context.Context) error {
		callCtx, err := c.outgoing(attemptCtx)
		if err != nil {
			return err
		}
		proto.Reset(response)
		return c.conn.Invoke(callCtx, method, frozen(encoded), response, callOptions...)
	})
}

// frozen is a request already encoded.
type frozen []byte

// frozenCodec sends frozen requests as they are and decodes responses as
// protobuf; its name keeps the standard content type.
type frozenCodec struct{}

func (frozenCodec) Name() string { return "proto" }

func (frozenCodec) Marshal(v any) ([]byte, error) {
	switch message := v.(type) {
	case frozen:
		return message, nil
	case proto.Message:
		return proto.MarshalOptions{Deterministic: true}.Marshal(message)
	}
	return nil, fmt.Errorf("runstore: cannot encode %T", v)
}

func (frozenCodec) Unmarshal(data []byte, v any) error {
	message, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("runstore: cannot decode into %T", v)
	}
	return proto.Unmarshal(data, message)
}
