package consumer

import (
	"time"
)

// Pipelining: one replica alone on a sharded queue. A busy channel holds one
// open batch at a time (KUBEMQ.md fact 40), so poll, run, store and ack are
// one serial cycle and the device idles for the broker's part. Moving shard
// 0's polls into the replica's own shards (as a fleet does, Spreading in
// doc.go) lets it poll the next batch while one runs, at a hop per task: a
// win when runs are long beside the broker's part, a loss when the broker is
// the bottleneck or serves the moved copies slowly (traps 2, 13).
//
// So the replica measures, over windows of pipeWindow. It tries when the
// busy share of the queue's models (batch.Batcher.Busy) is at least pipeTry,
// in a window after the first since the last switch; it judges by rows
// served per second (batch.Batcher.Rows), since on a fixed-cost device the
// busy share stays near 1 either way. A trial runs a window (after
// pipeSettle) and pipelining must win by pipeMargin, else direct is kept and
// the next trial waits pipeBackoff, doubled per loss up to pipeBackoffMax. A
// kept pipeline is rechecked every pipeRecheck and dropped when the share
// falls under pipeIdle. One channel (--queue-shards 1) cannot pipeline; it
// is opt-in (Config.Pipeline, serve --pipeline).
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

// busyMeter is a Batcher that tells how long its runs took, how many runs
// it can have at once and how many rows its runs served
// (batch.Batcher.Busy, Rows).
type busyMeter interface {
	Busy() (busy time.Duration, slots int)
	Rows() int64
}

// pipeMeter samples the busy share and the rows per second of a queue's
// batchers.
type pipeMeter struct {
	at   time.Time
	last map[busyMeter]meterMark
}

// meterMark is a batcher's counters at the start of a window.
type meterMark struct {
	busy time.Duration
	rows int64
}

// markOf reads m's counters, and its run slots.
func markOf(m busyMeter) (meterMark, int) {
	busy, slots := m.Busy()
	return meterMark{busy: busy, rows: m.Rows()}, slots
}

// restart starts a new window at now.
func (pm *pipeMeter) restart(now time.Time, ms []busyMeter) {
	pm.at, pm.last = now, make(map[busyMeter]meterMark, len(ms))
	for _, m := range ms {
		pm.last[m], _ = markOf(m)
	}
}

// pipeSample is what a window measured: the largest busy share among the
// batchers, and the rows per second they served together.
type pipeSample struct {
	share, rate float64
}

// sample measures the window since the last sample (or restart), and
// reports false while the window is shorter than window (it then goes on).
// The first sample only starts the window. A batcher first seen in a
// sample counts from the next window on.
func (pm *pipeMeter) sample(now time.Time, ms []busyMeter, window time.Duration) (pipeSample, bool) {
	if pm.at.IsZero() {
		pm.restart(now, ms)
		return pipeSample{}, false
	}
	span := now.Sub(pm.at)
	if span < window {
		return pipeSample{}, false
	}
	seen := make(map[busyMeter]meterMark, len(ms))
	var ps pipeSample
	for _, m := range ms {
		mk, slots := markOf(m)
		seen[m] = mk
		if prev, known := pm.last[m]; known && slots > 0 {
			ps.share = max(ps.share, float64(mk.busy-prev.busy)/float64(span)/float64(slots))
			ps.rate += float64(mk.rows-prev.rows) / span.Seconds()
		}
	}
	pm.at, pm.last = now, seen
	return ps, true
}

// pipeCtl decides whether a lone replica pipelines (see Pipelining).
type pipeCtl struct {
	on bool // moving shard 0's polls into the replica's own shards
	// trial: the present way is on trial against the other, whose rows
	// per second over the window before the switch were before.
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

// step takes what was measured over the window that ends at now and
// reports whether the way changed (on says which it is now); a change is
// followed by settle, in which nothing is measured.
func (c *pipeCtl) step(now time.Time, ps pipeSample, settle time.Duration) (switched bool) {
	share := ps.share
	if c.backoff == 0 {
		c.backoff = pipeBackoff
	}
	switch {
	case c.trial:
		c.trial = false
		piped, direct := ps.rate, c.before
		if !c.on {
			piped, direct = c.before, ps.rate
		}
		win := piped > direct*(1+pipeMargin)
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
		c.trial, c.before, c.on = true, ps.rate, !c.on
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
	ps, ok := sp.meter.sample(now, ms, s.pipeWindow)
	judged, before := ok && sp.pipe.trial, sp.pipe.before
	switched := ok && sp.pipe.step(now, ps, s.pipeWindow*pipeSettle/pipeWindow)
	on, trial := sp.pipe.on, sp.pipe.trial
	sp.mu.Unlock()
	if judged {
		s.log.Debug("queue pipelining trial", "queue", q.name, "busy_share", ps.share, "rows_per_s", ps.rate, "before", before, "pipelining", on)
	}
	if !switched {
		return
	}
	s.log.Debug("queue pipelining", "queue", q.name, "on", on, "trial", trial, "busy_share", ps.share, "rows_per_s", ps.rate)
	v := 0.0
	if on {
		v = 1
	}
	s.met.Pipelined.WithLabelValues(q.name).Set(v)
}
