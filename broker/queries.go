package broker

import (
	"context"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// Commands and queries follow the real broker, which carries them as NATS
// requests: each request gets a fresh reply channel ("_INBOX.<id>") that the
// subscribers see as ReplyChannel (kubemq-go's ResponseTo); a response is
// routed by that reply channel, not by its RequestID. Without a group every
// subscriber gets the request and the first response wins; later ones, and
// responses to a reply channel nobody waits on any more, are dropped without
// an error, as NATS drops a publish nobody listens to. Within a group one
// member gets it. A request nobody answers within its Timeout (ms) fails with
// "Error 301: timeout for request message" as a gRPC Internal error, which
// kubemq-go returns as the error of Send (it is not put in Response.Error).
// With no subscriber at all the requester also waits for its whole timeout.
//
// The query cache (CacheKey, CacheTTL) is validated but not served: the
// community broker has none either, so CacheHit is always false.

// SubscribeToRequests streams the commands (SubscribeTypeData Commands) or
// queries (Queries) sent to a channel until the caller goes away or the
// server closes. Channels may use NATS wildcards. Each request carries the
// ReplyChannel its response must be sent to.
func (s *Server) SubscribeToRequests(req *pb.Subscribe, stream pb.Kubemq_SubscribeToRequestsServer) error {
	p := s.pubsub
	if p.isClosed() {
		return psClosed()
	}
	if req == nil {
		req = &pb.Subscribe{}
	}
	r := p.requests(req.SubscribeTypeData)
	if r == nil {
		return psError(psErrSubscribeType)
	}
	if req.ClientID == "" {
		return psError(psErrClientID)
	}
	if err := psValidateChannel(req.Channel, false); err != nil {
		return psError(err)
	}
	return psServe(p, r, stream.Context(), req.Channel, req.Group, req.ClientID, stream.Send)
}

// SendRequest sends a command or query and waits up to its Timeout for the
// first response. Commands come back without Body and Metadata, like the
// real broker's. The wait also ends when ctx ends (with the same timeout
// error, as KubeMQ) or when the server closes (Unavailable).
func (s *Server) SendRequest(ctx context.Context, req *pb.Request) (*pb.Response, error) {
	p := s.pubsub
	if p.isClosed() {
		return nil, psClosed()
	}
	if req == nil {
		req = &pb.Request{}
	}
	var r *psRegistry[*pb.Request]
	switch req.RequestTypeData {
	case pb.Request_Command:
		r = &p.commands
	case pb.Request_Query:
		r = &p.queries
	default:
		return nil, psError(psErrRequestType)
	}
	if err := psValidateRequest(req); err != nil {
		return nil, psError(err)
	}
	if req.RequestID == "" {
		req.RequestID = p.ids.next()
	}
	inbox, wait, done := p.expectResponse()
	defer done()

	r.publish(req.Channel, &pb.Request{
		RequestID:       req.RequestID,
		RequestTypeData: req.RequestTypeData,
		ClientID:        req.ClientID,
		Channel:         req.Channel,
		Metadata:        req.Metadata,
		Body:            req.Body,
		ReplyChannel:    inbox,
		Timeout:         req.Timeout,
		CacheKey:        req.CacheKey,
		CacheTTL:        req.CacheTTL,
		Span:            req.Span,
		Tags:            req.Tags,
	})

	timer := time.NewTimer(time.Duration(req.Timeout) * time.Millisecond)
	defer timer.Stop()
	select {
	case res := <-wait:
		if req.RequestTypeData == pb.Request_Command {
			res.Body, res.Metadata, res.CacheHit = nil, "", false
		}
		return res, nil
	case <-timer.C:
		return nil, psError(psErrRequestTimeout)
	case <-ctx.Done():
		return nil, psError(psErrRequestTimeout)
	case <-p.closed:
		return nil, psClosed()
	}
}

// expectResponse registers a new inbox for one response; done removes it.
func (p *pubSub) expectResponse() (inbox string, wait <-chan *pb.Response, done func()) {
	inbox = "_INBOX." + p.ids.next()
	ch := make(chan *pb.Response, 1)
	p.pendingMu.Lock()
	p.pending[inbox] = ch
	p.pendingMu.Unlock()
	return inbox, ch, func() {
		p.pendingMu.Lock()
		delete(p.pending, inbox)
		p.pendingMu.Unlock()
	}
}

// SendResponse answers the request waiting on res.ReplyChannel. The first
// response to a request wins; a response for a request that has already
// been answered, has timed out, or never existed is dropped without an
// error, like the real broker.
func (s *Server) SendResponse(ctx context.Context, res *pb.Response) (*pb.Empty, error) {
	p := s.pubsub
	if p.isClosed() {
		return nil, psClosed()
	}
	if res == nil {
		res = &pb.Response{}
	}
	if err := psValidateResponse(res); err != nil {
		return nil, psError(err)
	}
	p.pendingMu.Lock()
	wait := p.pending[res.ReplyChannel]
	p.pendingMu.Unlock()
	if wait != nil {
		select {
		case wait <- &pb.Response{
			ClientID:  res.ClientID,
			RequestID: res.RequestID,
			Metadata:  res.Metadata,
			Body:      res.Body,
			CacheHit:  res.CacheHit,
			Timestamp: res.Timestamp,
			Executed:  res.Executed,
			Error:     res.Error,
			Span:      res.Span,
			Tags:      res.Tags,
		}:
		default: // answered already
		}
	}
	return &pb.Empty{}, nil
}

// requests is the registry of a request subscription type, nil for the
// types SubscribeToRequests does not serve.
func (p *pubSub) requests(t pb.Subscribe_SubscribeType) *psRegistry[*pb.Request] {
	switch t {
	case pb.Subscribe_Commands:
		return &p.commands
	case pb.Subscribe_Queries:
		return &p.queries
	}
	return nil
}

// psValidateRequest applies the real broker's checks to a command or query,
// in its order.
func psValidateRequest(req *pb.Request) error {
	if req.ClientID == "" {
		return psErrClientID
	}
	if err := psValidateChannel(req.Channel, true); err != nil {
		return err
	}
	if req.Timeout <= 0 {
		return psErrTimeoutValue
	}
	if req.Metadata == "" && len(req.Body) == 0 {
		return psErrRequestEmpty
	}
	if req.CacheKey != "" && req.CacheTTL <= 0 {
		return psErrCacheTTL
	}
	return nil
}

// psValidateResponse applies the real broker's checks to a response, in its
// order.
func psValidateResponse(res *pb.Response) error {
	if res.ClientID == "" {
		return psErrClientID
	}
	if err := psValidateChannel(res.ReplyChannel, true); err != nil {
		return err
	}
	if res.RequestID == "" {
		return psErrRequestID
	}
	return nil
}
