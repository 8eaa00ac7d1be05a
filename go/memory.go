package runstore

import (
	"context"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
	"google.golang.org/protobuf/proto"
)

// MemoryStore and ContextStore (docs/memory.md) take and return the
// generated messages: their shapes are goa-ai's memory and context types,
// which an adapter converts once.

func unary[Resp any, PResp interface {
	*Resp
	proto.Message
}](c *Client, ctx context.Context, method string, request proto.Message) (PResp, error) {
	response := PResp(new(Resp))
	if err := c.invoke(ctx, method, request, response); err != nil {
		return nil, err
	}
	return response, nil
}

// MemoryLoadRun is one page of a memory run's events.
func (c *Client) MemoryLoadRun(ctx context.Context, request *runstorev1.MemoryLoadRunRequest) (*runstorev1.MemoryLoadRunResponse, error) {
	return unary[runstorev1.MemoryLoadRunResponse](c, ctx, runstorev1.MemoryStore_LoadRun_FullMethodName, request)
}

// MemoryAppendEvents appends events once per idempotency key.
func (c *Client) MemoryAppendEvents(ctx context.Context, request *runstorev1.AppendEventsRequest) (*runstorev1.AppendEventsResponse, error) {
	return unary[runstorev1.AppendEventsResponse](c, ctx, runstorev1.MemoryStore_AppendEvents_FullMethodName, request)
}

// MemoryDeleteRun deletes a memory run's events.
func (c *Client) MemoryDeleteRun(ctx context.Context, request *runstorev1.MemoryDeleteRunRequest) (*runstorev1.MemoryDeleteRunResponse, error) {
	return unary[runstorev1.MemoryDeleteRunResponse](c, ctx, runstorev1.MemoryStore_DeleteRun_FullMethodName, request)
}

// GetContext is a context key's snapshot (version 0: the current one).
func (c *Client) GetContext(ctx context.Context, request *runstorev1.GetContextRequest) (*runstorev1.GetContextResponse, error) {
	return unary[runstorev1.GetContextResponse](c, ctx, runstorev1.ContextStore_GetContext_FullMethodName, request)
}

// SaveContext saves a snapshot if ExpectedVersion is current
// (ErrContextVersionConflict otherwise, never retried).
func (c *Client) SaveContext(ctx context.Context, request *runstorev1.SaveContextRequest) (*runstorev1.SaveContextResponse, error) {
	return unary[runstorev1.SaveContextResponse](c, ctx, runstorev1.ContextStore_SaveContext_FullMethodName, request)
}

// DeleteContext deletes everything of a context key.
func (c *Client) DeleteContext(ctx context.Context, request *runstorev1.DeleteContextRequest) (*runstorev1.DeleteContextResponse, error) {
	return unary[runstorev1.DeleteContextResponse](c, ctx, runstorev1.ContextStore_DeleteContext_FullMethodName, request)
}

// AppendTranscript appends messages to a key's transcript once per
// idempotency key.
func (c *Client) AppendTranscript(ctx context.Context, request *runstorev1.AppendTranscriptRequest) (*runstorev1.AppendTranscriptResponse, error) {
	return unary[runstorev1.AppendTranscriptResponse](c, ctx, runstorev1.ContextStore_AppendTranscript_FullMethodName, request)
}

// ListTranscript is one page of a key's transcript.
func (c *Client) ListTranscript(ctx context.Context, request *runstorev1.ListTranscriptRequest) (*runstorev1.ListTranscriptResponse, error) {
	return unary[runstorev1.ListTranscriptResponse](c, ctx, runstorev1.ContextStore_ListTranscript_FullMethodName, request)
}
