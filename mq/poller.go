package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	qs "github.com/kubemq-io/kubemq-go/queues_stream"
)

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Channel is the queue to consume. Required.
	Channel string
	// Deliver receives each polled batch, in sequence order, from the
	// Poller's goroutine. It may block: while it blocks the Poller does not
	// poll (backpressure). It must return when ctx ends; messages of a
	// batch it refuses (returns an error for) that it has not settled are
	// NAcked, or, when ctx has ended, given back uncounted by closing the
	// stream. Required.
	Deliver func(ctx context.Context, batch []*Message) error
	// MaxItems caps one stream poll. A poll never asks for more than is
	// known to be waiting, so that it fills and returns at once (trap 2).
	// Default 32.
	MaxItems int
	// MaxInFlight caps the messages handed to Deliver and not yet settled;
	// at the cap the Poller stops polling. Default 4 x MaxItems.
	MaxInFlight int
	// PeekWait is how long one idle watch (legacy peek) waits for a
	// message, in whole seconds. Default 1 s.
	PeekWait time.Duration
	// PollWait is the stream poll's WaitTimeout. The broker raises it to
	// 1 s (trap 1); it only matters when fewer messages than asked for are
	// there (another consumer took them). Default 1 s.
	PollWait time.Duration
	// RecycleAfter is the number of polls after which the stream client is
	// replaced by a fresh, already warmed one; the old one is closed once
	// everything it delivered is settled (trap 7). Default 1000.
	RecycleAfter int
	// RecycleEvery also replaces the stream client once it is this old.
	// On a real broker a message can be stranded in a poll's subscription
	// that this client never sees (several consumers on one queue, trap
	// 12): closing the client is what gives it back, so this bounds how
	// long such a message waits. Default 5 s; negative disables.
	RecycleEvery time.Duration
	// DrainTimeout is how long Run waits, after its ctx ends, for the
	// delivered messages to be settled before closing the stream clients,
	// which gives the rest back to the queue uncounted. Default 30 s.
	DrainTimeout time.Duration
	// OnState is called when the Poller finds the broker up or down (for
	// /readyz), from the Poller's goroutines; it must not block.
	OnState func(up bool, err error)
	// OnSettleError is called with settlement failures the SDK reports
	// after Ack, NAck or ReQueue returned (trap 6), and with stream losses
	// that gave held messages back; from SDK goroutines; it must not block.
	// The SDK's reports about batches whose settlements had all gone out
	// are not failures and are only counted (PollerStats.StaleNotices).
	OnSettleError func(err error)
}

func (c *PollerConfig) validate() error {
	if c.Channel == "" {
		return errors.New("mq: poller: empty channel")
	}
	if c.Deliver == nil {
		return errors.New("mq: poller: nil Deliver")
	}
	setDefault(&c.MaxItems, 32)
	setDefault(&c.MaxInFlight, 4*c.MaxItems)
	setDefault(&c.PeekWait, time.Second)
	setDefault(&c.PollWait, time.Second)
	setDefault(&c.RecycleAfter, 1000)
	if c.RecycleEvery == 0 {
		c.RecycleEvery = 5 * time.Second
	}
	setDefault(&c.DrainTimeout, 30*time.Second)
	return nil
}

// PollerStats are a Poller's counters.
type PollerStats struct {
	Peeks, Polls, Messages, Recycles, SettleErrors int64
	// StaleNotices counts the SDK's error reports for batches whose
	// settlements had all been sent (see txn.onError): on the real broker
	// one per batch of each stream client at its close. Not failures.
	StaleNotices int64
}

// Poller consumes one queue with one queues_stream client at a time: the
// only poller of its queue in the process (traps 11, 12; get concurrency
// from the pipeline behind it). An idle queue is watched with the legacy
// peek (no stream poll waits on an empty queue, trap 11); when messages are
// there it stream-polls at most as many as are ready (see ready), capped by
// MaxItems and the room under MaxInFlight, with AutoAck off. The messages
// of one poll are settled on the broker together (see Message).
// It recycles its stream client every RecycleAfter polls, retries with
// backoff while the broker is away and reports up/down through OnState.
//
// Run may be called once. Stats and Up are safe for concurrent use.
type Poller struct {
	c   *Conn
	cfg PollerConfig
	log *slog.Logger

	mu       sync.Mutex
	inflight int           // delivered and not settled
	held     int           // in batches not completely settled: still held on the broker
	room     chan struct{} // signalled when a message is settled
	maxSeq   uint64        // highest sequence received; Run's goroutine only

	up      atomic.Bool
	stateMu sync.Mutex
	known   bool // an up/down state was reported

	peeks, polls, msgs, recycles, settleErrs atomic.Int64
	staleNotices                             atomic.Int64
	started                                  atomic.Bool
	retiring                                 sync.WaitGroup
	hardStop                                 chan struct{}

	onPoll func(asked, got, waiting int) // test hook
}

// NewPoller returns a Poller for cfg.Channel on c. It does not start it.
func (c *Conn) NewPoller(cfg PollerConfig) (*Poller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Poller{
		c: c, cfg: cfg,
		log:      c.log.With("channel", cfg.Channel),
		room:     make(chan struct{}, 1),
		hardStop: make(chan struct{}),
	}, nil
}

// Up reports whether the last call to the broker succeeded.
func (p *Poller) Up() bool { return p.up.Load() }

// Stats returns the Poller's counters.
func (p *Poller) Stats() PollerStats {
	return PollerStats{
		Peeks: p.peeks.Load(), Polls: p.polls.Load(), Messages: p.msgs.Load(),
		Recycles: p.recycles.Load(), SettleErrors: p.settleErrs.Load(),
		StaleNotices: p.staleNotices.Load(),
	}
}

// InFlight reports the messages delivered and not yet settled.
func (p *Poller) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}

func (p *Poller) setState(up bool, err error) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	if p.known && p.up.Load() == up {
		return
	}
	p.known = true
	p.up.Store(up)
	if up {
		p.log.Info("mq poller broker up")
	} else {
		p.log.Warn("mq poller broker down", "err", err)
	}
	if p.cfg.OnState != nil {
		p.cfg.OnState(up, err)
	}
}

func (p *Poller) settleFailed(err error) {
	p.settleErrs.Add(1)
	err = classify("settle on "+p.cfg.Channel, err)
	p.log.Warn("mq settle failed", "err", err)
	if p.cfg.OnSettleError != nil {
		p.cfg.OnSettleError(err)
	}
}

// pollClient is a stream client of the Poller with what it handed out.
type pollClient struct {
	poller  *Poller
	sc      *streamClient
	polls   int               // Run's goroutine only
	since   time.Time         // when it started polling; Run's goroutine only
	out     int               // unsettled messages; poller.mu
	txns    map[*txn]struct{} // batches not completely settled; poller.mu
	retired bool
	idle    chan struct{} // closed when retired and out == 0
	closing atomic.Bool   // set just before the SDK client is closed
}

func (p *Poller) newPollClient(sc *streamClient) *pollClient {
	return &pollClient{poller: p, sc: sc, txns: map[*txn]struct{}{}, idle: make(chan struct{}), since: time.Now()}
}

// release counts one message of t settled (or given up); last: it was the
// batch's last one, whose settlements have been sent.
func (pc *pollClient) release(t *txn, last bool) {
	p := pc.poller
	p.mu.Lock()
	pc.out--
	p.inflight--
	if last {
		delete(pc.txns, t)
		p.held -= len(t.resp.Messages)
	}
	if pc.retired && pc.out == 0 {
		close(pc.idle)
	}
	p.mu.Unlock()
	select {
	case p.room <- struct{}{}:
	default:
	}
}

// retire stops using pc: it is closed (in the background) once everything
// it delivered is settled, or at the hard stop, so that no ack is lost.
func (p *Poller) retire(pc *pollClient) {
	p.mu.Lock()
	pc.retired = true
	if pc.out == 0 {
		close(pc.idle)
	}
	p.mu.Unlock()
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		select {
		case <-pc.idle:
			// The last settlement is queued in the SDK; give its stream a
			// moment to send it before the close (which waits 100 ms more).
			time.Sleep(50 * time.Millisecond)
		case <-p.hardStop:
			// Send what incomplete batches have settled, so that it is
			// not delivered again; the close gives the rest back.
			p.mu.Lock()
			open := make([]*txn, 0, len(pc.txns))
			for t := range pc.txns {
				open = append(open, t)
			}
			p.mu.Unlock()
			for _, t := range open {
				_ = t.flush()
			}
		}
		pc.closing.Store(true)
		pc.sc.close()
	}()
}

// Run consumes the queue until ctx ends, then stops polling, waits up to
// DrainTimeout for the delivered messages to be settled, closes its stream
// clients and returns nil. It returns an error only for a second Run or a
// closed Conn.
func (p *Poller) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("mq: poller: Run called twice")
	}
	prepCtx, stopPrep := context.WithCancel(p.c.life)
	standby := make(chan *streamClient, 1)
	var prepWG sync.WaitGroup
	prep := func() {
		prepWG.Add(1)
		go func() {
			defer prepWG.Done()
			p.prepare(prepCtx, standby)
		}()
	}
	var cur *pollClient
	defer func() {
		stopPrep()
		prepWG.Wait()
		select {
		case sc := <-standby:
			sc.close()
		default:
		}
		if cur != nil {
			p.retire(cur)
		}
		drained := make(chan struct{})
		go func() { p.retiring.Wait(); close(drained) }()
		t := time.NewTimer(p.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			p.log.Warn("mq poller drain timeout, unsettled messages go back to the queue", "in_flight", p.InFlight())
			close(p.hardStop)
			<-drained
		case <-p.c.life.Done():
			close(p.hardStop)
			<-drained
		}
	}()
	prep()

	var (
		retry     = p.c.newBackoff()
		known     int // messages known to be waiting
		downSince time.Time
	)
	fail := func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		known = 0
		if errors.Is(err, ErrUnavailable) {
			p.setState(false, err)
			if downSince.IsZero() {
				downSince = time.Now()
			}
		} else {
			p.log.Warn("mq poller call failed", "err", err)
		}
		return sleep(ctx, retry.NextBackOff())
	}
	for ctx.Err() == nil {
		if err := p.c.isClosed(); err != nil {
			return fmt.Errorf("mq: poller %s: %w", p.cfg.Channel, err)
		}
		// Backpressure: no poll while MaxInFlight messages are out.
		p.mu.Lock()
		room := p.cfg.MaxInFlight - p.inflight
		p.mu.Unlock()
		if room <= 0 {
			select {
			case <-p.room:
			case <-ctx.Done():
			}
			continue
		}
		if known <= 0 && cur != nil && p.cfg.RecycleEvery > 0 && time.Since(cur.since) >= p.cfg.RecycleEvery {
			// Idle and old: close it (once what it delivered is settled),
			// which gives back anything stranded in its subscriptions.
			p.retire(cur)
			p.recycles.Add(1)
			cur = nil
		}
		if known <= 0 {
			// Idle watch with the legacy peek: it does not hold a slot of
			// the broker's stream poll pool (trap 11).
			n, err := p.peek(ctx)
			if err != nil {
				fail(err)
				continue
			}
			p.setState(true, nil)
			retry.Reset()
			if n == 0 {
				continue
			}
			// Poll what the peek saw at once and count the rest after
			// delivering it: the count (QueuesInfo) costs ~10 ms on a
			// real broker, which a lone task must not wait for.
			known = n
		}
		if cur == nil {
			select {
			case sc := <-standby:
				cur = p.newPollClient(sc)
				prep()
			case <-ctx.Done():
				continue
			}
		}
		ask := min(known, p.cfg.MaxItems, room)
		if ask > 1 && known-ask < p.cfg.MaxItems && p.quiesce(ctx) {
			// The tail of what is known: re-count once our batches are
			// settled, so that messages stranded meanwhile are not asked for.
			if known = p.ready(ctx); known <= 0 {
				continue
			}
			ask = min(known, p.cfg.MaxItems, room)
		}
		msgs, err := p.poll(cur, ask)
		if err != nil {
			if errors.Is(err, ErrUnavailable) && !downSince.IsZero() && time.Since(downSince) > p.c.cfg.ReplaceAfter {
				// A long outage: a new client gets a new connection.
				p.log.Info("mq poller replacing stream client", "down_for", time.Since(downSince).Round(time.Millisecond))
				p.retire(cur)
				cur, downSince = nil, time.Now()
			}
			fail(err)
			continue
		}
		downSince = time.Time{}
		p.setState(true, nil)
		retry.Reset()
		if p.onPoll != nil {
			p.onPoll(ask, len(msgs), known)
		}
		if len(msgs) > 0 {
			p.deliver(ctx, msgs)
		}
		known -= len(msgs)
		if len(msgs) < ask {
			known = 0 // fewer than asked: the poll waited, the estimate was off
		} else if known <= 0 {
			known = p.ready(ctx) // still busy? skip the peek
		}
		cur.polls++
		if cur.polls >= p.cfg.RecycleAfter || p.cfg.RecycleEvery > 0 && time.Since(cur.since) >= p.cfg.RecycleEvery {
			select {
			case sc := <-standby:
				p.retire(cur)
				p.recycles.Add(1)
				cur = p.newPollClient(sc)
				prep()
			default: // the next client is not warm yet; keep this one
			}
		}
	}
	return nil
}

// quiesce waits, up to PollWait (the most an over-asking poll would cost),
// until no batch of the Poller is open on the broker, and reports whether
// it waited at all. On the real broker each open batch is a member of the
// queue's NATS Streaming queue group. The final settlement of a batch frees
// room in its subscription just before closing it, and messages pushed into
// it in that window move to another member, with a redelivery in 100 ms,
// or, when that member is a full open batch, stay there until it completes:
// measured, the last poll of a 300-message burst asked for the 12 messages
// it had counted and got none after the whole WaitTimeout, while 18 batches
// completed around it. With no other batch open they go back to the
// group and to the next poll at once. Polls that leave at least MaxItems
// known behind fill from the rest and need no wait; polls of one follow a
// peek that saw the message.
func (p *Poller) quiesce(ctx context.Context) bool {
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held == 0 {
		return false
	}
	t := time.NewTimer(p.cfg.PollWait)
	defer t.Stop()
	for held > 0 {
		select {
		case <-p.room:
		case <-t.C:
			return true
		case <-ctx.Done():
			return true
		}
		p.mu.Lock()
		held = p.held
		p.mu.Unlock()
	}
	return true
}

// prepare makes a stream client and warms its downstream (1 s, trap 3)
// ahead of need, replacing it while it cannot connect, and hands it over.
func (p *Poller) prepare(ctx context.Context, out chan<- *streamClient) {
	retry := p.c.newBackoff()
	for ctx.Err() == nil {
		sc, err := p.c.newStreamClient(p.c.life, "poll")
		if err != nil {
			p.log.Warn("mq poller new stream client failed", "err", err)
			sleep(ctx, retry.NextBackOff())
			continue
		}
		for ctx.Err() == nil {
			if err = sc.warmPoll(); err == nil {
				select {
				case out <- sc:
					return
				case <-ctx.Done():
				}
				break
			}
			if time.Since(sc.made) > p.c.cfg.ReplaceAfter {
				break
			}
			sleep(ctx, retry.NextBackOff())
		}
		sc.close()
	}
}

// peek watches the idle queue: a legacy peek for one message, waiting up
// to PeekWait. It returns how many it saw (0 or 1).
func (p *Poller) peek(ctx context.Context) (int, error) {
	p.peeks.Add(1)
	msgs, err := p.c.peek(ctx, p.cfg.Channel, 1, p.cfg.PeekWait)
	return len(msgs), err
}

// ready estimates from QueuesInfo how many messages a poll would get at
// once; 0 when unknown. The real broker's Waiting also counts the messages
// delivered and not settled, ours included (measured: Waiting stayed 10
// while a poll held 4 of 10), so the Poller subtracts what its incomplete
// batches hold. Waiting drops only once the broker has applied our
// settlements, which it does not confirm, so the estimate is also capped by
// the messages stored after the last one received (LastSequence minus the
// highest sequence received), which does not depend on that timing. Both
// bounds can only undercount messages given back by a stream loss, which
// the idle peek then finds: an undercount costs a smaller poll, an
// overcount the whole WaitTimeout (trap 2).
func (p *Poller) ready(ctx context.Context) int {
	q, ok, err := p.c.queueInfo(ctx, p.cfg.Channel)
	if err != nil || !ok {
		return 0
	}
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	n := q.Waiting - int64(held)
	if p.maxSeq > 0 && q.LastSequence > 0 {
		n = min(n, q.LastSequence-int64(p.maxSeq))
	}
	return int(max(n, 0))
}

// poll makes one stream poll of n messages with the client's lifetime
// context (trap 4) and AutoAck off.
func (p *Poller) poll(pc *pollClient, n int) ([]*Message, error) {
	p.polls.Add(1)
	t := &txn{pc: pc}
	resp, err := pc.sc.c.Poll(pc.sc.ctx, &qs.PollRequest{
		Channel:     p.cfg.Channel,
		MaxItems:    n,
		WaitTimeout: int(p.cfg.PollWait / time.Millisecond), // milliseconds (trap 1)
		AutoAck:     false,
		OnErrorFunc: t.onError,
	})
	if err != nil {
		return nil, classify("poll "+p.cfg.Channel, err)
	}
	if len(resp.Messages) == 0 {
		return nil, nil
	}
	t.resp = resp
	t.mu.Lock()
	t.size, t.open = len(resp.Messages), len(resp.Messages)
	t.mu.Unlock()
	msgs := make([]*Message, 0, len(resp.Messages))
	for _, qm := range resp.Messages {
		m := fromPB(qm.QueueMessage)
		m.tx = t
		p.maxSeq = max(p.maxSeq, m.Sequence)
		msgs = append(msgs, m)
	}
	p.mu.Lock()
	pc.out += len(msgs)
	pc.txns[t] = struct{}{}
	p.inflight += len(msgs)
	p.held += len(msgs)
	p.mu.Unlock()
	p.msgs.Add(int64(len(msgs)))
	return msgs, nil
}

// deliver hands msgs to Deliver; what a refused batch leaves unsettled is
// NAcked, or at shutdown released uncounted (the stream close gives it
// back without counting a receive).
func (p *Poller) deliver(ctx context.Context, msgs []*Message) {
	err := p.cfg.Deliver(ctx, msgs)
	if err == nil {
		return
	}
	for _, m := range msgs {
		if m.Settled() {
			continue
		}
		if ctx.Err() != nil {
			if m.settled.CompareAndSwap(false, true) {
				m.tx.drop()
			}
			continue
		}
		if nerr := m.NAck(); nerr != nil && !errors.Is(nerr, ErrAlreadySettled) {
			p.log.Warn("mq nack of refused message failed", "msg", m, "err", nerr)
		}
	}
	if ctx.Err() == nil {
		p.log.Warn("mq deliver refused a batch", "n", len(msgs), "err", err)
	}
}
