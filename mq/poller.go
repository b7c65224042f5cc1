package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
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
	// batch's settlements wait for a quiet moment (see Poller). Default 1 s.
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
	// time between counts after one that found nothing (see countAside).
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
	// poll: measured on KubeMQ v2.4.0, one task at a time, broker store to
	// delivery went from 1.0-1.3 to 0.54 ms (median) and from 4.2-4.5 to
	// 1.2-1.3 ms (p90). A follow that comes back empty (the queue went
	// quiet) held one of the broker's poll slots for its whole wait (trap
	// 11): the Poller watches with peeks again until a task comes soon
	// enough after a completion. Default 10 ms; negative disables.
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
	// Counts counts the QueuesInfo calls the Poller made (see ready).
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
// from the pipeline behind it). An idle queue is watched with the legacy
// peek (no stream poll waits on an empty queue, trap 11), only while no
// batch of its own is open (see OverlapAfter and SettleGrace). A live
// queue, one task after another, is followed instead (see FollowWithin):
// there a stream poll waits once, when the queue goes quiet. When
// messages are there it stream-polls at most as many as are ready (see
// ready), capped by MaxItems, with AutoAck off. The messages of one poll
// are settled on the broker together (see Message).
//
// Its batches overlap only while the queue is light. On KubeMQ each open
// poll transaction is a member of the queue's NATS Streaming queue group,
// and the settlements that complete one make room in it that the broker
// fills with the next messages of the queue, seen by no poll (trap 13);
// closing it moves them to another open member, where they wait for that
// one to close. Batches that keep overlapping on a busy queue pass them on
// from member to member for as long as the load lasts: measured on KubeMQ
// v2.4.0, a 110k-task flood with up to four batches of one poller open at
// once left 1,900 tasks unsettled after 10 minutes and delivered others up
// to 10 times (786 ran twice). So while more is known to be waiting than
// one poll takes, the Poller holds one batch at a time: what the closing
// batch stranded goes back to the queue (no other member is open) and to
// the next poll. When a poll takes all that is known to be waiting (a
// light queue), it may overlap the open batches, so that a long task does
// not hold up the next ones and a device's next batch is taken while one
// runs. A batch whose last message is settled while another runs does not
// complete then, when its results have just been stored and their
// producers send their next tasks: its settlements wait until a count
// finds nothing waiting, so that its close strands nothing, and a count
// SettleGrace later makes sure of it (see deferClose and closeDeferred;
// KUBEMQ.md fact 47). A completion beside an open batch that may have
// stranded messages there (that count cannot tell, or the settlements had
// to go before the queue was quiet) stops polls until none is open, or for
// PollWait (the most an over-asking poll would cost; an open batch may be
// a long task's). What a batch's
// settlement strands goes, when no other batch is open, to the next poll,
// all of it, whatever that poll asked for; the poll keeps what it asked for
// and holds the rest unseen until it completes (KUBEMQ.md fact 45). So
// after a batch that was not a lone task's on a light queue completes, the
// Poller counts before polling and asks for every sequence stored and not
// received (see ready and strays). It polls beside no batch that may hold
// messages no poll sees: one that asked for less than was counted (it may
// have been handed more), or one that came back short (the rest of its
// room stays open while it runs, trap 13); and after a poll beside an open
// batch comes back short, beside none until they complete (or for
// PollWait). Beside a batch polled for what a peek saw after a completion
// it asks for the count less what that batch may hold (strayedOpen, fact
// 46). Several replicas on one channel overlap each other's batches
// and peeks (trap 12), which no Poller sees: a sharded queue (package
// shard) gives each channel one consumer (BENCHMARKS.md measures both,
// issue 12 item 2). A batch
// with a message given back (GiveBack) stays open on the broker until its
// client closes, so the Poller changes clients, and waits for the close,
// before its next poll.
//
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
	// batches are the open batches, oldest first (see holding).
	batches []*txn
	// overlapped: a batch completed while another was open, at
	// overlappedAt; no poll until held is 0, or for PollWait (see Poller).
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
	// asks for the count less strayedOpen (see askSize; mu).
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

// loop is the state of one Run, owned by Run's goroutine: the stream client
// in use, the next one warming up (and the probe, on the same context),
// what is known to be waiting and the backoff while the broker is away.
type loop struct {
	p   *Poller
	ctx context.Context

	cur      *pollClient
	standby  chan *streamClient // a warm client, from prepare
	prepCtx  context.Context
	stopPrep context.CancelFunc
	prepWG   sync.WaitGroup

	retry     *backoff.ExponentialBackOff
	known     int       // messages known to be waiting
	looked    time.Time // the last poll that delivered, or count: see look
	counted   bool      // known is a count (ready), not what the peek saw
	downSince time.Time // first failure of the current client while the broker is away

	// A count taken aside (countAside) comes back on aside; counting is
	// set while one is under way. countedAt and found are when the last
	// count taken was asked for (what completed after it, it may not
	// reflect: see stale and watch) and its answer.
	aside     chan asideCount
	counting  bool
	asideWG   sync.WaitGroup
	countedAt time.Time
	found     int

	// following: the queue is live, and the next poll after a batch
	// completes is made at once (see FollowWithin). watched is the
	// completion (Poller.completedAt) that the last watch knew of.
	following bool
	watched   int64
	// strayed: known is what a peek saw after a batch completed, with no
	// poll since (see watch); the poll of it may be handed up to strayed
	// of that batch's strays beside it, and hold them unseen. polledDone
	// is the completion (Poller.completedAt) the last poll knew of.
	strayed    int
	polledDone int64
	// quiet: a count asked after the oldest batch in deferred found
	// nothing waiting: time to send their settlements (closeDeferred).
	quiet bool
	// closing: the last count found more pending than the Poller holds
	// and can poll: Waiting still counts a completed batch whose
	// settlement the broker has not applied yet (seen on KubeMQ 3-4 ms
	// after a batch of 64 completed), and strays (fact 39). See strays.
	closing bool
}

// asideCount is a count's answer.
type asideCount struct {
	q   QueueInfo
	ok  bool
	err error
	at  time.Time // when it was asked for
}

func (p *Poller) newLoop(ctx context.Context) *loop {
	l := &loop{p: p, ctx: ctx, standby: make(chan *streamClient, 1), retry: p.c.newBackoff(), aside: make(chan asideCount, 1)}
	l.prepCtx, l.stopPrep = context.WithCancel(p.c.life)
	l.prepareNext()
	l.prepWG.Add(1)
	go func() {
		defer l.prepWG.Done()
		p.probe(l.prepCtx)
	}()
	return l
}

// prepareNext starts warming the next stream client in the background.
func (l *loop) prepareNext() {
	l.prepWG.Add(1)
	go func() {
		defer l.prepWG.Done()
		l.p.prepare(l.prepCtx, l.standby)
	}()
}

// step is one turn of the loop: wait for the last batch to be settled,
// watch the queue while nothing is known to be waiting, then poll what is.
func (l *loop) step() {
	select {
	case a := <-l.aside:
		l.takeAside(a)
	default:
	}
	if since, ok := l.p.oldestDeferred(); l.quiet || ok && time.Since(since) >= l.p.cfg.PollWait {
		l.closeDeferred()
	}
	if ok, retry := l.p.mayPoll(l.known); !ok {
		if _, ok := l.p.oldestDeferred(); ok {
			// Sent now, not with the last running batch: the two
			// measured alike, this way 0.5 % ahead (BENCHMARKS.md,
			// seventh session).
			l.closeDeferred()
			return
		}
		l.waitRoom(retry)
		return
	}
	if l.known <= 0 {
		if !l.look() {
			return
		}
		if ok, _ := l.p.mayPoll(l.known); !ok {
			return // a batch completed during the watch: the next step waits
		}
	} else if l.stale() {
		if l.count(); l.known <= 0 {
			return
		}
	}
	l.retireLeftOpen()
	if !l.useClient() {
		return
	}
	ask := l.askSize(l.p.free())
	if ask <= 0 {
		return
	}
	l.pollOnce(ask)
}

// mayPoll reports whether the Poller may poll (or watch) now, with known
// messages waiting: under MaxInFlight, and either with no batch open, or
// for a poll that takes all that is known to be waiting while no open
// batch may hold messages no poll sees (see poll) and no batch has
// completed beside another in the last PollWait (see Poller). The wait
// after such a completion is bounded: an open batch may be one whose
// stream was lost (the broker has its messages back already) or a long
// task's, and what the completing batch stranded goes back when the
// batches it may sit in close, at the latest. When it may not poll
// because of that wait, retry is how long the wait has left.
func (p *Poller) mayPoll(known int) (ok bool, retry time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.inflight >= p.cfg.MaxInFlight:
		return false, 0
	case p.held == 0:
		return true, 0
	case known > p.cfg.MaxItems:
		return false, 0 // a busy queue: one batch at a time
	case p.holdingOpen > 0:
		return false, 0 // what is counted may sit in that batch (see poll)
	case known > 0 && known <= p.strayedOpen:
		return false, 0 // all of it may (see strayedOpen)
	case !p.overlapped:
		return true, 0
	}
	if left := p.cfg.PollWait - time.Since(p.overlappedAt); left > 0 {
		return false, left
	}
	return true, 0
}

// look finds out whether messages wait, when none is known to: with a
// batch of the Poller's open it does not peek (see OverlapAfter) but waits
// for a settlement, and counts once the batch has been open OverlapAfter
// (and every OverlapAfter after that), or waits for the answer of a count
// already under way (countAside); with none open it watches. Batches
// open for PeekWait are watched past as well: the count subtracts what
// they hold, which a lost stream has given back to the queue already.
func (l *loop) look() bool {
	if since, open := l.p.holding(); open && since < l.p.cfg.PeekWait {
		if wait := l.p.cfg.OverlapAfter - time.Since(l.looked); wait > 0 || l.counting {
			l.waitRoom(min(wait, l.p.cfg.PeekWait-since))
			return false
		}
		l.count()
		return l.known > 0
	}
	l.retireIdleClient()
	return l.watch()
}

// deferClose decides, when the last message of batch t is settled, whether
// its settlements wait (later) or go now, with the batches that waited for
// a quiet moment (with). They wait while another batch of the Poller's
// runs (is open and not waiting): on KubeMQ the batch's close would move
// what its settlement strands into the open ones, unseen (trap 13, fact
// 40), and the settlement comes right after the batch's results were
// stored, just when their producers send their next tasks. Run's loop
// sends them once a count finds nothing waiting (closeDeferred), so that
// the close strands nothing, and makes sure of it. When no other batch
// runs, they all go now, together, as one batch would.
func (p *Poller) deferClose(t *txn) (later bool, with []*txn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	running := p.held - len(t.resp.Messages)
	for _, d := range p.deferred {
		running -= len(d.resp.Messages)
	}
	if running > 0 && !t.pc.retired && !t.pc.leftOpen.Load() {
		t.deferredAt = time.Now()
		p.deferred = append(p.deferred, t)
		return true, nil
	}
	return false, p.takeDeferredLocked(nil)
}

// takeDeferred takes the batches whose settlements wait (see deferClose),
// pc's only unless pc is nil: the caller sends them and completes them.
func (p *Poller) takeDeferred(pc *pollClient) []*txn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeDeferredLocked(pc)
}

func (p *Poller) takeDeferredLocked(pc *pollClient) []*txn {
	var taken []*txn
	kept := p.deferred[:0]
	for _, t := range p.deferred {
		if pc != nil && t.pc != pc {
			kept = append(kept, t)
			continue
		}
		t.deferredAt = time.Time{}
		taken = append(taken, t)
	}
	clear(p.deferred[len(kept):])
	p.deferred = kept
	return taken
}

// oldestDeferred reports since when the oldest batch whose settlements
// wait (see deferClose) has waited; false when none waits.
func (p *Poller) oldestDeferred() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.deferred) == 0 {
		return time.Time{}, false
	}
	return p.deferred[0].deferredAt, true
}

// overlapShort notes a poll made beside an open batch that came back
// short: what it was counted for sits in an open batch (strays the batch's
// poll was forced to take, KUBEMQ.md fact 45). Like a completion beside an
// open batch, it stops polls beside the open ones (see mayPoll).
func (p *Poller) overlapShort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held > 0 {
		p.overlapped, p.overlappedAt = true, time.Now()
		p.overlapGen++
	}
}

// holding reports whether a batch of the Poller's is open on the broker,
// and for how long the oldest one that is not waiting to be closed (see
// deferClose) has been: batches overlap without a break while a device
// keeps two in flight, and each of them is short.
func (p *Poller) holding() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.batches {
		if t.deferredAt.IsZero() {
			return time.Since(t.polledAt), true
		}
	}
	return 0, p.held > 0
}

// waitRoom waits for a settlement (backpressure: no poll while MaxInFlight
// messages are out, or while overlapping batches close).
func (l *loop) waitRoom(atMost time.Duration) {
	l.p.parked.Store(true)
	defer l.p.parked.Store(false)
	var timeout <-chan time.Time
	if atMost > 0 {
		t := time.NewTimer(atMost)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-l.p.room:
	case a := <-l.aside:
		l.takeAside(a)
	case <-timeout:
	case <-l.ctx.Done():
	}
}

// retireIdleClient closes an idle client once it is RecycleEvery old (after
// what it delivered is settled), which gives back anything stranded in its
// subscriptions.
func (l *loop) retireIdleClient() {
	if l.cur != nil && l.p.cfg.RecycleEvery > 0 && time.Since(l.cur.since) >= l.p.cfg.RecycleEvery {
		l.p.retire(l.cur)
		l.p.recycles.Add(1)
		l.cur = nil
	}
}

// retireLeftOpen changes clients when the current one has a batch that a
// GiveBack left open on the broker (see Poller): closing the client gives
// the message back, and the next poll waits for that close so as not to
// overlap the batch (GiveBack is rare: a task caught by a shutdown).
func (l *loop) retireLeftOpen() {
	pc := l.cur
	if pc == nil || !pc.leftOpen.Load() {
		return
	}
	l.p.retire(pc)
	l.p.recycles.Add(1)
	l.cur = nil
	l.p.parked.Store(true)
	defer l.p.parked.Store(false)
	select {
	case <-pc.closed:
	case <-l.ctx.Done():
	}
}

// watch peeks the idle queue with the legacy peek, which does not hold a
// slot of the broker's stream poll pool (trap 11), and reports whether it
// saw a message. What the peek saw is polled at once and the rest counted
// after delivering it: the count (QueuesInfo) costs ~10 ms on a real
// broker, which a lone task must not wait for. The first peek after a
// batch completed gives up after SettleGrace. On a live queue there is no
// peek after a completion: the Poller follows it (see FollowWithin and
// follow), and reports the next task as seen, to be polled at once.
func (l *loop) watch() bool {
	ctx := l.ctx
	done := l.p.completedAt.Load()
	short := done > l.watched // a batch completed since the last watch
	l.watched = done
	if short && l.strays() {
		return true
	}
	if short && l.following {
		if _, open := l.p.holding(); !open {
			l.p.follows.Add(1)
			l.known, l.counted = 1, false
			return true
		}
	}
	if short {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(l.ctx, l.p.cfg.SettleGrace)
		defer cancel()
	}
	n, err := l.p.peek(ctx)
	if short && errors.Is(err, context.DeadlineExceeded) && l.ctx.Err() == nil {
		// The grace passed (ctx.Err may not say so yet: see
		// callersDeadline); not a failure: peek again.
		l.known = 0
		return false
	}
	if err != nil {
		l.fail(err)
		return false
	}
	l.succeeded()
	l.known, l.counted, l.strayed = n, false, 0
	if done := l.p.completedAt.Load(); n > 0 && done > l.polledDone && done > l.countedAt.UnixNano() {
		l.p.mu.Lock()
		l.strayed = l.p.lastDone
		l.p.mu.Unlock()
	}
	return n > 0
}

// strays counts the queue after a batch completed, with no other batch
// open, when that batch's settlement may have left strays in its
// subscription: unless the batch was a lone task's on a light queue (the
// last count found nothing waiting beside our batches, and every sequence
// below the highest received was delivered), which a peek or a follow
// serves without the cost of a count (~3 ms). KubeMQ forces every stray on
// the next poll, and that poll keeps only what it asked for (KUBEMQ.md
// fact 45): a peek or a follow would ask for one and leave the others in
// its batch, for one more batch each, so the next poll asks for what the
// count finds (see ready). A count that finds none waiting means the gaps
// were no strays (another consumer took them, or the broker rerouted or
// expired them): they are forgotten. While a count finds more pending than
// the Poller holds and can poll, the broker may still be applying the
// settlement, and the close still taking in what arrives: it counts again
// (see closeRecounts). It reports whether the count found messages to
// poll.
func (l *loop) strays() bool {
	p := l.p
	p.mu.Lock()
	open, lone := p.held > 0, p.lastDone <= 1
	p.mu.Unlock()
	if open || lone && l.found <= 0 && p.seen.gaps() <= 0 {
		return false
	}
	l.count()
	// A count made while the broker still applies the batch's settlement
	// (closing) does not show what that close is still taking in: a
	// burst arriving then goes to the group's shadow, and the next poll
	// is handed all of it and keeps what it did not ask for unseen (fact
	// 45), which a poll beside it, counted for them, waits for. Count
	// again once the close is done, a few times; not when more waits than
	// a poll takes (a busy queue: no poll goes beside that one).
	for range closeRecounts {
		if !l.closing || l.known > p.cfg.MaxItems || !sleep(l.ctx, p.cfg.SettleGrace) {
			break
		}
		l.count()
	}
	if l.known > 0 {
		return true
	}
	p.seen.forget()
	return false
}

// closeRecounts bounds the counts strays makes again while a completed
// batch's close is under way.
const closeRecounts = 3

// stale reports whether what is known to be waiting is what was left of a
// count made before the last batch completed, fewer than that batch held,
// with none of the Poller's batches open: that batch's settlement may have
// left as many strays as it held, and the next poll is handed all of them
// and keeps what it asked for (KUBEMQ.md fact 45). Asking for the
// remainder of the older count would hold the rest unseen for one more
// batch, and make a small one: on a busy queue, about once per count, a
// poll of a few (a run of a few rows at the cost of a full run on an
// accelerator) and one of the rest. So the Poller counts again first.
func (l *loop) stale() bool {
	if !l.counted || l.known <= 0 {
		return false
	}
	p := l.p
	p.mu.Lock()
	open, last := p.held > 0, p.lastDone
	p.mu.Unlock()
	return !open && l.known < last && p.completedAt.Load() > l.countedAt.UnixNano()
}

// useClient makes sure a stream client is in use, taking the warm one
// (waiting for it) when none is; false when ctx ended first. The loop makes
// no call while it waits (the first client warms up for a second, trap 3,
// and none connects while the broker is away), so it is parked: the probe
// finds out whether the broker still answers.
func (l *loop) useClient() bool {
	if l.cur != nil {
		return true
	}
	l.p.parked.Store(true)
	defer l.p.parked.Store(false)
	select {
	case sc := <-l.standby:
		l.cur = l.p.newPollClient(sc)
		l.prepareNext()
		return true
	case <-l.ctx.Done():
		return false
	}
}

// free is how many more messages may be handed out under MaxInFlight.
func (p *Poller) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.MaxInFlight - p.inflight
}

// askSize is how many messages the next poll asks for: what is known to be
// waiting less what open batches may hold unseen (strayedOpen), capped by
// MaxItems and room; 0 to watch (peek) instead. A count of one is peeked
// first: that message may be one that the last batch stranded on its way
// back to the queue, and a poll for it would wait its whole PollWait
// holding one of the broker's poll slots (traps 2, 11); the peek sees it at
// once when it is there. Not while a batch is open, when the Poller does
// not peek (see OverlapAfter).
func (l *loop) askSize(room int) int {
	p := l.p
	p.mu.Lock()
	open, strayed := p.held > 0, p.strayedOpen // strayed is 0 with none open
	p.mu.Unlock()
	if l.known <= 0 || l.known == 1 && l.counted && !open {
		l.known = 0
		return 0
	}
	return min(l.known-strayed, p.cfg.MaxItems, room)
}

// count sets known from the broker's count, waiting for it.
func (l *loop) count() {
	at := time.Now()
	q, ok, err := l.p.queueInfo(l.ctx)
	l.setCount(asideCount{q: q, ok: ok, err: err, at: at})
}

// setCount sets known from a count's answer (see ready).
func (l *loop) setCount(a asideCount) {
	if l.p.countHook != nil {
		l.p.countHook(&a.q)
	}
	l.known, l.counted, l.strayed = l.p.ready(a.q, a.ok, a.err), true, 0
	l.looked = time.Now()
	l.countedAt, l.found = a.at, l.known
	l.p.mu.Lock()
	held := l.p.held
	l.p.mu.Unlock()
	l.closing = a.err == nil && a.ok && a.q.Waiting-int64(held) > int64(l.known)
	if since, ok := l.p.oldestDeferred(); ok && l.known == 0 && a.err == nil && since.Before(a.at) {
		l.quiet = true
	}
}

// closeDeferred sends the settlements of the batches that wait (see
// deferClose). Like any completion beside an open batch, that stops polls
// beside the open ones (overlapped); then, SettleGrace later (the broker
// closes a batch a moment after its settlement, fact 27), it counts: when
// every sequence stored was received, or nothing waits beyond what the
// Poller holds, the closes stranded nothing and polls beside may go on.
func (l *loop) closeDeferred() {
	p := l.p
	l.quiet = false
	ds := p.takeDeferred(nil)
	if len(ds) == 0 {
		return
	}
	if p.beforeQuietClose != nil {
		p.beforeQuietClose()
	}
	p.closeBatches(ds)
	p.mu.Lock()
	open, gen := p.held > 0, p.overlapGen
	p.mu.Unlock()
	if !open || !sleep(l.ctx, p.cfg.SettleGrace) {
		return
	}
	at := time.Now()
	q, ok, err := p.queueInfo(l.ctx)
	l.setCount(asideCount{q: q, ok: ok, err: err, at: at})
	// Nothing waits beyond what the Poller holds (nothing to poll, nor
	// pending elsewhere), or every sequence stored was received.
	clean := err == nil && ok && (l.known == 0 && !l.closing || q.LastSequence > 0 && p.seen.missing(uint64(q.LastSequence)) == 0)
	if !clean {
		p.loudCloses.Add(1)
		return
	}
	p.quietCloses.Add(1)
	p.mu.Lock()
	if p.overlapGen == gen {
		p.overlapped = false
	}
	p.mu.Unlock()
}

// countAside counts in the background, after a poll of what a peek saw:
// more may wait behind it (a burst) or not (a lone task), and a count
// takes ~3 ms on KubeMQ (trap 14). Meanwhile the loop goes on as if none
// waited: it waits for its batch, then peeks, so that a lone task arriving
// during the count is not held up by it. The answer sets known when it
// comes (waitRoom, step), however late: ready caps it by the messages
// stored after the last one received, then, which later polls only lower.
// One count aside at a time, and after a count that found nothing, none
// for OverlapAfter: on a light queue every task comes from a peek, and a
// count per task (a QueuesInfo, which costs KubeMQ a few ms of CPU that
// the tasks share with it) buys nothing there. A burst behind a lone task
// is counted within OverlapAfter.
func (l *loop) countAside() {
	if l.counting || l.found == 0 && time.Since(l.countedAt) < l.p.cfg.OverlapAfter {
		return
	}
	l.counting = true
	l.asideWG.Add(1)
	go func() {
		defer l.asideWG.Done()
		at := time.Now()
		q, ok, err := l.p.queueInfo(l.ctx)
		l.aside <- asideCount{q: q, ok: ok, err: err, at: at}
	}()
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

// takeAside takes the answer of a count aside, unless a peek found
// something meanwhile.
func (l *loop) takeAside(a asideCount) {
	l.counting = false
	if l.known <= 0 {
		l.setCount(a)
	}
}

// pollOnce polls ask messages with the current client, delivers them,
// updates what is known to be waiting and recycles the client when due.
func (l *loop) pollOnce(ask int) {
	p := l.p
	_, open := p.holding()
	if p.beforePoll != nil {
		p.beforePoll(ask, open, l.counted)
	}
	// With none of its batches open, a poll is handed what the last one
	// stranded, all of it (fact 45): asking for less than was counted
	// (capped by MaxItems or room), it may hold some of it. A poll of
	// what a peek saw after a completion may hold the strays of that
	// batch (see strayed and Poller.strayedOpen).
	strayed := l.strayed
	l.strayed, l.polledDone = 0, p.completedAt.Load()
	msgs, err := p.poll(l.cur, ask, !open && l.counted && ask < l.known, strayed)
	if err != nil {
		l.replaceLostClient(err)
		l.fail(err)
		return
	}
	l.downSince = time.Time{}
	l.succeeded()
	if p.onPoll != nil {
		p.onPoll(ask, len(msgs), l.known)
	}
	l.follow(ask, len(msgs))
	if len(msgs) > 0 {
		l.looked = time.Now()
		p.deliver(l.ctx, msgs)
	}
	l.known -= len(msgs)
	switch {
	case len(msgs) < ask:
		// Fewer than asked: the poll waited, the estimate was off. Gaps
		// that were counted and did not come are no strays (see strays).
		l.known = 0
		p.seen.forget()
		if open {
			p.overlapShort()
		}
	case l.known > 0:
	case l.counted:
		l.count() // still busy? skip the peek
	default:
		l.countAside() // what a peek saw: a lone task, or a burst's first?
	}
	l.cur.polls++
	l.recycleBusyClient()
}

// follow decides, after a poll that asked for ask messages and got got,
// whether the Poller follows the queue (see FollowWithin): a lone task
// that a peek or a follow saw (not a count: a busy queue), delivered
// within FollowWithin of the last completion, while no other batch is open
// (a follow must not overlap one, trap 5). A poll that came back short
// (a follow on a queue gone quiet) ends it.
func (l *loop) follow(ask, got int) {
	p := l.p
	last := p.completedAt.Load()
	l.following = p.cfg.FollowWithin > 0 && ask == 1 && got == 1 && !l.counted &&
		last > 0 && time.Since(time.Unix(0, last)) <= p.cfg.FollowWithin
	if l.following { // the batch just polled is the only one open
		p.mu.Lock()
		l.following = p.held == got
		p.mu.Unlock()
	}
}

// replaceLostClient drops the current client after a long outage: a new
// client gets a new connection (gRPC's reconnect backoff keeps growing on
// the old one).
func (l *loop) replaceLostClient(err error) {
	if !errors.Is(err, ErrUnavailable) || l.downSince.IsZero() || time.Since(l.downSince) <= l.p.c.cfg.ReplaceAfter {
		return
	}
	l.p.warn.Info("mq poller replacing stream client", "down_for", time.Since(l.downSince).Round(time.Millisecond))
	l.p.retire(l.cur)
	l.cur, l.downSince = nil, time.Now()
}

// recycleBusyClient replaces the current client with the warm one after
// RecycleAfter polls or RecycleEvery, when the warm one is ready (trap 7).
func (l *loop) recycleBusyClient() {
	cfg := &l.p.cfg
	if l.cur.polls < cfg.RecycleAfter && (cfg.RecycleEvery <= 0 || time.Since(l.cur.since) < cfg.RecycleEvery) {
		return
	}
	select {
	case sc := <-l.standby:
		l.p.retire(l.cur)
		l.p.recycles.Add(1)
		l.cur = l.p.newPollClient(sc)
		l.prepareNext()
	default: // the next client is not warm yet; keep this one
	}
}

// succeeded notes a call that reached the broker.
func (l *loop) succeeded() {
	l.p.heard()
	l.p.setState(true, nil)
	l.retry.Reset()
}

// fail handles a failed peek or poll: the broker is reported down (an
// unavailable broker) and the loop waits its backoff.
func (l *loop) fail(err error) {
	if l.ctx.Err() != nil {
		return
	}
	l.known = 0
	if errors.Is(err, ErrUnavailable) {
		l.p.setState(false, err)
		if l.downSince.IsZero() {
			l.downSince = time.Now()
		}
	} else {
		l.p.warn.Warn("mq poller call failed", "err", err)
	}
	sleep(l.ctx, l.retry.NextBackOff())
}

// stop ends Run: no more clients are prepared, the probe ends, the current
// client retires, and the Poller drains.
func (l *loop) stop() {
	l.stopPrep()
	l.prepWG.Wait()
	l.asideWG.Wait()
	select {
	case sc := <-l.standby:
		sc.close()
	default:
	}
	if l.cur != nil {
		l.p.retire(l.cur)
	}
	l.p.drain()
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

// ready estimates from a QueuesInfo answer (q, ok, err) how many messages
// a poll would get at once; 0 when unknown. The real broker's Waiting also
// counts the messages delivered and not settled, ours included (measured:
// Waiting stayed 10 while a poll held 4 of 10), so the Poller subtracts
// what its incomplete batches hold. Waiting drops only once the broker has
// applied our settlements, which it does not confirm, so the estimate is
// also capped by the sequences stored and never received (seen), which
// does not depend on that timing. With no batch of ours open those include
// the strays below the highest sequence received: what the last batch's
// settlement left in its subscription, which KubeMQ forces on the next
// poll, all of them, whatever it asked for (KUBEMQ.md fact 45), so that
// poll must ask for all of them. With a batch open they may still sit in
// it, where no poll gets them: then only the sequences after the highest
// received count. Both bounds can only undercount messages given back by a
// stream loss, which the idle peek then finds: an undercount costs a
// smaller poll, an overcount the whole WaitTimeout (trap 2).
func (p *Poller) ready(q QueueInfo, ok bool, err error) int {
	if err != nil || !ok {
		return 0
	}
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	n := q.Waiting - int64(held)
	if last := q.LastSequence; p.seen.max > 0 && last > 0 {
		if held > 0 {
			n = min(n, last-int64(p.seen.max))
		} else {
			n = min(n, p.seen.missing(uint64(last)))
		}
	}
	return int(max(n, 0))
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
