package mq

// Kept settlements: the settlements of a batch whose last message is
// settled while another batch runs wait for a quiet moment (see
// pollView.keep), and Run's loop sends them (closeDeferred).

import "time"

// deferClose decides, when the last message of batch t is settled, whether
// its settlements wait (later) or go now, with the batches that waited for
// a quiet moment (with; see pollView.keep). When no other batch runs, they
// all go now, together, as one batch would.
func (p *Poller) deferClose(t *txn) (later bool, with []*txn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := pollView{at: atSettled, held: p.held, size: len(t.resp.Messages), retired: t.pc.retired, leftOpen: t.pc.leftOpen.Load()}
	for _, d := range p.deferred {
		v.keptHeld += len(d.resp.Messages)
	}
	if nextStep(v).act == actKeep {
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
// open batch, it stops polls beside the open ones (see pollView.mayPoll).
func (p *Poller) overlapShort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held > 0 {
		p.overlapped, p.overlappedAt = true, time.Now()
		p.overlapGen++
	}
}

// closeDeferred sends the settlements of the batches that wait (see
// deferClose). Like any completion beside an open batch, that stops polls
// beside the open ones (overlapped); then it checks with a count that the
// closes stranded nothing (see pollView.keptClean), and if so polls beside
// may go on.
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
	v := l.view(atKeptSent)
	d := nextStep(v)
	if d.act != actCount || !sleep(l.ctx, d.wait) {
		return
	}
	at := time.Now()
	q, ok, err := p.queueInfo(l.ctx)
	a := asideCount{q: q, ok: ok, err: err, at: at}
	l.setCount(a)
	if !nextStep(l.withCount(l.view(atKeptCount), a)).quietClose {
		p.loudCloses.Add(1)
		return
	}
	p.quietCloses.Add(1)
	p.mu.Lock()
	if p.overlapGen == v.overlapGen {
		p.overlapped = false
	}
	p.mu.Unlock()
}
