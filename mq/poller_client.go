package mq

// The Poller's stream clients: each one's batches in flight, its retirement
// once what it delivered is settled, its warm-up ahead of need, and the
// polls and deliveries made with it.

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	qs "github.com/kubemq-io/kubemq-go/queues_stream"
)

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
	// leftOpen is set when a message it delivered was given back
	// (GiveBack): that batch stays open on the broker until the client
	// closes.
	leftOpen atomic.Bool
	closed   chan struct{} // closed once the SDK client is closed
}

func (p *Poller) newPollClient(sc *streamClient) *pollClient {
	return &pollClient{poller: p, sc: sc, txns: map[*txn]struct{}{}, idle: make(chan struct{}), closed: make(chan struct{}), since: time.Now()}
}

// release counts one message of t settled (or given up); last: it was the
// batch's last one, whose settlements have been sent.
func (pc *pollClient) release(t *txn, last bool) {
	p := pc.poller
	p.mu.Lock()
	pc.out--
	p.inflight--
	if last {
		pc.completeLocked(t)
	}
	if pc.retired && pc.out == 0 {
		close(pc.idle)
	}
	p.mu.Unlock()
	p.signalRoom()
}

// closeBatches sends the settlements of ts, batches whose every message
// was released while their settlements waited (see deferClose), and
// completes them.
func (p *Poller) closeBatches(ts []*txn) {
	if len(ts) == 0 {
		return
	}
	for _, t := range ts {
		_ = t.flush() // a failure goes to OnSettleError
	}
	p.mu.Lock()
	for _, t := range ts {
		t.pc.completeLocked(t)
	}
	p.mu.Unlock()
	p.signalRoom()
}

// completeLocked notes that batch t is complete: its settlements are sent
// and the broker closes it. Poller.mu is held.
func (pc *pollClient) completeLocked(t *txn) {
	p := pc.poller
	delete(pc.txns, t)
	if i := slices.Index(p.batches, t); i >= 0 {
		p.batches = slices.Delete(p.batches, i, i+1)
	}
	p.held -= len(t.resp.Messages)
	p.lastDone = len(t.resp.Messages)
	if t.holding {
		p.holdingOpen--
	}
	p.strayedOpen -= t.strayed
	// Completing while another batch is open may strand messages in it
	// (see pollView.mayPoll); once none is open they are back.
	now := time.Now()
	if p.overlapped = p.held > 0; p.overlapped {
		p.overlappedAt = now
		p.overlapGen++
	}
	p.completedAt.Store(now.UnixNano())
}

// signalRoom wakes Run's loop if it waits for a settlement.
func (p *Poller) signalRoom() {
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
			// Settlements that wait for a quiet moment go now: the close
			// would give their messages back.
			p.closeBatches(p.takeDeferred(pc))
			// The last settlement is queued in the SDK; give its stream a
			// moment to send it before the close (which waits 100 ms more).
			time.Sleep(50 * time.Millisecond)
		case <-p.hardStop:
			p.closeBatches(p.takeDeferred(pc))
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
		close(pc.closed)
	}()
}

// prepare makes a stream client and warms its downstream (1 s, trap 3)
// ahead of need, replacing it while it cannot connect, and hands it over.
func (p *Poller) prepare(ctx context.Context, out chan<- *streamClient) {
	retry := p.c.newBackoff()
	for ctx.Err() == nil {
		sc, err := p.c.newStreamClient(p.c.life, "poll")
		if err != nil {
			p.warn.Warn("mq poller new stream client failed", "err", err)
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

// poll makes one stream poll of n messages with the client's lifetime
// context (trap 4) and AutoAck off. holding: the poll may be handed strays
// it did not ask for and hold them (KUBEMQ.md fact 45); a poll that comes
// back short holds too. No poll is made beside a holding batch until it
// completes (see pollView.mayPoll). strayed: it may hold up to that many unseen
// beside it, of which the polls beside it do not ask for (strayedOpen).
func (p *Poller) poll(pc *pollClient, n int, holding bool, strayed int) ([]*Message, error) {
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
	// A poll that came back with less than it asked for keeps the rest of
	// its room on the broker while its batch runs: what arrives meanwhile
	// is pushed there, where no poll sees it (KUBEMQ.md trap 13).
	t.holding = holding || len(resp.Messages) < n
	t.strayed = strayed
	t.resp = resp
	t.mu.Lock()
	t.size, t.open = len(resp.Messages), len(resp.Messages)
	t.mu.Unlock()
	msgs := make([]*Message, 0, len(resp.Messages))
	for _, qm := range resp.Messages {
		m := fromPB(qm.QueueMessage)
		m.tx = t
		p.seen.add(m.Sequence)
		msgs = append(msgs, m)
	}
	p.mu.Lock()
	pc.out += len(msgs)
	pc.txns[t] = struct{}{}
	p.inflight += len(msgs)
	t.polledAt = time.Now()
	p.batches = append(p.batches, t)
	p.held += len(msgs)
	if t.holding {
		p.holdingOpen++
	}
	p.strayedOpen += t.strayed
	p.mu.Unlock()
	p.msgs.Add(int64(len(msgs)))
	return msgs, nil
}

// deliver hands msgs to Deliver, whose they are from now on (see
// PollerConfig.Deliver), and logs its error.
func (p *Poller) deliver(ctx context.Context, msgs []*Message) {
	p.parked.Store(true)
	err := p.cfg.Deliver(ctx, msgs)
	p.parked.Store(false)
	if err != nil && ctx.Err() == nil {
		p.warn.Warn("mq deliver refused messages", "n", len(msgs), "err", err)
	}
}
