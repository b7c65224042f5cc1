package mq

// Run's loop: it takes a view of the Poller (view), asks nextStep
// (pollstep.go) what to do and carries it out: waits, counts, peeks,
// polls and delivers, and sends kept settlements (poller_close.go).

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

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
	looked    time.Time // the last poll that delivered, or count (see pollView.look)
	counted   bool      // known is a count (ready), not what the peek saw
	downSince time.Time // first failure of the current client while the broker is away

	// A count taken aside (countAside) comes back on aside; counting is
	// set while one is under way. countedAt and found are when the last
	// count taken was asked for (what completed after it, it may not
	// reflect: see pollView.stale and peeked) and its answer.
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
	// poll since (see pollView.peeked); the poll of it may be handed up to strayed
	// of that batch's strays beside it, and hold them unseen. polledDone
	// is the completion (Poller.completedAt) the last poll knew of.
	strayed    int
	polledDone int64
	// quiet: a count asked after the oldest batch in deferred found
	// nothing waiting: time to send their settlements (closeDeferred).
	quiet bool
	// closing: the last count found more pending than the Poller holds
	// and can poll: Waiting still counts a completed batch whose
	// settlement the broker has not applied yet, and strays (fact 39).
	// See pollView.recount.
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

// step is one turn of the loop: send kept settlements when due, wait while
// it may not poll, look when nothing is known to be waiting, then poll
// what is (see nextStep).
func (l *loop) step() {
	select {
	case a := <-l.aside:
		l.takeAside(a)
	default:
	}
	if nextStep(l.view(atTurn)).act == actSendKept {
		l.closeDeferred()
	}
	d := nextStep(l.view(atGate))
	switch d.act {
	case actSendKept:
		// A refused poll sends kept settlements now rather than with the
		// last running batch (KUBEMQ.md fact 47).
		l.closeDeferred()
		return
	case actWait:
		l.waitRoom(d.wait)
		return
	case actCount:
		l.count()
		d = nextStep(l.view(atLooked))
	case actWatch:
		l.retireIdleClient()
		if !l.watch() {
			return
		}
		d = nextStep(l.view(atLooked))
	}
	if d.act != actGoOn {
		return
	}
	l.retireLeftOpen()
	if !l.useClient() {
		return
	}
	switch d = nextStep(l.view(atAsk)); {
	case d.act == actPoll:
		l.pollOnce(d)
	case d.dropKnown:
		l.known = 0
	}
}

// view copies what nextStep reads at phase at: the loop's state, the
// Poller's (under its lock) and the time.
func (l *loop) view(at pollPhase) pollView {
	p := l.p
	v := pollView{
		at: at, cfg: &p.cfg,
		known: l.known, found: l.found,
		counted: l.counted, counting: l.counting, following: l.following,
		quiet: l.quiet, closing: l.closing,
		looked: l.looked, countedAt: l.countedAt, polledDone: l.polledDone,
		gaps: p.seen.gaps(), seenMax: p.seen.max,
	}
	p.mu.Lock()
	v.inflight, v.held, v.lastDone = p.inflight, p.held, p.lastDone
	v.holdingOpen, v.strayedOpen = p.holdingOpen, p.strayedOpen
	v.overlapped, v.overlappedAt, v.overlapGen = p.overlapped, p.overlappedAt, p.overlapGen
	for _, t := range p.batches {
		if t.deferredAt.IsZero() {
			v.runningSince = t.polledAt
			break
		}
	}
	if len(p.deferred) > 0 {
		v.kept, v.keptSince = true, p.deferred[0].deferredAt
	}
	v.completedAt = p.completedAt.Load()
	v.now = time.Now()
	p.mu.Unlock()
	return v
}

// withCount adds a count's answer to v (atCount, atKeptCount).
func (l *loop) withCount(v pollView, a asideCount) pollView {
	v.answer = a
	if last := a.q.LastSequence; last > 0 {
		v.missing = l.p.seen.missing(uint64(last))
	}
	return v
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

// watch looks at the idle queue (see pollView.watch) and reports whether
// it found messages: a count of what a completed batch may have left, a
// follow (the next task is reported as seen, to be polled at once), or a
// legacy peek. What the peek saw is polled at once and the rest counted
// after delivering it: a lone task must not wait for a count.
func (l *loop) watch() bool {
	done := l.p.completedAt.Load()
	short := done > l.watched // a batch completed since the last watch
	l.watched = done
	v := l.view(atWatch)
	v.short = short
	d := nextStep(v)
	if d.act == actCount {
		l.count()
		for recounts := 0; ; recounts++ {
			v = l.view(atStrays)
			v.short, v.recounts = short, recounts
			if d = nextStep(v); d.act != actCount {
				break
			}
			if !sleep(l.ctx, d.wait) {
				recounts = closeRecounts - 1 // no more counts
				continue
			}
			l.count()
		}
	}
	if d.forget {
		l.p.seen.forget()
	}
	switch d.act {
	case actGoOn:
		return true
	case actFollow:
		l.p.follows.Add(1)
		l.known, l.counted = 1, false
		return true
	}
	ctx := l.ctx
	if d.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(l.ctx, d.wait)
		defer cancel()
	}
	n, err := l.p.peek(ctx)
	if d.wait > 0 && errors.Is(err, context.DeadlineExceeded) && l.ctx.Err() == nil {
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
	d = nextStep(l.view(atPeeked))
	l.strayed = d.strayed
	return d.act == actGoOn
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

// count sets known from the broker's count, waiting for it.
func (l *loop) count() {
	at := time.Now()
	q, ok, err := l.p.queueInfo(l.ctx)
	l.setCount(asideCount{q: q, ok: ok, err: err, at: at})
}

// setCount sets known from a count's answer (see pollView.count).
func (l *loop) setCount(a asideCount) {
	if l.p.countHook != nil {
		l.p.countHook(&a.q)
	}
	d := nextStep(l.withCount(l.view(atCount), a))
	l.known, l.counted, l.strayed = d.known, true, 0
	l.looked = time.Now()
	l.countedAt, l.found = a.at, l.known
	l.closing = d.closing
	if d.quiet {
		l.quiet = true
	}
}

// countAside counts in the background, after a poll of what a peek saw
// (see pollView.delivered). Meanwhile the loop goes on as if none waited:
// it waits for its batch, then peeks, so that a lone task arriving during
// the count is not held up by it. The answer sets known when it comes
// (waitRoom, step), however late: ready caps it by the messages stored
// after the last one received, then, which later polls only lower.
func (l *loop) countAside() {
	l.counting = true
	l.asideWG.Add(1)
	go func() {
		defer l.asideWG.Done()
		at := time.Now()
		q, ok, err := l.p.queueInfo(l.ctx)
		l.aside <- asideCount{q: q, ok: ok, err: err, at: at}
	}()
}

// takeAside takes the answer of a count aside, unless a peek found
// something meanwhile.
func (l *loop) takeAside(a asideCount) {
	l.counting = false
	if nextStep(l.view(atAside)).act == actGoOn {
		l.setCount(a)
	}
}

// pollOnce makes the poll d decided, delivers what it got, updates what is
// known to be waiting and recycles the client when due.
func (l *loop) pollOnce(d pollStep) {
	p := l.p
	if p.beforePoll != nil {
		p.beforePoll(d.n, d.beside, l.counted)
	}
	strayed := l.strayed
	l.strayed, l.polledDone = 0, p.completedAt.Load()
	msgs, err := p.poll(l.cur, d.n, d.holding, strayed)
	if err != nil {
		l.replaceLostClient(err)
		l.fail(err)
		return
	}
	l.downSince = time.Time{}
	l.succeeded()
	if p.onPoll != nil {
		p.onPoll(d.n, len(msgs), l.known)
	}
	v := l.view(atPolled)
	v.asked, v.got = d.n, len(msgs)
	l.following = nextStep(v).follow
	if len(msgs) > 0 {
		l.looked = time.Now()
		p.deliver(l.ctx, msgs)
	}
	l.known -= len(msgs)
	v = l.view(atDelivered)
	v.asked, v.got, v.beside = d.n, len(msgs), d.beside
	next := nextStep(v)
	if next.dropKnown {
		l.known = 0
	}
	if next.forget {
		p.seen.forget()
	}
	if next.overlapShort {
		p.overlapShort()
	}
	switch next.act {
	case actCount:
		l.count() // still busy? skip the peek
	case actCountAside:
		l.countAside() // what a peek saw: a lone task, or a burst's first?
	}
	l.cur.polls++
	l.recycleBusyClient()
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
