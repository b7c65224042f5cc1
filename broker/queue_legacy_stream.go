package broker

import (
	"context"
	"errors"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// The legacy per-message queue stream: see doc.go.

// Limits of KubeMQ's default queue configuration for the legacy stream.
const (
	maxVisibilitySeconds     = 43200
	defaultVisibilitySeconds = 60
)

// Errors of the legacy stream, worded like KubeMQ's.
var (
	errNoMsgToAck        = errors.New("Error 124: no active message to ack")
	errInvalidAckSeq     = errors.New("Error 125: ack sequence cannot be 0 or negative")
	errNoMsgToSend       = errors.New("Error 126: no active message to send")
	errInvalidVisibility = errors.New("Error 127: invalid visibility time, cannot be negative or exceed setting in kubemq config")
	errSubscriptionOpen  = errors.New("Error 128: subscription to queue is already active")
	errVisibilityExpired = errors.New("Error 129: current visibility timer expired")
	errSendingQueueMsg   = errors.New("Error 130: error during send message to queue")
	errInvalidStreamType = errors.New("Error 132: invalid stream queue messages request type")
	errNoMsgToReject     = errors.New("Error 137: no active message to reject")
	errNoNewMessage      = errors.New("Error 138: no new message in queue, wait time expired")
)

// StreamQueueMessage serves the legacy per-message queue stream (see the
// comment at the top of queue_legacy_stream.go).
func (s *Server) StreamQueueMessage(stream pb.Kubemq_StreamQueueMessageServer) error {
	return s.queues.legacyStream(stream)
}

// legacyStream is the state of one StreamQueueMessage stream. Only the
// stream's own goroutine touches it.
type legacyStream struct {
	st     *queueStore
	stream pb.Kubemq_StreamQueueMessageServer

	q    *queue                         // the receive's queue; nil before it
	recv *pb.StreamQueueMessagesRequest // the receive
	last *pb.StreamQueueMessagesRequest // the latest request
	held *pb.QueueMessage               // delivered, not settled

	visibility time.Duration // for the message when it comes
	visTimer   *time.Timer
	visC       <-chan time.Time

	taking     chan takeResult // the receive's wait, until it ends
	cancelTake context.CancelFunc
}

type takeResult struct {
	msgs []*pb.QueueMessage
	err  error
}

func (st *queueStore) legacyStream(stream pb.Kubemq_StreamQueueMessageServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stopAfter := context.AfterFunc(st.ctx, cancel)
	defer stopAfter()

	reqs := make(chan *pb.StreamQueueMessagesRequest)
	go readLegacyRequests(ctx, stream, reqs)
	ls := &legacyStream{st: st, stream: stream}
	defer ls.finish()
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				// The client closed its side: the timers still end the stream.
				reqs = nil
				continue
			}
			if ls.handle(ctx, req) {
				return nil
			}
		case r := <-ls.taking:
			ls.taking = nil
			if end, err := ls.delivered(r); end {
				return err
			}
		case <-ls.visC:
			ls.visC = nil
			ls.send(errResponse(ls.last, errVisibilityExpired))
			ls.giveBack()
			return nil
		case <-ctx.Done():
			if st.ctx.Err() != nil {
				return waitError(ErrClosed)
			}
			return nil
		}
	}
}

// readLegacyRequests forwards the stream's requests until it ends, then
// closes reqs.
func readLegacyRequests(ctx context.Context, stream pb.Kubemq_StreamQueueMessageServer, reqs chan<- *pb.StreamQueueMessagesRequest) {
	defer close(reqs)
	for {
		req, err := stream.Recv()
		if err != nil {
			return
		}
		select {
		case reqs <- req:
		case <-ctx.Done():
			return
		}
	}
}

// handle serves one request and reports whether the stream is done.
func (ls *legacyStream) handle(ctx context.Context, req *pb.StreamQueueMessagesRequest) bool {
	if req.RequestID == "" {
		req.RequestID = ls.st.ids.next()
	}
	ls.last = req
	if err := ls.st.checkLegacyStreamRequest(req); err != nil {
		ls.send(errResponse(req, err))
		return false
	}
	var err error
	switch req.StreamRequestTypeData {
	case pb.StreamRequestType_ReceiveMessage:
		// The message, or Error 138, is the answer, when the wait ends.
		if err := ls.receive(ctx, req); err != nil {
			ls.send(errResponse(req, err))
		}
		return false
	case pb.StreamRequestType_ModifyVisibility:
		ls.visibility = ls.seconds(req.VisibilitySeconds)
		ls.armVisibility()
		ls.send(okResponse(req))
		return false
	case pb.StreamRequestType_AckMessage:
		err = ls.settle(req, errNoMsgToAck, func(m *pb.QueueMessage) error {
			ls.q.ack([]*pb.QueueMessage{m})
			return nil
		})
	case pb.StreamRequestType_RejectMessage:
		err = ls.settle(req, errNoMsgToReject, func(m *pb.QueueMessage) error {
			ls.q.nack([]*pb.QueueMessage{m})
			return nil
		})
	case pb.StreamRequestType_ResendMessage:
		err = ls.settle(req, errNoMsgToSend, func(m *pb.QueueMessage) error {
			return ls.st.requeue(ls.q, []*pb.QueueMessage{m}, req.Channel)
		})
	case pb.StreamRequestType_SendModifiedMessage:
		err = ls.settle(req, errNoMsgToAck, func(m *pb.QueueMessage) error {
			return ls.sendModified(m, req.ModifiedMessage)
		})
	}
	if err != nil {
		ls.send(errResponse(req, err))
		return false
	}
	// The message is settled: that ends the stream.
	ls.send(okResponse(req))
	return true
}

// receive starts the stream's one wait for a message.
func (ls *legacyStream) receive(ctx context.Context, req *pb.StreamQueueMessagesRequest) error {
	if ls.q != nil {
		return errSubscriptionOpen
	}
	ls.q, ls.recv = ls.st.queue(req.Channel), req
	ls.visibility = ls.seconds(req.VisibilitySeconds)
	tctx, cancel := context.WithCancel(ctx)
	ls.cancelTake = cancel
	ls.taking = make(chan takeResult, 1)
	q, wait, out := ls.q, ls.st.secondsWait(req.WaitTimeSeconds), ls.taking
	go func() {
		msgs, _, err := q.take(tctx, 1, wait, true)
		out <- takeResult{msgs, err}
	}()
	return nil
}

// delivered handles the end of the receive's wait and reports whether the
// stream ends, with what error.
func (ls *legacyStream) delivered(r takeResult) (bool, error) {
	ls.cancelTake()
	if r.err != nil {
		return true, waitError(r.err)
	}
	if len(r.msgs) == 0 {
		ls.send(errResponse(ls.last, errNoNewMessage))
		return true, nil
	}
	ls.held = r.msgs[0]
	ls.armVisibility()
	ls.send(&pb.StreamQueueMessagesResponse{RequestID: ls.recv.RequestID,
		StreamRequestTypeData: pb.StreamRequestType_ReceiveMessage, Message: ls.held})
	return false, nil
}

// settle applies do to the held message, if there is one and req names it.
func (ls *legacyStream) settle(req *pb.StreamQueueMessagesRequest, none error, do func(*pb.QueueMessage) error) error {
	if ls.held == nil {
		return none
	}
	checkSeq := req.StreamRequestTypeData == pb.StreamRequestType_AckMessage ||
		req.StreamRequestTypeData == pb.StreamRequestType_RejectMessage
	if checkSeq && req.RefSequence != ls.held.Attributes.Sequence {
		return errInvalidAckSeq
	}
	if err := do(ls.held); err != nil {
		return errSendingQueueMsg
	}
	ls.held = nil
	_ = ls.st.sync() // answered once on disk; a failed data dir is logged
	return nil
}

// sendModified sends mm (checked already) and settles m as done.
func (ls *legacyStream) sendModified(m, mm *pb.QueueMessage) error {
	now := time.Now().UnixNano()
	if res := ls.st.prepare(mm, now); res.IsError {
		return errors.New(res.Error)
	}
	// The new message first, so that a crash in between keeps both.
	ls.st.send([]*pb.QueueMessage{mm}, now)
	ls.q.ack([]*pb.QueueMessage{m})
	return nil
}

// armVisibility (re)starts the visibility timer.
func (ls *legacyStream) armVisibility() {
	if ls.visTimer == nil {
		ls.visTimer = time.NewTimer(ls.visibility)
	} else {
		ls.visTimer.Reset(ls.visibility)
	}
	ls.visC = ls.visTimer.C
}

func (ls *legacyStream) seconds(n int32) time.Duration {
	return time.Duration(n) * ls.st.opts.SecondLength
}

// giveBack returns the held message to its queue as a reject does: the
// real broker counts an expired visibility or a lost client as a receive.
func (ls *legacyStream) giveBack() {
	if ls.held != nil {
		ls.q.nack([]*pb.QueueMessage{ls.held})
		ls.held = nil
	}
}

// finish ends the receive's wait (what it took and never delivered goes
// back uncounted), gives back the held message and stops the timer.
func (ls *legacyStream) finish() {
	if ls.taking != nil {
		ls.cancelTake()
		if r := <-ls.taking; len(r.msgs) > 0 {
			ls.q.release(r.msgs)
		}
		ls.taking = nil
	}
	ls.giveBack()
	if ls.visTimer != nil {
		ls.visTimer.Stop()
	}
}

func (ls *legacyStream) send(resp *pb.StreamQueueMessagesResponse) {
	_ = ls.stream.Send(resp) // a failed send means the stream is ending
}

func okResponse(req *pb.StreamQueueMessagesRequest) *pb.StreamQueueMessagesResponse {
	return &pb.StreamQueueMessagesResponse{RequestID: req.RequestID, StreamRequestTypeData: req.StreamRequestTypeData}
}

func errResponse(req *pb.StreamQueueMessagesRequest, err error) *pb.StreamQueueMessagesResponse {
	return &pb.StreamQueueMessagesResponse{RequestID: req.RequestID, StreamRequestTypeData: req.StreamRequestTypeData,
		IsError: true, Error: err.Error()}
}

// checkLegacyStreamRequest checks req as KubeMQ does before serving it, in
// its order, and fills in the defaults.
func (st *queueStore) checkLegacyStreamRequest(req *pb.StreamQueueMessagesRequest) error {
	if req.ClientID == "" {
		return errInvalidClientID
	}
	switch req.StreamRequestTypeData {
	case pb.StreamRequestType_ReceiveMessage:
		if !validQueueName(req.Channel) {
			return errInvalidQueueName
		}
		if err := defaultVisibility(&req.VisibilitySeconds); err != nil {
			return err
		}
		if req.WaitTimeSeconds < 0 || req.WaitTimeSeconds > maxWaitSeconds {
			return errInvalidWait
		}
		if req.WaitTimeSeconds == 0 {
			req.WaitTimeSeconds = defaultWaitSeconds
		}
	case pb.StreamRequestType_AckMessage, pb.StreamRequestType_RejectMessage:
		if req.RefSequence == 0 {
			return errInvalidAckSeq
		}
	case pb.StreamRequestType_ResendMessage:
		if !validQueueName(req.Channel) {
			return errInvalidQueueName
		}
	case pb.StreamRequestType_ModifyVisibility:
		return defaultVisibility(&req.VisibilitySeconds)
	case pb.StreamRequestType_SendModifiedMessage:
		mm := req.ModifiedMessage
		if mm == nil {
			return errInvalidQueueMsg
		}
		if err := st.check(mm); err != nil {
			return err
		}
		if req.VisibilitySeconds < 0 || req.VisibilitySeconds > maxVisibilitySeconds {
			return errInvalidVisibility
		}
	default:
		return errInvalidStreamType
	}
	return nil
}

// defaultVisibility checks a VisibilitySeconds and sets 0 to the default.
func defaultVisibility(v *int32) error {
	if *v < 0 || *v > maxVisibilitySeconds {
		return errInvalidVisibility
	}
	if *v == 0 {
		*v = defaultVisibilitySeconds
	}
	return nil
}
