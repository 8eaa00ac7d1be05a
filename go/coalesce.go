package runstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// Coalescing bounds how concurrent AppendRunRecord calls of one Client share
// messages (docs/limits.md, "Coalesced appends"). While fewer than
// MaxMessagesInFlight messages are on the wire an append goes out at once, as
// a plain AppendRunRecord: a lone append is never delayed. Appends arriving
// while that many are in flight wait for one to finish, then leave together
// in one AppendRunRecordCalls message, which the server serves as that many
// separate calls: each keeps its own result or error, its own deadline (sent
// with it), its own retries and its own cancellation (an append whose context
// ends while queued is never sent). Order across runs is not promised.
type Coalescing struct {
	// MaxMessagesInFlight is how many messages may be on the wire at once.
	MaxMessagesInFlight int
	// MaxCalls is the most appends one message carries (the server's 128).
	MaxCalls int
	// MaxMessageBytes is the most payload bytes one message carries (the server's 4 MiB).
	MaxMessageBytes int
	// MaxQueuedBytes is the most payload bytes waiting to be sent; past it a
	// caller waits for room, within its context (and WithCallTimeout).
	MaxQueuedBytes int
}

// DefaultCoalescing is the Python client's AppendCoalescing.
var DefaultCoalescing = Coalescing{
	MaxMessagesInFlight: 2,
	MaxCalls:            128,
	MaxMessageBytes:     4 << 20,
	MaxQueuedBytes:      16 << 20,
}

func (b Coalescing) validate() error {
	if b.MaxMessagesInFlight < 1 || b.MaxCalls < 1 || b.MaxCalls > DefaultCoalescing.MaxCalls ||
		b.MaxMessageBytes < 1 || b.MaxMessageBytes > DefaultCoalescing.MaxMessageBytes || b.MaxQueuedBytes < b.MaxMessageBytes {
		return fmt.Errorf("runstore: Coalescing %+v: need MaxMessagesInFlight >= 1, 1 <= MaxCalls <= 128, "+
			"1 <= MaxMessageBytes <= 4 MiB, MaxQueuedBytes >= MaxMessageBytes", b)
	}
	return nil
}

// WithCoalescing replaces DefaultCoalescing.
func WithCoalescing(bounds Coalescing) Option {
	return func(o *options) error {
		if err := bounds.validate(); err != nil {
			return err
		}
		o.coalescing = &bounds
		return nil
	}
}

// WithoutCoalescing makes every AppendRunRecord a call of its own.
func WithoutCoalescing() Option {
	return func(o *options) error {
		o.coalescing = nil
		o.coalescingOff = true
		return nil
	}
}

// queued is one attempt of one append waiting for a message.
type queued struct {
	ctx      context.Context
	request  *runstorev1.AppendRunRecordRequest
	size     int
	done     chan struct{}
	response *runstorev1.AppendRunRecordResponse
	err      error
	taken    bool // sent, or dropped because its caller left
}

func (q *queued) settle(response *runstorev1.AppendRunRecordResponse, err error) {
	q.response, q.err = response, err
	close(q.done)
}

// coalescer shares messages among the AppendRunRecord attempts of a Client.
type coalescer struct {
	client *Client

	mu          sync.Mutex
	bounds      Coalescing
	queue       []*queued
	queuedBytes int
	inFlight    int
	room        chan struct{} // closed (and replaced) when queued bytes are released
	sent        int           // messages sent, both methods
	waiting     int           // callers waiting for room (the queued bytes' bound)
}

func newCoalescer(client *Client, bounds Coalescing) *coalescer {
	return &coalescer{client: client, bounds: bounds, room: make(chan struct{})}
}

func contextStatus(ctx context.Context) error {
	return status.FromContextError(ctx.Err()).Err()
}

// append is one attempt of one append, within ctx.
func (c *coalescer) append(ctx context.Context, request *runstorev1.AppendRunRecordRequest) (*runstorev1.AppendRunRecordResponse, error) {
	c.mu.Lock()
	if c.inFlight < c.bounds.MaxMessagesInFlight && len(c.queue) == 0 {
		c.inFlight++
		c.sent++
		c.mu.Unlock()
		response, err := c.sendOne(ctx, request)
		c.mu.Lock()
		c.inFlight--
		c.flushLocked()
		c.mu.Unlock()
		return response, err
	}
	size := len(request.GetRecord().GetPayload())
	for c.queuedBytes > 0 && c.queuedBytes+size > c.bounds.MaxQueuedBytes {
		room := c.room
		c.waiting++
		c.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			c.mu.Lock()
			c.waiting--
			c.mu.Unlock()
			return nil, contextStatus(ctx)
		}
		c.mu.Lock()
		c.waiting--
	}
	q := &queued{ctx: ctx, request: request, size: size, done: make(chan struct{})}
	c.queue = append(c.queue, q)
	c.queuedBytes += size
	c.flushLocked()
	c.mu.Unlock()
	select {
	case <-q.done:
		return q.response, q.err
	case <-ctx.Done():
		c.mu.Lock()
		if !q.taken { // never sent
			q.taken = true
			c.unqueueLocked(q)
		}
		c.mu.Unlock()
		// Sent already: it may still be stored, as a unary call cancelled may.
		return nil, contextStatus(ctx)
	}
}

func (c *coalescer) unqueueLocked(q *queued) {
	for i, other := range c.queue {
		if other == q {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			c.releaseLocked(q.size)
			return
		}
	}
}

func (c *coalescer) releaseLocked(size int) {
	c.queuedBytes -= size
	close(c.room)
	c.room = make(chan struct{})
}

// flushLocked sends what is queued, a message at a time, while there is room on the wire.
func (c *coalescer) flushLocked() {
	for len(c.queue) > 0 && c.inFlight < c.bounds.MaxMessagesInFlight {
		var batch []*queued
		payload := 0
		for len(c.queue) > 0 && len(batch) < c.bounds.MaxCalls {
			head := c.queue[0]
			if len(batch) > 0 && payload+head.size > c.bounds.MaxMessageBytes {
				break
			}
			c.queue = c.queue[1:]
			c.releaseLocked(head.size)
			head.taken = true
			batch = append(batch, head)
			payload += head.size
		}
		c.inFlight++
		c.sent++
		go c.carry(batch)
	}
}

func (c *coalescer) messagesSent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// sendOne is one plain AppendRunRecord attempt.
func (c *coalescer) sendOne(ctx context.Context, request *runstorev1.AppendRunRecordRequest) (*runstorev1.AppendRunRecordResponse, error) {
	var response runstorev1.AppendRunRecordResponse
	err := c.client.attempt(ctx, runstorev1.RuntimeStore_AppendRunRecord_FullMethodName, request, &response)
	return &response, err
}

func (c *coalescer) carry(batch []*queued) {
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.flushLocked()
		c.mu.Unlock()
	}()
	if len(batch) == 1 { // one append needs no carrier
		batch[0].settle(c.sendOne(batch[0].ctx, batch[0].request))
		return
	}
	now := time.Now()
	request := &runstorev1.AppendRunRecordCallsRequest{Calls: make([]*runstorev1.AppendRunRecordCall, len(batch))}
	var latest time.Time
	bounded := true
	for i, q := range batch {
		call := &runstorev1.AppendRunRecordCall{Request: q.request}
		if deadline, ok := q.ctx.Deadline(); ok {
			call.Timeout = durationpb.New(max(0, deadline.Sub(now)))
			latest = maxTime(latest, deadline)
		} else {
			bounded = false
		}
		request.Calls[i] = call
	}
	// The message is no caller's: it outlives none of their deadlines, a
	// caller leaving does not cancel its neighbours', and no caller's
	// outgoing metadata rides on the others' calls.
	ctx, cancel := context.WithCancel(context.Background())
	if bounded {
		ctx, cancel = context.WithDeadline(context.Background(), latest)
	}
	defer cancel()
	var response runstorev1.AppendRunRecordCallsResponse
	err := c.client.attempt(ctx, runstorev1.RuntimeStore_AppendRunRecordCalls_FullMethodName, request, &response)
	if status.Code(err) == codes.Unimplemented {
		// A server older than AppendRunRecordCalls: every append alone from now on.
		c.mu.Lock()
		c.bounds.MaxCalls = 1
		c.mu.Unlock()
		for _, q := range batch {
			q.settle(c.sendOne(q.ctx, q.request))
		}
		return
	}
	if err == nil && len(response.GetOutcomes()) != len(batch) {
		err = status.Errorf(codes.Internal, "AppendRunRecordCalls answered %d outcomes for %d calls", len(response.GetOutcomes()), len(batch))
	}
	if err != nil { // the message failed as a whole: each of its appends failed so
		for _, q := range batch {
			q.settle(nil, err)
		}
		return
	}
	for i, q := range batch {
		outcome := response.GetOutcomes()[i]
		if failure := outcome.GetError(); failure != nil {
			q.settle(nil, status.FromProto(&spb.Status{
				Code: failure.GetCode(), Message: failure.GetMessage(), Details: failure.GetDetails(),
			}).Err())
			continue
		}
		q.settle(outcome.GetResponse(), nil)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// attempt is one unary call without retries, with the client's metadata.
func (c *Client) attempt(ctx context.Context, method string, request, response proto.Message) error {
	callCtx, err := c.outgoing(ctx)
	if err != nil {
		return err
	}
	return c.conn.Invoke(callCtx, method, request, response,
		grpc.MaxCallSendMsgSize(c.opts.maxSend+1024), grpc.MaxCallRecvMsgSize(c.opts.maxReceive))
}
