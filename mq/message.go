package mq

import (
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	qs "github.com/kubemq-io/kubemq-go/queues_stream"
	pb "github.com/kubemq-io/protobuf/go"
)

// Message is a queue message received by a Poller (or copied by Peek). The
// data fields are plain values; do not change them while settling. Ack,
// NAck and ReQueue are safe for concurrent use; exactly one of them takes
// effect, the others return ErrAlreadySettled without reaching the broker.
//
// Settling returns as soon as the request is queued on the poll's stream:
// the broker does not confirm it. A failure found later arrives through
// the Poller's OnSettleError (trap 6). A settlement that fails because the
// stream was lost returns ErrUnavailable: the broker has put the message
// back and will deliver it again with its ReceiveCount unchanged.
type Message struct {
	ID       string
	Channel  string
	Body     []byte
	Metadata string
	Tags     map[string]string
	// Sequence is the message's sequence number in its channel.
	Sequence uint64
	// ReceiveCount is 1 on the first delivery and grows by one per NAck.
	// A crash of the holder is not counted (KUBEMQ.md).
	ReceiveCount int
	// Timestamp is when the broker stored the message.
	Timestamp time.Time
	// ReRouted is true on a copy moved to MaxReceiveQueue by the broker;
	// ReRoutedFromQueue names the channel it came from.
	ReRouted          bool
	ReRoutedFromQueue string
	// MaxReceiveCount and MaxReceiveQueue are the message's policy.
	MaxReceiveCount int
	MaxReceiveQueue string
	// DelayedTo and ExpirationAt are the policy's times, zero when unset.
	DelayedTo, ExpirationAt time.Time

	raw     *qs.QueueMessage
	owner   *pollClient
	settled atomic.Bool
}

// settle kinds
const (
	opAck = iota
	opNAck
	opReQueue
)

// Ack removes the message from the queue.
func (m *Message) Ack() error { return m.settle(opAck, "") }

// NAck hands the message back: the broker delivers it again at the tail of
// the queue about 0.5 ms later, with ReceiveCount+1, or moves it to
// MaxReceiveQueue (or drops it) when MaxReceiveCount is reached. There is
// no backoff: for a delayed retry use Sender.Retry.
func (m *Message) NAck() error { return m.settle(opNAck, "") }

// ReQueue moves the message to channel.
func (m *Message) ReQueue(channel string) error { return m.settle(opReQueue, channel) }

// Settled reports whether Ack, NAck or ReQueue was called.
func (m *Message) Settled() bool { return m.settled.Load() }

func (m *Message) settle(op int, channel string) error {
	if m.raw == nil || m.owner == nil {
		return ErrNotSettleable
	}
	if !m.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	defer m.owner.release()
	var err error
	name := "ack"
	switch op {
	case opAck:
		err = m.raw.Ack()
	case opNAck:
		name = "nack"
		err = m.raw.NAck()
	case opReQueue:
		name = "requeue"
		err = m.raw.ReQueue(channel)
	}
	if err != nil {
		m.owner.poller.settleFailed(err)
		return classify(name+" "+m.Channel+" "+m.ID, err)
	}
	return nil
}

// LogValue logs the message's identity, not its body.
func (m *Message) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", m.ID),
		slog.String("channel", m.Channel),
		slog.Uint64("seq", m.Sequence),
		slog.Int("receive_count", m.ReceiveCount),
	)
}

// fromPB copies a broker message into a Message.
func fromPB(p *pb.QueueMessage) *Message {
	m := &Message{
		ID:       p.MessageID,
		Channel:  p.Channel,
		Body:     p.Body,
		Metadata: p.Metadata,
		Tags:     p.Tags,
	}
	if a := p.Attributes; a != nil {
		m.Sequence = a.Sequence
		m.ReceiveCount = int(a.ReceiveCount)
		if a.Timestamp > 0 {
			m.Timestamp = time.Unix(0, a.Timestamp)
		}
		m.ReRouted = a.ReRouted
		m.ReRoutedFromQueue = a.ReRoutedFromQueue
		if a.DelayedTo > 0 {
			m.DelayedTo = unixAny(a.DelayedTo)
		}
		if a.ExpirationAt > 0 {
			m.ExpirationAt = unixAny(a.ExpirationAt)
		}
	}
	if pol := p.Policy; pol != nil {
		m.MaxReceiveCount = int(pol.MaxReceiveCount)
		m.MaxReceiveQueue = pol.MaxReceiveQueue
	}
	return m
}

// unixAny reads a broker time that may be in seconds or nanoseconds.
func unixAny(v int64) time.Time {
	if v < 1e12 {
		return time.Unix(v, 0)
	}
	return time.Unix(0, v)
}

// OutMessage is a queue message to send.
type OutMessage struct {
	Channel  string
	Body     []byte
	Metadata string
	Tags     map[string]string
	// ID is optional; the broker assigns one when empty.
	ID string
	// DelaySeconds delays delivery.
	DelaySeconds int
	// ExpirationSeconds drops the message when not received in time.
	// Never set it on task queues: a poll that meets only expired messages
	// swallows the next message sent to the channel (trap 8). It is meant
	// for per-task result records.
	ExpirationSeconds int
	// MaxReceiveCount and MaxReceiveQueue: after MaxReceiveCount deliveries
	// the broker moves the message to MaxReceiveQueue, or drops it silently
	// when that is empty. Set both on tasks.
	MaxReceiveCount int
	MaxReceiveQueue string
}

func (o *OutMessage) size() int { return len(o.Body) + len(o.Metadata) }

func (o *OutMessage) toQS() *qs.QueueMessage {
	m := qs.NewQueueMessage().
		SetId(o.ID).
		SetChannel(o.Channel).
		SetBody(o.Body).
		SetMetadata(o.Metadata).
		SetPolicyDelaySeconds(o.DelaySeconds).
		SetPolicyExpirationSeconds(o.ExpirationSeconds).
		SetPolicyMaxReceiveCount(o.MaxReceiveCount).
		SetPolicyMaxReceiveQueue(o.MaxReceiveQueue)
	if len(o.Tags) > 0 {
		m.SetTags(o.Tags)
	}
	return m
}

// Out returns a copy of m to send again: same body, metadata, tags (copied,
// with extra added) and receive policy, no delay, no expiration and a new
// id.
func (m *Message) Out(channel string, extra map[string]string) OutMessage {
	tags := maps.Clone(m.Tags)
	if tags == nil && len(extra) > 0 {
		tags = make(map[string]string, len(extra))
	}
	maps.Copy(tags, extra)
	return OutMessage{
		Channel:         channel,
		Body:            m.Body,
		Metadata:        m.Metadata,
		Tags:            tags,
		MaxReceiveCount: m.MaxReceiveCount,
		MaxReceiveQueue: m.MaxReceiveQueue,
	}
}
