package runstore

import (
	"context"
	"time"

	runstorev1 "github.com/runstore/runstore/gen/go/runstore/v1"
)

// The host's calls: SessionAdmin. The listings and bulk purges take and
// return the generated messages, whose filters are many and optional.

// CreateSession creates an active session; creating it again answers the
// stored session unchanged.
func (c *Client) CreateSession(ctx context.Context, sessionID string, createdAt time.Time) (Session, error) {
	var response runstorev1.CreateSessionResponse
	err := c.invoke(ctx, runstorev1.SessionAdmin_CreateSession_FullMethodName,
		&runstorev1.CreateSessionRequest{SessionId: sessionID, CreatedAt: timestamp(createdAt)}, &response)
	if err != nil {
		return Session{}, err
	}
	return sessionFromWire(response.GetSession()), nil
}

// LoadSession is one session (ErrSessionNotFound, ErrSessionPurged).
func (c *Client) LoadSession(ctx context.Context, sessionID string) (Session, error) {
	var response runstorev1.LoadSessionResponse
	err := c.invoke(ctx, runstorev1.SessionAdmin_LoadSession_FullMethodName,
		&runstorev1.LoadSessionRequest{SessionId: sessionID}, &response)
	if err != nil {
		return Session{}, err
	}
	return sessionFromWire(response.GetSession()), nil
}

// EndSession ends a session; the first call's endedAt stays.
func (c *Client) EndSession(ctx context.Context, sessionID string, endedAt time.Time) (Session, error) {
	var response runstorev1.EndSessionResponse
	err := c.invoke(ctx, runstorev1.SessionAdmin_EndSession_FullMethodName,
		&runstorev1.EndSessionRequest{SessionId: sessionID, EndedAt: timestamp(endedAt)}, &response)
	if err != nil {
		return Session{}, err
	}
	return sessionFromWire(response.GetSession()), nil
}

// PurgeSession deletes an ended session's runs and records and leaves a
// tombstone (ErrSessionActive, ErrSessionHasActiveRuns).
func (c *Client) PurgeSession(ctx context.Context, sessionID string) error {
	return c.invoke(ctx, runstorev1.SessionAdmin_PurgeSession_FullMethodName,
		&runstorev1.PurgeSessionRequest{SessionId: sessionID}, &runstorev1.PurgeSessionResponse{})
}

// ListRunsBySession is the session's runs, of the given statuses (none: all).
func (c *Client) ListRunsBySession(ctx context.Context, sessionID string, statuses ...RunStatus) ([]RunMeta, error) {
	var response runstorev1.ListRunsBySessionResponse
	err := c.invoke(ctx, runstorev1.SessionAdmin_ListRunsBySession_FullMethodName,
		&runstorev1.ListRunsBySessionRequest{SessionId: sessionID, Statuses: statuses}, &response)
	if err != nil {
		return nil, err
	}
	return runMetasFromWire(response.GetRuns()), nil
}

// ListSessions is one page of sessions; pass NextPageToken back as PageToken.
func (c *Client) ListSessions(ctx context.Context, request *runstorev1.ListSessionsRequest) (*runstorev1.ListSessionsResponse, error) {
	response := &runstorev1.ListSessionsResponse{}
	if err := c.invoke(ctx, runstorev1.SessionAdmin_ListSessions_FullMethodName, request, response); err != nil {
		return nil, err
	}
	return response, nil
}

// ListRuns is one page of runs matching the request's filters.
func (c *Client) ListRuns(ctx context.Context, request *runstorev1.ListRunsRequest) (*runstorev1.ListRunsResponse, error) {
	response := &runstorev1.ListRunsResponse{}
	if err := c.invoke(ctx, runstorev1.SessionAdmin_ListRuns_FullMethodName, request, response); err != nil {
		return nil, err
	}
	return response, nil
}

// PurgeEndedSessions purges up to Limit sessions ended before EndedBefore.
func (c *Client) PurgeEndedSessions(ctx context.Context, request *runstorev1.PurgeEndedSessionsRequest) (*runstorev1.PurgeEndedSessionsResponse, error) {
	response := &runstorev1.PurgeEndedSessionsResponse{}
	if err := c.invoke(ctx, runstorev1.SessionAdmin_PurgeEndedSessions_FullMethodName, request, response); err != nil {
		return nil, err
	}
	return response, nil
}

// PurgeSessionlessRuns purges up to Limit sessionless runs finished before
// FinishedBefore.
func (c *Client) PurgeSessionlessRuns(ctx context.Context, request *runstorev1.PurgeSessionlessRunsRequest) (*runstorev1.PurgeSessionlessRunsResponse, error) {
	response := &runstorev1.PurgeSessionlessRunsResponse{}
	if err := c.invoke(ctx, runstorev1.SessionAdmin_PurgeSessionlessRuns_FullMethodName, request, response); err != nil {
		return nil, err
	}
	return response, nil
}
