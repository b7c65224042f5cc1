package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	qs "github.com/kubemq-io/kubemq-go/queues_stream"
	pb "github.com/kubemq-io/protobuf/go"
)

// Message is a queue message received by a Poller (or copied by Peek). The
// data fields are plain values; do not change them while settling. Ack,
// NAck, ReQueue and GiveBack are safe for concurrent use; exactly one of
// them takes effect, the others return ErrAlreadySettled without reaching
// the broker.
//
// The messages of one poll are settled on the broker together: the
// settlements are held until the last message of the poll's batch is
// settled, and then go out at once (see txn); when another batch of the
// Poller's still runs then, they wait for a moment when nothing waits in
// the queue, up to the Poller's PollWait (see Poller.deferClose). Until
// then a settled message is still held by the broker: if the process dies
// it is delivered again, and a NAck's redelivery waits for the rest of its
// batch. Settle a batch's messages close together.
//
// Settling returns as soon as the requests are queued on the poll's
// stream: the broker does not confirm them. A failure found later arrives
// through the Poller's OnSettleError (trap 6). The settlement that
// completes a batch returns the error of sending the batch's requests
// when they go out at once (nil when they wait; their failure goes to
// OnSettleError); one
// that fails because the stream was lost returns ErrUnavailable: the broker
// has put the messages back and will deliver them again with their
// ReceiveCount unchanged.
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

	tx      *txn    // nil when not polled
	by      Settler // settles a message no Poller delivered (SettledBy)
	settled atomic.Bool
}

// Settlement is how a message was settled, as a Settler hears it.
type Settlement uint8

// The settlements of a message.
const (
	SettleAck Settlement = iota
	SettleNAck
	SettleReQueue
	SettleGiveBack
)

// Settler carries out the settlements of messages that no Poller
// delivered: a fake broker's, in tests of the code that settles them (the
// consumer's queue loop on an in-memory fake). channel is ReQueue's.
type Settler interface {
	Settle(m *Message, how Settlement, channel string) error
}

// SettledBy makes m, a message built by hand, settleable: its Ack, NAck,
// ReQueue and GiveBack go to s (exactly one takes effect, as for a polled
// message). It returns m. Call it before handing m out.
func (m *Message) SettledBy(s Settler) *Message {
	m.by = s
	return m
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
// no backoff: for a delayed retry send a copy with Sender.SendRetry and Ack this one.
func (m *Message) NAck() error { return m.settle(opNAck, "") }

// ReQueue moves the message to channel.
func (m *Message) ReQueue(channel string) error { return m.settle(opReQueue, channel) }

// GiveBack returns the message to the queue as if it had never been
// received: nothing goes to the broker now, so its ReceiveCount does not
// grow and its MaxReceiveCount policy cannot move it to a dead letter
// queue, as a NAck would. It settles a message that never ran (a
// shutdown). The broker gets it back when the Poller closes the stream
// client that received it: at the end of Run's drain, or at the client's
// next recycle (RecycleAfter, RecycleEvery). The other messages of its
// poll settle as usual.
func (m *Message) GiveBack() error {
	if m.tx == nil && m.by == nil {
		return ErrNotSettleable
	}
	if !m.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	if m.tx == nil {
		return m.by.Settle(m, SettleGiveBack, "")
	}
	m.tx.drop()
	return nil
}

// Settled reports whether Ack, NAck, ReQueue or GiveBack was called.
func (m *Message) Settled() bool { return m.settled.Load() }

func (m *Message) settle(op int, channel string) error {
	if m.tx == nil && m.by == nil {
		return ErrNotSettleable
	}
	if op == opReQueue && channel == "" {
		return fmt.Errorf("mq: requeue %s %s: empty channel", m.Channel, m.ID)
	}
	if !m.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	if m.tx == nil {
		return m.by.Settle(m, [...]Settlement{opAck: SettleAck, opNAck: SettleNAck, opReQueue: SettleReQueue}[op], channel)
	}
	return m.tx.settle(op, channel, int64(m.Sequence))
}

// txn is one poll's batch: one transaction of the broker's downstream
// stream. On the real broker a transaction is a NATS Streaming queue
// subscription with MaxInflight = the poll's MaxItems that stays open until
// every message of the batch is settled. Settling one message gives that
// subscription room, and the broker pushes the next message of the queue
// into it, where it stays (invisible to every poll) until the rest of the
// batch is settled: measured, a poll of 6 with 9 waiting after 1 of a
// batch of 4 was acked got 5 after the whole 1 s WaitTimeout (trap 2).
// So the batch's settlements are held and sent together, one request per
// kind, when its last message is settled; the final request closes the
// subscription.
type txn struct {
	pc   *pollClient
	resp *qs.PollResponse // set with size, before the messages are handed out

	mu       sync.Mutex
	size     int // messages in the batch; 0 until the poll returned them
	open     int // messages not yet settled
	acks     []int64
	nacks    []int64
	requeues map[string][]int64
	sentAt   time.Time // when the last settlement went out; zero before
	// holding: the poll may hold messages no poll sees (Poller.poll);
	// set before the messages are handed out.
	holding bool
	// strayed: how many strays it may hold unseen (Poller.strayedOpen);
	// set before the messages are handed out.
	strayed int
	// deferredAt: every message is settled and the settlements wait, since
	// then, for a quiet moment (Poller.deferClose); zero otherwise.
	// Poller.mu.
	deferredAt time.Time
	polledAt   time.Time // when the poll returned; Poller.mu
}

// settle records one message's settlement; the last one of the batch sends
// them all and returns the error of doing so.
func (t *txn) settle(op int, channel string, seq int64) error {
	t.mu.Lock()
	switch op {
	case opAck:
		t.acks = append(t.acks, seq)
	case opNAck:
		t.nacks = append(t.nacks, seq)
	case opReQueue:
		if t.requeues == nil {
			t.requeues = map[string][]int64{}
		}
		t.requeues[channel] = append(t.requeues[channel], seq)
	}
	t.open--
	last := t.open == 0
	t.mu.Unlock()
	if !last {
		t.pc.release(t, false)
		return nil
	}
	return t.finish()
}

// finish handles the batch's last settlement: its settlements go out now,
// with those of the batches that waited (Poller.deferClose), or wait. It
// returns the error of sending them now.
func (t *txn) finish() error {
	later, with := t.pc.poller.deferClose(t)
	if later {
		t.pc.release(t, false)
		return nil
	}
	err := t.flush()
	t.pc.poller.closeBatches(with)
	t.pc.release(t, true)
	return err
}

// drop counts a message given back without a settlement (the stream close
// returns it uncounted).
func (t *txn) drop() {
	t.pc.leftOpen.Store(true)
	t.mu.Lock()
	t.open--
	last := t.open == 0
	t.mu.Unlock()
	if !last {
		t.pc.release(t, false)
		return
	}
	_ = t.finish() // left open: its settlements never wait
}

// flush sends the settlements recorded so far: requeues and nacks first,
// acks last. It is called by the last settlement and, before a hard stop
// closes the stream, for batches that are not complete (so that what was
// acked is not delivered again). Failures go to OnSettleError too.
func (t *txn) flush() error {
	t.mu.Lock()
	acks, nacks, requeues := t.acks, t.nacks, t.requeues
	t.acks, t.nacks, t.requeues = nil, nil, nil
	t.mu.Unlock()
	var errs []error
	fail := func(what string, n int, err error) {
		if err != nil {
			t.pc.poller.settleFailed(err)
			errs = append(errs, classify(fmt.Sprintf("%s %d messages of %s", what, n, t.pc.poller.cfg.Channel), err))
		}
	}
	for ch, seqs := range requeues {
		fail("requeue to "+ch, len(seqs), t.resp.ReQueueOffsets(ch, seqs...))
	}
	if len(nacks) > 0 {
		fail("nack", len(nacks), t.resp.NAckOffsets(nacks...))
	}
	if len(acks) > 0 {
		fail("ack", len(acks), t.resp.AckOffsets(acks...))
	}
	t.mu.Lock()
	t.sentAt = time.Now()
	t.mu.Unlock()
	return errors.Join(errs...)
}

// staleAfter: an error the SDK reports for a batch whose settlements all
// went out longer ago than this is not about them (see onError).
const staleAfter = time.Second

// onError is the poll's OnErrorFunc. The real broker never tells the SDK
// that a transaction is complete (its TransactionComplete response is
// commented out in v2.4.0), so the SDK keeps every transaction and, when
// the stream client closes or its stream breaks, "fails" all of them:
// with context.Canceled at close, with the stream's error on a loss. For a
// batch whose settlements all went out before, that is not a failure:
// the broker applied them (counted in PollerStats.StaleNotices). The rest
// goes to OnSettleError: the broker's answer to a bad settlement, or a
// loss that gave unsettled (or just settled) messages back.
func (t *txn) onError(err error) {
	p := t.pc.poller
	t.mu.Lock()
	size, open, sentAt := t.size, t.open, t.sentAt
	t.mu.Unlock()
	switch {
	case size == 0:
		// The poll itself failed (no batch yet): Poll returns that error.
	case t.pc.closing.Load() && errors.Is(err, context.Canceled):
		// Our own close: settled batches are applied; unsettled
		// messages (a hard stop) go back uncounted, on purpose.
		p.staleNotices.Add(1)
	case open == 0 && !sentAt.IsZero() && time.Since(sentAt) > staleAfter && errors.Is(classify("", err), ErrUnavailable):
		p.staleNotices.Add(1)
	default:
		p.settleFailed(err)
	}
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

// size is what o weighs against Config.MaxMessageBytes and SendBatchBytes:
// body, metadata and tags (keys and values), the parts a producer chooses.
func (o *OutMessage) size() int {
	n := len(o.Body) + len(o.Metadata)
	for k, v := range o.Tags {
		n += len(k) + len(v)
	}
	return n
}

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
