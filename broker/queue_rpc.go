package broker

import (
	"context"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SendQueueMessage stores one queue message (legacy send). Validation
// failures come back in the result, like KubeMQ's.
func (s *Server) SendQueueMessage(_ context.Context, m *pb.QueueMessage) (*pb.SendQueueMessageResult, error) {
	results, _ := s.queues.sendBatch([]*pb.QueueMessage{m})
	return results[0], nil
}

// SendQueueMessagesBatch stores a batch of queue messages (legacy batch
// send), one result per message. An empty batch is refused as by KubeMQ:
// codes.Unknown "empty messages batch".
func (s *Server) SendQueueMessagesBatch(_ context.Context, req *pb.QueueMessagesBatchRequest) (*pb.QueueMessagesBatchResponse, error) {
	if req == nil || len(req.Messages) == 0 {
		// The real broker's answer, code and text.
		return nil, status.Error(codes.Unknown, "empty messages batch")
	}
	results, haveErrors := s.queues.sendBatch(req.Messages)
	return &pb.QueueMessagesBatchResponse{BatchID: req.BatchID, Results: results, HaveErrors: haveErrors}, nil
}

// ReceiveQueueMessages is the legacy receive: it waits until
// MaxNumberOfMessages are there or WaitTimeSeconds pass and consumes what
// it got, or with IsPeak returns copies and leaves the queue as it was.
func (s *Server) ReceiveQueueMessages(ctx context.Context, req *pb.ReceiveQueueMessagesRequest) (*pb.ReceiveQueueMessagesResponse, error) {
	if req == nil {
		req = &pb.ReceiveQueueMessagesRequest{}
	}
	resp := &pb.ReceiveQueueMessagesResponse{RequestID: s.requestID(req.RequestID), IsPeak: req.IsPeak, Messages: []*pb.QueueMessage{}}
	wait, err := s.checkLegacy(req.ClientID, req.Channel, req.WaitTimeSeconds)
	if err == nil && (req.MaxNumberOfMessages < 1 || req.MaxNumberOfMessages > maxReceiveMessages) {
		err = errInvalidMaxMsgs
	}
	if err != nil {
		resp.IsError, resp.Error = true, err.Error()
		return resp, nil
	}
	q := s.queues.queue(req.Channel)
	if err := q.receiver.Acquire(ctx, 1); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer q.receiver.Release(1)
	var (
		msgs    []*pb.QueueMessage
		expired int
	)
	if req.IsPeak {
		msgs, expired, err = q.peek(ctx, int(req.MaxNumberOfMessages), wait)
	} else {
		msgs, expired, err = q.take(ctx, int(req.MaxNumberOfMessages), wait, false)
	}
	if err != nil {
		return nil, waitError(err)
	}
	if msgs != nil {
		resp.Messages = msgs
	}
	resp.MessagesReceived = int32(len(msgs))
	resp.MessagesExpired = int32(expired)
	return resp, nil
}

// AckAllQueueMessages purges the channel: it removes what is waiting, and
// whatever arrives, for the whole WaitTimeSeconds (as KubeMQ does), then
// reports how many it removed. Messages in flight are not touched. Like
// KubeMQ's, it holds the channel's legacy receiver meanwhile: legacy peeks
// and receives of the channel wait for it (queue.receiver, fact 28).
func (s *Server) AckAllQueueMessages(ctx context.Context, req *pb.AckAllQueueMessagesRequest) (*pb.AckAllQueueMessagesResponse, error) {
	if req == nil {
		req = &pb.AckAllQueueMessagesRequest{}
	}
	resp := &pb.AckAllQueueMessagesResponse{RequestID: s.requestID(req.RequestID)}
	wait, err := s.checkLegacy(req.ClientID, req.Channel, req.WaitTimeSeconds)
	if err != nil {
		resp.IsError, resp.Error = true, err.Error()
		return resp, nil
	}
	q := s.queues.queue(req.Channel)
	if err := q.receiver.Acquire(ctx, receiverSlots); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	n, err := q.purge(ctx, wait)
	q.receiver.Release(receiverSlots)
	if err != nil {
		return nil, waitError(err)
	}
	resp.AffectedMessages = n
	return resp, nil
}

// QueuesInfo reports the queue channels that hold or held messages; the
// request's QueueName, when set, lists exact names separated by ";".
func (s *Server) QueuesInfo(ctx context.Context, req *pb.QueuesInfoRequest) (*pb.QueuesInfoResponse, error) {
	if req == nil {
		req = &pb.QueuesInfoRequest{}
	}
	info := s.queues.info(req.QueueName)
	if d := s.opts.InfoLatency; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return &pb.QueuesInfoResponse{RefRequestID: req.RequestID, Info: info}, nil
}

// waitError turns the end of a wait into a gRPC status.
func waitError(err error) error {
	if err == ErrClosed {
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.FromContextError(err).Err()
}

// requestID is id, or a new one when the client sent none.
func (s *Server) requestID(id string) string {
	if id == "" {
		return s.queues.ids.next()
	}
	return id
}

// checkLegacy validates the fields the legacy receive and ack-all calls
// share, and turns WaitTimeSeconds (0: the default) into a wait.
func (s *Server) checkLegacy(clientID, channel string, waitSeconds int32) (time.Duration, error) {
	switch {
	case clientID == "":
		return 0, errInvalidClientID
	case !validQueueName(channel):
		return 0, errInvalidQueueName
	case waitSeconds < 0 || waitSeconds > maxWaitSeconds:
		return 0, errInvalidWait
	}
	if waitSeconds == 0 {
		waitSeconds = defaultWaitSeconds
	}
	return s.queues.secondsWait(waitSeconds), nil
}
