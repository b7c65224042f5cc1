package mq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newID returns a random 128-bit hex id for requests and events.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// waitSeconds turns d into the legacy API's whole seconds, at least 1.
func waitSeconds(d time.Duration) int32 {
	s := int32((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// receive is the legacy ReceiveQueueMessages: with peek it copies up to max
// messages from the head of channel without taking them, else it takes
// them (auto-ack). It waits up to wait (whole seconds, at least 1) until
// max messages are there. It does not use the broker's stream poll pool
// (trap 11).
func (c *Conn) receive(ctx context.Context, op, channel string, max int, wait time.Duration, peek bool) ([]*pb.QueueMessage, error) {
	if err := c.isClosed(); err != nil {
		return nil, err
	}
	resp, err := c.api.ReceiveQueueMessages(ctx, &pb.ReceiveQueueMessagesRequest{
		RequestID:           newID(),
		ClientID:            c.cfg.ClientID,
		Channel:             channel,
		MaxNumberOfMessages: int32(max),
		WaitTimeSeconds:     waitSeconds(wait),
		IsPeak:              peek,
	})
	if err != nil {
		return nil, classify(op+" "+channel, err)
	}
	if resp.IsError {
		return nil, classify(op+" "+channel, errors.New(resp.Error))
	}
	return resp.Messages, nil
}

func (c *Conn) peek(ctx context.Context, channel string, max int, wait time.Duration) ([]*pb.QueueMessage, error) {
	return c.receive(ctx, "peek", channel, max, wait, true)
}

// Peek returns copies of up to max messages at the head of channel without
// taking them. It returns as soon as max messages are there, else after
// wait (whole seconds, at least 1: a peek that finds fewer than max costs
// the whole wait). The messages cannot be settled (ErrNotSettleable). Safe
// for concurrent use; ctx bounds the call.
func (c *Conn) Peek(ctx context.Context, channel string, max int, wait time.Duration) ([]*Message, error) {
	raw, err := c.peek(ctx, channel, max, wait)
	if err != nil {
		return nil, err
	}
	out := make([]*Message, len(raw))
	for i, m := range raw {
		out[i] = fromPB(m)
	}
	return out, nil
}

// ReceiveOne takes (auto-acks) one message from channel, waiting up to
// wait (whole seconds, at least 1) for one, and reports whether it found
// one. It takes whatever is oldest, unchecked: inferq's result store
// removes old records with TakeWhile instead, which never takes a record
// another writer put there (KUBEMQ.md trap 24). On an empty channel it
// costs the whole wait. Do not use it on a channel whose record may have
// expired (trap 8). Safe for concurrent use.
func (c *Conn) ReceiveOne(ctx context.Context, channel string, wait time.Duration) (bool, error) {
	raw, err := c.receive(ctx, "receive", channel, 1, wait, false)
	return len(raw) > 0, err
}

// QueueInfo is one queue channel's counters as the broker reports them.
type QueueInfo struct {
	Name string
	// Waiting counts the messages ready for delivery and those delivered
	// and not yet settled (stranded ones included, trap 13 and 14).
	Waiting   int64
	Messages  int64
	Sent      int64
	Delivered int64
	// FirstSequence and LastSequence bound the sequences stored (on the
	// real broker, settled messages stay stored until its limits drop them).
	FirstSequence, LastSequence int64
}

// QueuesInfo returns the queue channels matching filter (the broker's
// filter syntax; "" for all) by name. The real broker trims the characters
// of "_QUEUES." from both ends of names: look names up with InfoName.
// Safe for concurrent use; ctx bounds the call.
func (c *Conn) QueuesInfo(ctx context.Context, filter string) (map[string]QueueInfo, error) {
	if err := c.isClosed(); err != nil {
		return nil, err
	}
	resp, err := c.api.QueuesInfo(ctx, &pb.QueuesInfoRequest{RequestID: newID(), QueueName: filter})
	if err != nil {
		return nil, classify("queues info", err)
	}
	out := map[string]QueueInfo{}
	if resp.Info == nil {
		return out, nil
	}
	for _, q := range resp.Info.Queues {
		out[q.Name] = QueueInfo{
			Name: q.Name, Waiting: q.Waiting, Messages: q.Messages, Sent: q.Sent, Delivered: q.Delivered,
			FirstSequence: q.FirstSequence, LastSequence: q.LastSequence,
		}
	}
	return out, nil
}

// InfoName is the name under which QueuesInfo may report channel: the real
// broker trims the characters of "_QUEUES." from both ends, and matches a
// filter against the trimmed names; the embedded broker keeps names whole.
func InfoName(channel string) string { return strings.Trim(channel, "_QUEUES.") }

// InfoFilter is the QueuesInfo filter that finds channels on either broker:
// each name as sent and, where it differs, as the real broker reports it.
func InfoFilter(channels ...string) string {
	names := make([]string, 0, 2*len(channels))
	for _, ch := range channels {
		names = append(names, ch)
		if n := InfoName(ch); n != ch && n != "" {
			names = append(names, n)
		}
	}
	return strings.Join(names, ";")
}

// LookupInfo finds channel in what QueuesInfo returned, under its name as
// sent or as the real broker reports it; ok is false when neither is there
// (the broker reports no channel that never held a message).
func LookupInfo(infos map[string]QueueInfo, channel string) (q QueueInfo, ok bool) {
	if q, ok = infos[channel]; ok {
		return q, true
	}
	q, ok = infos[InfoName(channel)]
	return q, ok
}

// queueInfo returns channel's QueueInfo; ok is false when the broker does
// not report the channel (it never held a message).
func (c *Conn) queueInfo(ctx context.Context, channel string) (QueueInfo, bool, error) {
	infos, err := c.QueuesInfo(ctx, InfoFilter(channel))
	if err != nil {
		return QueueInfo{}, false, err
	}
	q, ok := LookupInfo(infos, channel)
	return q, ok, nil
}

// Ping checks that the broker answers. Safe for concurrent use.
func (c *Conn) Ping(ctx context.Context) error {
	if err := c.isClosed(); err != nil {
		return err
	}
	_, err := c.api.Ping(ctx, &pb.Empty{})
	return classify("ping", err)
}

// callDeadline is the Conn's unary interceptor: it bounds a call whose
// context has no earlier deadline by Config.CallTimeout, plus the time the
// request asks the broker to wait (a receive's wait, a query's timeout),
// and turns that bound's expiry into ErrUnavailable. A deadline of the
// caller's stays the caller's: the call's error matches
// context.DeadlineExceeded (errors.Is) even when it comes back before the
// caller's context has noticed (see callersDeadline).
func (c *Conn) callDeadline(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	d := c.cfg.CallTimeout + brokerWait(req)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return callersDeadline(dl, inv(ctx, method, req, reply, cc, opts...))
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := inv(cctx, method, req, reply, cc, opts...)
	// The bound expired when cctx did, or when the broker enforced it
	// first (the grpc-timeout header): its DeadlineExceeded status can
	// come back a moment before cctx's own timer fires.
	ours := errors.Is(cctx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
	if err != nil && ctx.Err() == nil && ours {
		return fmt.Errorf("%w: no answer within %v (mq.Config.CallTimeout): %w", ErrUnavailable, d, err)
	}
	return err
}

// callersDeadline marks err, a call's failure, as the caller's deadline
// (context.DeadlineExceeded) when it is gRPC's DeadlineExceeded and the
// caller's deadline dl has passed. The status can come back before the
// caller's context has noticed dl, while its Err is still nil: a
// context's deadline is a timer whose callback runs a moment after dl,
// and gRPC sends what is left of dl to the broker (grpc-timeout), which
// answers DeadlineExceeded at its end of it. Measured on the embedded
// broker, whose server shares the process: 1-3% of the Poller's peeks
// bounded by SettleGrace, 0.3-3.4 ms after dl (issue 25 item 4); none in
// 4,000 such peeks on KubeMQ v2.4.0.
// A DeadlineExceeded before dl is not the caller's and stays as it is.
func callersDeadline(dl time.Time, err error) error {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded || time.Now().Before(dl) {
		return err
	}
	return fmt.Errorf("%w (the caller's deadline): %w", context.DeadlineExceeded, err)
}

// brokerWait is how long req asks the broker to wait before it answers.
func brokerWait(req any) time.Duration {
	switch r := req.(type) {
	case *pb.ReceiveQueueMessagesRequest:
		return time.Duration(max(r.WaitTimeSeconds, 0)) * time.Second
	case *pb.Request:
		return time.Duration(max(r.Timeout, 0)) * time.Millisecond
	}
	return 0
}
