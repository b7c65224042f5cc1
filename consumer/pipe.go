package consumer

import (
	"time"
)

// Pipelining: one replica alone on a sharded queue. It runs shard 0, the
// channel plain producers fill, itself and pays no extra hop (Spreading).
// But a busy channel holds one open batch at a time (KUBEMQ.md fact 40), so
// there poll, run, store and ack are one serial cycle and the device idles
// for the broker's part of it: on an accelerator, where a batch's run is
// long, that is throughput thrown away. Moving shard 0's polls into its own
// shards, as a fleet's owner of shard 0 does, lets the replica poll the
// next batch one channel over while one runs, at the price of a hop per
// task: worth it when the runs are long beside the broker's part of a
// cycle, a loss when the broker is the bottleneck (a small model on a CPU)
// or when the broker serves the moved copies slowly (a real KubeMQ under
// load can strand part of a poll for a second, traps 2, 13).
//
// So the replica measures instead of guessing. Its measure is the busy
// share of the queue's models: the time their runs took over the time
// passed and their run slots (the largest among the models, over windows of
// pipeWindow; batch.Batcher.Busy). When the share is at least pipeTry, in
// a window after the first since the last switch (a load still rising is no
// measure), it tries the other way for a window (after pipeSettle, which the switch
// itself disturbs) and keeps whichever kept the devices busier: pipelining
// must win by pipeMargin, else running shard 0 directly is kept and
// pipelining is tried again after pipeBackoff, doubled after each loss up to
// pipeBackoffMax. A kept pipeline is checked against running directly every
// pipeRecheck, and given up at once when the share falls under pipeIdle (a
// light queue, where the hop only adds latency). A queue with one channel
// (--queue-shards 1) has no other channel to pipeline into. It is opt-in
// (Config.Pipeline, serve --pipeline): see there why.
const (
	pipeWindow     = 2 * time.Second
	pipeSettle     = 250 * time.Millisecond
	pipeTry        = 0.25
	pipeIdle       = 0.05
	pipeMargin     = 0.03
	pipeBackoff    = 15 * time.Second
	pipeBackoffMax = 5 * time.Minute
	pipeRecheck    = 30 * time.Second
)

// busyMeter is a Batcher that tells how long its runs took and how many
// runs it can have at once (batch.Batcher.Busy).
type busyMeter interface {
	Busy() (busy time.Duration, slots int)
}

// pipeMeter samples the busy share of a queue's batchers.
type pipeMeter struct {
	at   time.Time
	last map[busyMeter]time.Duration
}

// restart starts a new window at now.
func (pm *pipeMeter) restart(now time.Time, ms []busyMeter) {
	pm.at, pm.last = now, make(map[busyMeter]time.Duration, len(ms))
	for _, m := range ms {
		pm.last[m], _ = m.Busy()
	}
}

// sample returns the largest busy share among ms over the window since
// the last sample (or restart), and false while the window is shorter than
// window (it then goes on). The first sample only starts the
// window. A batcher first seen in a sample counts from the next window on.
func (pm *pipeMeter) sample(now time.Time, ms []busyMeter, window time.Duration) (float64, bool) {
	if pm.at.IsZero() {
		pm.restart(now, ms)
		return 0, false
	}
	span := now.Sub(pm.at)
	if span < window {
		return 0, false
	}
	seen := make(map[busyMeter]time.Duration, len(ms))
	share := 0.0
	for _, m := range ms {
		busy, slots := m.Busy()
		seen[m] = busy
		if prev, known := pm.last[m]; known && slots > 0 {
			share = max(share, float64(busy-prev)/float64(span)/float64(slots))
		}
	}
	pm.at, pm.last = now, seen
	return share, true
}

// pipeCtl decides whether a lone replica pipelines (see Pipelining).
type pipeCtl struct {
	on bool // moving shard 0's polls into the replica's own shards
	// trial: the present way is on trial against the other, whose share
	// over the window before the switch was before.
	trial   bool
	before  float64
	next    time.Time     // no trial before then
	backoff time.Duration // next wait after a lost pipelining trial
	settle  time.Time     // a switch's disturbance: no window before then
	// windows counts the windows measured since the last switch (or the
	// start): a trial needs one before its own, so that the share it is
	// compared with is not one of a load still rising.
	windows int
}

// step takes the busy share measured over the window that ends at now and
// reports whether the way changed (on says which it is now); a change is
// followed by settle, in which nothing is measured.
func (c *pipeCtl) step(now time.Time, share float64, settle time.Duration) (switched bool) {
	if c.backoff == 0 {
		c.backoff = pipeBackoff
	}
	switch {
	case c.trial:
		c.trial = false
		piped, direct := share, c.before
		if !c.on {
			piped, direct = c.before, share
		}
		win := piped > direct+pipeMargin
		if win {
			c.backoff, c.next = pipeBackoff, now.Add(pipeRecheck)
		} else {
			c.next = now.Add(c.backoff)
			if c.on { // a lost pipelining trial: wait longer next time
				c.backoff = min(2*c.backoff, pipeBackoffMax)
			}
		}
		if win == c.on {
			c.windows++
			return false
		}
		c.on = win
	case c.on && share < pipeIdle:
		c.on, c.next = false, now
	case now.Before(c.next) || !c.on && share < pipeTry || c.windows == 0:
		c.windows++
		return false
	default:
		c.trial, c.before, c.on = true, share, !c.on
	}
	c.settle, c.windows = now.Add(settle), 0
	return true
}

// pipe updates q's pipelining from its models' busy share (see
// Pipelining); shard 0's Deliver calls it before each poll is placed.
func (s *Server) pipe(q *queue) {
	if !s.cfg.Pipeline {
		return
	}
	var ms []busyMeter
	for _, m := range q.table.Load().Models() {
		if b, ok := m.Batcher.(busyMeter); ok {
			ms = append(ms, b)
		}
	}
	now := time.Now()
	sp := q.spread
	sp.mu.Lock()
	if !sp.lone {
		was := sp.pipe.on
		sp.pipe.on, sp.pipe.trial = false, false
		sp.meter.restart(now, ms)
		sp.mu.Unlock()
		if was {
			s.met.Pipelined.WithLabelValues(q.name).Set(0)
		}
		return
	}
	if now.Before(sp.pipe.settle) {
		sp.meter.restart(now, ms)
		sp.mu.Unlock()
		return
	}
	share, ok := sp.meter.sample(now, ms, s.pipeWindow)
	judged, before := ok && sp.pipe.trial, sp.pipe.before
	switched := ok && sp.pipe.step(now, share, s.pipeWindow*pipeSettle/pipeWindow)
	on, trial := sp.pipe.on, sp.pipe.trial
	sp.mu.Unlock()
	if judged {
		s.log.Debug("queue pipelining trial", "queue", q.name, "busy_share", share, "before", before, "pipelining", on)
	}
	if !switched {
		return
	}
	s.log.Debug("queue pipelining", "queue", q.name, "on", on, "trial", trial, "busy_share", share)
	v := 0.0
	if on {
		v = 1
	}
	s.met.Pipelined.WithLabelValues(q.name).Set(v)
}
