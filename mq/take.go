package mq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// takeVisibility is how long the broker holds a message TakeHead received
// before it settles it (a few round trips): the message goes back by
// itself should the process hang in between.
const takeVisibility = 10 // seconds

// errNoMessage is how the legacy stream answers a receive that found
// nothing within its wait (KUBEMQ.md trap 18).
const errNoMessage = "Error 138"

// TakeHead removes the oldest message of channel if, and only if, take
// says so for that very message, and returns the oldest message it saw
// (nil when the channel held none within wait) and whether it removed it.
//
// It peeks first (the legacy peek, waiting up to wait, whole seconds, at
// least 1, when the channel is empty); a head that take refuses is left
// as it is, untouched. A head take accepts is then received over the
// legacy per-message stream (StreamQueueMessage), which holds it on the
// broker without settling it, and take is asked again about the message
// received: the head may have changed since the peek (another client
// purged the channel and wrote a new message). The message is acked when
// take accepts it, else rejected: the broker puts it back, at the tail,
// its receive count raised (KUBEMQ.md fact 42). A message is therefore
// never removed that take did not accept. An error after the receive
// closes the stream, which gives the message back the same way. When the
// head is gone by the time of the receive, TakeHead peeks once more.
//
// The receive runs on one of the broker's shared downstream clients for
// as long as it holds the message (a few round trips; trap 11 when it has
// to wait, only when the head vanished after the peek). Safe for
// concurrent use; ctx bounds the call.
func (c *Conn) TakeHead(ctx context.Context, channel string, wait time.Duration, take func(*Message) bool) (*Message, bool, error) {
	for round := 0; ; round++ {
		raw, err := c.peek(ctx, channel, 1, wait)
		if err != nil || len(raw) == 0 {
			return nil, false, err
		}
		head := fromPB(raw[0])
		if !take(head) {
			return head, false, nil
		}
		m, took, err := c.takeHeld(ctx, channel, take)
		if err != nil || m != nil || round > 0 {
			return m, took, err
		}
		// The head went between the peek and the receive: another
		// client took it, such as a purge (the Python adapter's soft
		// cancel, trap 24). Look once more: a peek waits for a running
		// purge to end (fact 28), then sees what its client writes next.
	}
}

// takeHeld receives the head of channel over a legacy stream, then acks it
// when take accepts it and rejects it otherwise.
func (c *Conn) takeHeld(ctx context.Context, channel string, take func(*Message) bool) (*Message, bool, error) {
	if err := c.isClosed(); err != nil {
		return nil, false, err
	}
	op := "take head of " + channel
	// A receive waits up to the broker's 1 s floor; each answer comes
	// within CallTimeout.
	ctx, cancel := context.WithTimeout(ctx, time.Second+3*c.cfg.CallTimeout)
	defer cancel()
	s, err := c.api.StreamQueueMessage(ctx)
	if err != nil {
		return nil, false, classify(op, err)
	}
	r, err := streamCall(s, &pb.StreamQueueMessagesRequest{
		RequestID: newID(), ClientID: c.cfg.ClientID, StreamRequestTypeData: pb.StreamRequestType_ReceiveMessage,
		Channel: channel, WaitTimeSeconds: 1, VisibilitySeconds: takeVisibility,
	})
	switch {
	case err != nil:
		return nil, false, classify(op, err)
	case r.IsError && strings.HasPrefix(r.Error, errNoMessage):
		return nil, false, nil // the head went since the peek
	case r.IsError:
		return nil, false, classify(op, errors.New(r.Error))
	case r.Message == nil || r.Message.Attributes == nil:
		return nil, false, classify(op, errors.New("the broker answered the receive without a message"))
	}
	m := fromPB(r.Message)
	ok := take(m)
	settle := pb.StreamRequestType_AckMessage
	if !ok {
		settle = pb.StreamRequestType_RejectMessage
	}
	r, err = streamCall(s, &pb.StreamQueueMessagesRequest{
		RequestID: newID(), ClientID: c.cfg.ClientID, StreamRequestTypeData: settle, RefSequence: r.Message.Attributes.Sequence,
	})
	if err == nil && r.IsError {
		err = errors.New(r.Error)
	}
	if err != nil {
		return m, false, classify(fmt.Sprintf("%s: %v of sequence %d", op, settle, m.Sequence), err)
	}
	// The broker ends the stream once the message is settled.
	_ = s.CloseSend()
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
	return m, ok, nil
}

// streamCall sends req on a legacy queue stream and returns the answer.
func streamCall(s pb.Kubemq_StreamQueueMessageClient, req *pb.StreamQueueMessagesRequest) (*pb.StreamQueueMessagesResponse, error) {
	if err := s.Send(req); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream ended: Recv returns why.
			if _, rerr := s.Recv(); rerr != nil {
				err = rerr
			}
		}
		return nil, err
	}
	return s.Recv()
}
