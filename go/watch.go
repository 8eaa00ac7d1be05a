package runstore

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// Watch is a live stream of a session's or a run's records (docs/watch.md):
// each Next returns the records committed after the last one it returned,
// in order, never twice. A broken stream is reopened from the last cursor
// received, under the client's RetryPolicy (counted from each Next).
type Watch struct {
	client *Client
	method string
	open   func(ctx context.Context, cursor string) (grpc.ClientStream, error)
	recv   func(stream grpc.ClientStream) ([]*runstorev1.RunRecord, string, error)

	ctx    context.Context
	cancel context.CancelFunc

	mu           sync.Mutex // one Next at a time
	cursorMu     sync.Mutex
	cursor       string
	stream       grpc.ClientStream
	streamCancel context.CancelFunc
}

// WatchSessionRunRecords watches a session's records after cursor ("" from
// the first); the stream runs until ctx ends or Close.
func (c *Client) WatchSessionRunRecords(ctx context.Context, sessionID, cursor string) *Watch {
	stub := runstorev1.NewRuntimeStoreClient(c.conn)
	return c.newWatch(ctx, runstorev1.RuntimeStore_WatchSessionRunRecords_FullMethodName, cursor,
		func(ctx context.Context, cursor string) (grpc.ClientStream, error) {
			return stub.WatchSessionRunRecords(ctx,
				&runstorev1.WatchSessionRunRecordsRequest{SessionId: sessionID, Cursor: cursor}, c.streamOptions()...)
		},
		func(stream grpc.ClientStream) ([]*runstorev1.RunRecord, string, error) {
			response, err := stream.(grpc.ServerStreamingClient[runstorev1.WatchSessionRunRecordsResponse]).Recv()
			return response.GetEvents(), response.GetNextCursor(), err
		})
}

// WatchRunRecords watches one run's records after cursor; Next returns
// io.EOF after the run's terminal or suspension record.
func (c *Client) WatchRunRecords(ctx context.Context, runID, cursor string) *Watch {
	stub := runstorev1.NewRuntimeStoreClient(c.conn)
	return c.newWatch(ctx, runstorev1.RuntimeStore_WatchRunRecords_FullMethodName, cursor,
		func(ctx context.Context, cursor string) (grpc.ClientStream, error) {
			return stub.WatchRunRecords(ctx,
				&runstorev1.WatchRunRecordsRequest{RunId: runID, Cursor: cursor}, c.streamOptions()...)
		},
		func(stream grpc.ClientStream) ([]*runstorev1.RunRecord, string, error) {
			response, err := stream.(grpc.ServerStreamingClient[runstorev1.WatchRunRecordsResponse]).Recv()
			return response.GetEvents(), response.GetNextCursor(), err
		})
}

func (c *Client) streamOptions() []grpc.CallOption {
	return []grpc.CallOption{grpc.MaxCallRecvMsgSize(c.opts.maxReceive)}
}

func (c *Client) newWatch(
	ctx context.Context, method, cursor string,
	open func(context.Context, string) (grpc.ClientStream, error),
	recv func(grpc.ClientStream) ([]*runstorev1.RunRecord, string, error),
) *Watch {
	watchCtx, cancel := context.WithCancel(ctx)
	return &Watch{client: c, method: method, open: open, recv: recv, ctx: watchCtx, cancel: cancel, cursor: cursor}
}

// Cursor is the position of the last record Next returned (resume from it);
// it may be read while a Next blocks.
func (w *Watch) Cursor() string {
	w.cursorMu.Lock()
	defer w.cursorMu.Unlock()
	return w.cursor
}

// Next blocks until records arrive (heartbeats are skipped) and returns
// them with the cursor after them; io.EOF when a run's stream ended, ctx.Err()
// once the context ended or the watch was closed.
func (w *Watch) Next() (Page, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var page Page
	err := w.client.withRetry(w.ctx, w.method, false, func(context.Context) error {
		for {
			if w.stream == nil {
				streamCtx, streamCancel := context.WithCancel(w.ctx)
				callCtx, err := w.client.outgoing(streamCtx)
				if err != nil {
					streamCancel()
					return err
				}
				stream, err := w.open(callCtx, w.Cursor())
				if err != nil {
					streamCancel()
					return err
				}
				w.stream, w.streamCancel = stream, streamCancel
			}
			events, next, err := w.recv(w.stream)
			if err != nil {
				w.drop()
				if errors.Is(err, io.EOF) {
					return io.EOF
				}
				return err
			}
			if len(events) == 0 {
				continue
			}
			w.cursorMu.Lock()
			w.cursor = next
			w.cursorMu.Unlock()
			page = Page{Records: recordsFromWire(events), NextCursor: next}
			return nil
		}
	})
	return page, err
}

func (w *Watch) drop() {
	if w.streamCancel != nil {
		w.streamCancel()
	}
	w.stream, w.streamCancel = nil, nil
}

// Close ends the stream; a Next in progress returns context.Canceled.
func (w *Watch) Close() {
	w.cancel()
}
