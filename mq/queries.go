package mq

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/inferq/inferq/lograte"
	pb "github.com/kubemq-io/protobuf/go"
)

// QueryRequest is a query received by SubscribeQueries.
type QueryRequest struct {
	ID       string
	Channel  string
	ClientID string // the requester
	Metadata string
	Body     []byte
	Tags     map[string]string
	// Timeout is the requester's timeout; after Received+Timeout nobody
	// waits for the answer (the handler's ctx ends then).
	Timeout  time.Duration
	Received time.Time
}

// Deadline is when the requester gives up.
func (q *QueryRequest) Deadline() time.Time { return q.Received.Add(q.Timeout) }

// QueryResponse is a handler's answer. It is sent with executed=true; Err,
// when set, travels as the response's error text.
type QueryResponse struct {
	Body     []byte
	Metadata string
	Tags     map[string]string
	Err      error
}

// QueryResult is what Query returns.
type QueryResult struct {
	Body     []byte
	Metadata string
	Tags     map[string]string
	Executed bool
	// Error is the responder's error text, if any.
	Error string
}

// QueryHandler answers one query. ctx ends at the request's deadline or
// when the subscription stops. Handlers run concurrently.
type QueryHandler func(ctx context.Context, req *QueryRequest) QueryResponse

// maxQueryHandlers bounds the handlers running at once per subscription;
// at the bound the subscription stops reading (backpressure).
const maxQueryHandlers = 64

// SubscribeQueries answers the queries of channel (with group, members of
// a group share the queries, each answered once) until ctx ends, then
// waits for the running handlers and returns nil (ErrClosed when the Conn
// closed). It resubscribes with backoff after a stream loss or a broker
// restart (trap 9). An answer finished after the request's deadline is not
// sent: the requester is gone.
func (c *Conn) SubscribeQueries(ctx context.Context, channel, group string, handler QueryHandler) error {
	if channel == "" || handler == nil {
		return errors.New("mq: subscribe queries: empty channel or nil handler")
	}
	if err := c.isClosed(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAfter := context.AfterFunc(c.life, cancel)
	defer stopAfter()
	log := c.log.With("channel", channel, "group", group)
	sub := &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Queries, ClientID: c.cfg.ClientID, Channel: channel, Group: group}
	sem := make(chan struct{}, maxQueryHandlers)
	var wg sync.WaitGroup
	defer wg.Wait()
	warn := lograte.New(log, c.cfg.LogRepeatEvery)
	retry := c.newBackoff()
	for ctx.Err() == nil {
		err := c.ready(ctx)
		var stream pb.Kubemq_SubscribeToRequestsClient
		if err == nil {
			stream, err = c.api.SubscribeToRequests(ctx, sub)
		}
		for err == nil {
			var req *pb.Request
			req, err = stream.Recv()
			if err != nil {
				break
			}
			retry.Reset()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c.answer(ctx, req, handler, log)
			}()
		}
		if ctx.Err() != nil {
			break
		}
		warn.Warn("mq query subscription lost, resubscribing", "err", classify("subscribe queries", err))
		sleep(ctx, retry.NextBackOff())
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

func (c *Conn) answer(ctx context.Context, r *pb.Request, handler QueryHandler, log interface {
	Warn(string, ...any)
}) {
	q := &QueryRequest{
		ID: r.RequestID, Channel: r.Channel, ClientID: r.ClientID, Metadata: r.Metadata, Body: r.Body, Tags: r.Tags,
		Timeout: time.Duration(r.Timeout) * time.Millisecond, Received: time.Now(),
	}
	hctx, cancel := context.WithDeadline(ctx, q.Deadline())
	resp := handler(hctx, q)
	cancel()
	if time.Now().After(q.Deadline()) || ctx.Err() != nil {
		return // the requester has given up
	}
	out := &pb.Response{
		ClientID: c.cfg.ClientID, RequestID: r.RequestID, ReplyChannel: r.ReplyChannel,
		Metadata: resp.Metadata, Body: resp.Body, Tags: resp.Tags,
		Executed: true, Timestamp: time.Now().UnixNano(),
	}
	if resp.Err != nil {
		out.Error = resp.Err.Error()
	}
	sctx, scancel := context.WithDeadline(c.life, q.Deadline())
	defer scancel()
	if _, err := c.api.SendResponse(sctx, out); err != nil && sctx.Err() == nil {
		log.Warn("mq query response failed", "id", r.RequestID, "err", classify("send response", err))
	}
}

// Query sends a query to channel and waits up to timeout for the answer.
// No responder in time gives ErrTimeout. Safe for concurrent use; ctx
// bounds the call as well.
func (c *Conn) Query(ctx context.Context, channel string, body []byte, tags map[string]string, timeout time.Duration) (*QueryResult, error) {
	if err := c.isClosed(); err != nil {
		return nil, err
	}
	ms := max(int32(timeout/time.Millisecond), 1)
	resp, err := c.api.SendRequest(ctx, &pb.Request{
		RequestID: newID(), RequestTypeData: pb.Request_Query, ClientID: c.cfg.ClientID,
		Channel: channel, Body: body, Tags: maps.Clone(tags), Timeout: ms,
	})
	if err != nil {
		return nil, classify("query "+channel, err)
	}
	if !resp.Executed && resp.Error != "" {
		if k := textKind(resp.Error); k != nil || strings.Contains(resp.Error, "Error ") {
			return nil, classify("query "+channel, errors.New(resp.Error))
		}
	}
	return &QueryResult{Body: resp.Body, Metadata: resp.Metadata, Tags: resp.Tags, Executed: resp.Executed, Error: resp.Error}, nil
}
