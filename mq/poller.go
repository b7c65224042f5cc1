package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/lograte"
)

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Channel is the queue to consume. Required.
	Channel string
	// Deliver receives each polled batch, in sequence order, from the
	// Poller's goroutine. From the call on, every message of the batch is
	// Deliver's to settle (Ack, NAck, ReQueue or GiveBack), now or later,
	// whatever it returns: the Poller settles none. A message that is never
	// settled holds its batch's other settlements back until the stream
	// client closes (see Message), so one it cannot take at shutdown must
	// be given back. It may block: while it blocks the Poller does not poll
	// (backpressure). It must return when ctx ends. A non-nil error is
	// logged. Required.
	Deliver func(ctx context.Context, batch []*Message) error
	// MaxItems caps one stream poll. A poll never asks for more than is
	// known to be waiting, so that it fills and returns at once (trap 2).
	// Default 32.
	MaxItems int
	// MaxInFlight caps the messages handed to Deliver and not yet settled;
	// at the cap the Poller stops polling. Default 4 x MaxItems. Batches
	// overlap only as the Poller allows (see Poller).
	MaxInFlight int
	// PeekWait is how long one idle watch (legacy peek) waits for a
	// message, in whole seconds. Default 1 s.
	PeekWait time.Duration
	// PollWait is the stream poll's WaitTimeout. The broker raises it to
	// 1 s (trap 1); it only matters when fewer messages than asked for are
	// there (another consumer took them). It also bounds how long a
	// batch's settlements wait for a quiet moment (see pollView.keptDue).
	// Default 1 s.
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
	// OverlapAfter is how long a batch may be open before the Poller looks
	// for more messages beside it, and then how often it looks again. While
	// a batch of its own is open the Poller does not peek: on KubeMQ a peek
	// is a member of the queue's group, and a message it saw moves, when it
	// closes, into the open batch, where nothing sees it until that batch
	// completes (a 100 ms redelivery at best, trap 13). It counts instead
	// (QueuesInfo, no member) and polls what the count finds, so that a
	// long batch does not hold up the next tasks. It is also the least
	// time between counts after one that found nothing (see pollView.delivered).
	// Default 50 ms.
	OverlapAfter time.Duration
	// SettleGrace bounds the first peek after a batch completes: KubeMQ
	// closes the batch a moment after its last settlement, and a message
	// that arrives in between moves from the closing batch to that peek
	// with a redelivery 100 ms later. A peek closed before then gives it
	// back to the queue at once, where the next peek sees it. Default 3 ms.
	SettleGrace time.Duration
	// FollowWithin marks a live queue: when a lone task (a poll of one,
	// which a peek or a follow saw) arrives within FollowWithin of the
	// completion of the batch before it, the Poller follows the queue: as
	// soon as that task's batch completes it stream-polls for the next one
	// at once, on the same stream, instead of peeking. The broker serves
	// that poll after the settlements before it, when the batch is closed,
	// so the next task cannot fall into the closing batch (see
	// SettleGrace), and the task costs one call instead of a peek and a
	// poll (KUBEMQ.md fact 25). A follow that comes back empty (the queue
	// went quiet) held one of the broker's poll slots for its whole wait
	// (trap 11): the Poller watches with peeks again until a task comes
	// soon enough after a completion. Default 10 ms; negative disables.
	FollowWithin time.Duration
	// DrainTimeout is how long Run waits, after its ctx ends, for the
	// delivered messages to be settled before closing the stream clients,
	// which gives the rest back to the queue uncounted. Default 30 s.
	DrainTimeout time.Duration
	// AnswerWithin is the longest the broker may go without answering a
	// call of the Poller before Up reports false. A frozen broker (a
	// SIGSTOP, a hung host) fails nothing: its connections stay open and
	// calls just wait. While the Poller has no reason to call the broker
	// (it waits for its batch to be settled, for Deliver, or for a stream
	// client to connect) it pings it as often as the idle watch would
	// peek, so a quiet queue or a slow model is not taken for a silent
	// broker. It must exceed PeekWait and PollWait. Default 2 x the longer
	// of them + the Conn's CallTimeout (12 s with the defaults).
	AnswerWithin time.Duration
	// OnState is called when the Poller finds the broker up or down (for
	// /readyz), from the Poller's goroutines; it must not block. It owns
	// the event: the Poller logs the change only when OnState is nil.
	OnState func(up bool, err error)
	// OnSettleError is called with settlement failures the SDK reports
	// after Ack, NAck or ReQueue returned (trap 6), and with stream losses
	// that gave held messages back; from SDK goroutines; it must not block.
	// The SDK's reports about batches whose settlements had all gone out
	// are not failures and are only counted (PollerStats.StaleNotices).
	// It owns the event: the Poller logs failures (rate-limited) only when
	// OnSettleError is nil.
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
	setDefault(&c.OverlapAfter, 50*time.Millisecond)
	setDefault(&c.SettleGrace, 3*time.Millisecond)
	if c.FollowWithin == 0 {
		c.FollowWithin = 10 * time.Millisecond
	}
	if c.AnswerWithin < 0 || c.AnswerWithin > 0 && c.AnswerWithin <= c.longestWait() {
		return fmt.Errorf("mq: poller: AnswerWithin %v must exceed the peek and poll waits (%v)", c.AnswerWithin, c.longestWait())
	}
	return nil
}

// longestWait is the longest a call of the Poller waits at the broker on
// purpose: a peek's whole seconds, or a poll's wait.
func (c *PollerConfig) longestWait() time.Duration {
	return max(time.Duration(waitSeconds(c.PeekWait))*time.Second, c.PollWait)
}

// PollerStats are a Poller's counters.
type PollerStats struct {
	Peeks, Polls, Messages, Recycles, SettleErrors int64
	// Counts counts the QueuesInfo calls the Poller made (see pollView.ready).
	Counts int64
	// Follows counts the polls made at once after a batch completed,
	// without a peek (see FollowWithin).
	Follows int64
	// QuietCloses counts the sendings of deferred settlements (see
	// deferClose) after which a count found that they stranded nothing;
	// LoudCloses the ones after which it could not tell.
	QuietCloses, LoudCloses int64
	// StaleNotices counts the SDK's error reports for batches whose
	// settlements had all been sent (see txn.onError): on the real broker
	// one per batch of each stream client at its close. Not failures.
	StaleNotices int64
}

// Poller consumes one queue with one queues_stream client at a time: the
// only poller of its queue in the process (traps 11, 12; get concurrency
// from the pipeline behind it, or a sharded queue, package shard). An idle
// queue is watched with the legacy peek (trap 11) while no batch of its own
// is open; a live queue is followed (FollowWithin, fact 25). When messages
// wait it stream-polls at most as many as are ready, capped by MaxItems,
// with AutoAck off; a poll's messages are settled together (see Message).
// Batches overlap only while the queue is light: on a busy queue, batches
// that overlap pass stranded messages on from one to the next (traps 5, 13,
// facts 40, 45), so it holds one batch at a time there. A batch completed
// beside a running one keeps its settlements for a quiet moment (fact 47).
// Each of these decisions is a rule of nextStep (pollstep.go), carried out
// by Run's loop; docs/KUBEMQ.md gives the broker's side, BENCHMARKS.md the
// measurements. A GiveBack leaves its batch open until the client closes,
// so the Poller changes clients, and waits for the close, before it polls.
// It recycles its stream client every RecycleAfter polls, retries with
// backoff while the broker is away and reports up/down through OnState.
//
// Run may be called once. Stats and Up are safe for concurrent use.
type Poller struct {
	c    *Conn
	cfg  PollerConfig
	log  *slog.Logger
	warn *lograte.Limiter // repeated warnings (outages, failing settlements)

	mu       sync.Mutex
	inflight int // delivered and not settled
	held     int // in batches not completely settled: still held on the broker
	// batches are the open batches, oldest first (see pollView.look).
	batches []*txn
	// overlapped: a batch completed while another was open, at
	// overlappedAt; no poll until held is 0, or for PollWait (see
	// pollView.mayPoll).
	overlapped   bool
	overlappedAt time.Time
	// overlapGen counts the times overlapped was set, so that a check
	// that found a quiet close clean clears only its own (see
	// loop.closeDeferred).
	overlapGen int
	// deferred are the batches whose every message is settled while
	// another batch was running, whose settlements wait for a quiet moment
	// (see deferClose), oldest first.
	deferred []*txn
	room     chan struct{} // signalled when a message is settled
	// completedAt is when a batch last completed (unix ns; see
	// SettleGrace and FollowWithin).
	completedAt atomic.Int64
	// lastDone is the size of the batch that completed last (mu).
	lastDone int
	// holdingOpen counts the open batches that may hold messages no poll
	// sees: strays they were handed and did not ask for, or what their
	// unfilled room took (see poll; mu).
	holdingOpen int
	// strayedOpen is how many messages the open batches polled for what a
	// peek saw after a completion may hold unseen: on KubeMQ a peek made
	// while a batch closes takes that batch's strays beside what it saw
	// (fact 46), and the poll of one that follows is handed all of them
	// and keeps one (fact 45). The held one comes after what the poll
	// received, so a count beside that batch includes it: a poll beside
	// asks for the count less strayedOpen (see pollView.ask; mu).
	strayedOpen int
	seen        seen // the sequences received; Run's goroutine only

	up      atomic.Bool
	stateMu sync.Mutex
	known   bool // an up/down state was reported
	// answered is when the broker last answered a call of the Poller
	// (unix ns); parked is set while Run's loop waits for room, for
	// Deliver or for a stream client and makes no call, when probe pings
	// instead.
	answered atomic.Int64
	parked   atomic.Bool

	peeks, polls, msgs, recycles, settleErrs atomic.Int64
	counts, follows                          atomic.Int64
	quietCloses, loudCloses                  atomic.Int64
	staleNotices                             atomic.Int64
	started                                  atomic.Bool
	retiring                                 sync.WaitGroup
	hardStop                                 chan struct{}

	onPoll func(asked, got, waiting int) // test hook
	// beforePoll is a test hook, called before each poll with its ask,
	// whether a batch of the Poller's is open beside it, and whether the
	// ask comes from a count (not from what a peek or a follow saw).
	beforePoll func(ask int, beside, counted bool)
	// beforeQuietClose is a test hook, called by closeDeferred before it
	// sends the waiting settlements.
	beforeQuietClose func()
	// countHook is a test hook that sees (and may change) every count's
	// answer before the Poller reads it.
	countHook func(*QueueInfo)
}

// NewPoller returns a Poller for cfg.Channel on c. It does not start it.
func (c *Conn) NewPoller(cfg PollerConfig) (*Poller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := c.log.With("channel", cfg.Channel)
	if cfg.AnswerWithin == 0 {
		cfg.AnswerWithin = 2*cfg.longestWait() + c.cfg.CallTimeout
	}
	return &Poller{
		c: c, cfg: cfg,
		log:      log,
		warn:     lograte.New(log, c.cfg.LogRepeatEvery),
		room:     make(chan struct{}, 1),
		hardStop: make(chan struct{}),
	}, nil
}

// Up reports whether the broker answers: the Poller's last call to it
// succeeded, and it answered one within AnswerWithin.
func (p *Poller) Up() bool {
	return p.up.Load() && time.Since(time.Unix(0, p.answered.Load())) <= p.cfg.AnswerWithin
}

// heard notes an answer of the broker.
func (p *Poller) heard() { p.answered.Store(time.Now().UnixNano()) }

// Stats returns the Poller's counters.
func (p *Poller) Stats() PollerStats {
	return PollerStats{
		Peeks: p.peeks.Load(), Polls: p.polls.Load(), Messages: p.msgs.Load(), Counts: p.counts.Load(), Follows: p.follows.Load(),
		Recycles: p.recycles.Load(), SettleErrors: p.settleErrs.Load(),
		StaleNotices: p.staleNotices.Load(),
		QuietCloses:  p.quietCloses.Load(), LoudCloses: p.loudCloses.Load(),
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
	switch {
	case p.cfg.OnState != nil:
		p.cfg.OnState(up, err) // the owner of the event logs it
	case up:
		p.log.Info("mq poller broker up")
	default:
		p.log.Warn("mq poller broker down", "err", err)
	}
}

func (p *Poller) settleFailed(err error) {
	p.settleErrs.Add(1)
	err = classify("settle on "+p.cfg.Channel, err)
	if p.cfg.OnSettleError != nil {
		p.cfg.OnSettleError(err) // the owner of the event logs it
		return
	}
	p.warn.Warn("mq settle failed", "err", err)
}

// Run consumes the queue until ctx ends, then stops polling, waits up to
// DrainTimeout for the delivered messages to be settled, closes its stream
// clients and returns nil. It returns an error only for a second Run or a
// closed Conn.
func (p *Poller) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("mq: poller: Run called twice")
	}
	l := p.newLoop(ctx)
	defer l.stop()
	for ctx.Err() == nil {
		if err := p.c.isClosed(); err != nil {
			return fmt.Errorf("mq: poller %s: %w", p.cfg.Channel, err)
		}
		l.step()
	}
	return nil
}

// queueInfo asks the broker for the queue's counts, and notes its answer
// when it comes (an answer taken later must not count as a later one).
func (p *Poller) queueInfo(ctx context.Context) (QueueInfo, bool, error) {
	p.counts.Add(1)
	q, ok, err := p.c.queueInfo(ctx, p.cfg.Channel)
	if err == nil {
		p.heard()
	}
	return q, ok, err
}

// drain waits up to DrainTimeout for the retiring clients to have settled
// what they delivered and to close; then (or when the Conn closes) it hard
// stops them: their open batches send what was settled and the close gives
// the rest back to the queue uncounted.
func (p *Poller) drain() {
	drained := make(chan struct{})
	go func() { p.retiring.Wait(); close(drained) }()
	t := time.NewTimer(p.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-drained:
		return
	case <-t.C:
		if n := p.InFlight(); n > 0 {
			p.log.Warn("mq poller drain timeout, unsettled messages go back to the queue", "in_flight", n)
		} else {
			// Everything was settled; a stream client is still closing.
			p.log.Info("mq poller drain timeout with every message settled; closing the stream clients now")
		}
	case <-p.c.life.Done():
	}
	close(p.hardStop)
	<-drained
}

// peek watches the idle queue: a legacy peek for one message, waiting up
// to PeekWait (or until ctx ends). It returns how many it saw (0 or 1).
func (p *Poller) peek(ctx context.Context) (int, error) {
	p.peeks.Add(1)
	msgs, err := p.c.peek(ctx, p.cfg.Channel, 1, p.cfg.PeekWait)
	return len(msgs), err
}

// probe keeps Up true to the broker while Run's loop makes no call: every
// PeekWait that the loop stays parked (waiting for room, for Deliver or
// for a stream client) without an answer, it pings the broker, within the
// Conn's CallTimeout.
// An answer counts as one to the loop; a broker that does not answer, or
// is away, is reported down. When the loop calls again, its calls decide.
func (p *Poller) probe(ctx context.Context) {
	every := time.Duration(waitSeconds(p.cfg.PeekWait)) * time.Second
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !p.parked.Load() || time.Since(time.Unix(0, p.answered.Load())) < every {
			continue
		}
		err := p.c.Ping(ctx)
		switch {
		case ctx.Err() != nil || !p.parked.Load():
		case err == nil:
			p.heard()
			p.setState(true, nil)
		default:
			p.setState(false, err)
		}
	}
}
