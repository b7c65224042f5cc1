package results

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Replay log messages, rate-limited. The first two are about the broker
// being away and are reset once a pass finds it answering.
const (
	msgReplayPaused     = "result replay paused: broker not answering"
	msgReplayFailed     = "result replay failed"
	msgReplayTaskFailed = "result replay failed for one task; it is tried again later, the others go on"
	msgUndeliverable    = "result refused by the broker for good; kept apart as undeliverable, for lookups only"
)

// replayOutcome is what the replay of one task's records met.
type replayOutcome uint8

const (
	replayDone       replayOutcome = iota // every record settled
	replayTaskFailed                      // a failure of the task's own: it waits its own backoff
	replayBrokerAway                      // the broker is away (or Run is ending): the pass stops
)

// Run replays spooled records to the broker until ctx ends, then returns
// nil. It sleeps while the spool is empty, wakes when Put spools a record,
// and after a pass that found the broker away (Config.BrokerAway) waits
// Config.ReplayBackoff, doubling up to ReplayBackoffMax, before trying
// again. A task whose record fails for another reason does not hold the
// others back: the pass moves on, and that task alone waits its own
// backoff (same bounds). A record the broker refuses for good becomes
// undeliverable: kept for lookups, never sent again. Records written by a
// previous process (loaded by New) are replayed first. Each record is sent
// as it was spooled, never rebuilt; a task's records go in order, under the
// same per-task lock as Put; up to ReplayConcurrency tasks go at once. A
// replayed record leaves the spool (and the disk); an oversize one stays
// there, held for lookups. With a data dir, Run also writes to disk the
// records the disk refused earlier, once it takes them. Call Run once.
func (s *Store) Run(ctx context.Context) error {
	away := &backoff.ExponentialBackOff{
		InitialInterval: s.cfg.ReplayBackoff, MaxInterval: s.cfg.ReplayBackoffMax,
		Multiplier: 2, RandomizationFactor: 0, // one replay loop per process: nothing to spread
	}
	for ctx.Err() == nil {
		st := s.retryDisk()
		if st.pending == 0 {
			wait := time.Duration(-1)
			if st.memOnly > 0 && s.spool.disk != nil {
				wait = s.cfg.ReplayBackoffMax // the disk may take them later
			}
			s.waitWork(ctx, wait)
			continue
		}
		if s.replayPass(ctx) {
			if ctx.Err() != nil {
				return nil
			}
			d := away.NextBackOff()
			s.warn.Info(msgReplayPaused, "retry_in", d, "pending", s.spool.stats().pending)
			s.awayWait(ctx, d)
			continue
		}
		away.Reset()
		s.warn.Reset(msgReplayPaused) // the next outage is logged from its start
		s.warn.Reset(msgReplayFailed)
		now := s.cfg.Now()
		if groups, next := s.spool.snapshot(now); len(groups) == 0 && !next.IsZero() {
			s.waitWork(ctx, next.Sub(now)) // only tasks waiting their own backoff are left
		}
	}
	return nil
}

// retryDisk writes records the disk refused earlier once it takes them,
// and returns the spool's counts.
func (s *Store) retryDisk() spoolStats {
	st := s.spool.stats()
	if st.memOnly > 0 && s.spool.disk != nil {
		s.spool.flush(false, true)
		st = s.spool.stats()
	}
	return st
}

// waitWork waits until Put spools a record, d passes (d < 0: no limit) or
// ctx ends.
func (s *Store) waitWork(ctx context.Context, d time.Duration) {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-s.kick:
	case <-timeout:
	}
}

// replayPass tries every pending record of the tasks that are due once,
// up to ReplayConcurrency tasks at once, and reports whether it stopped
// because the broker is away (or ctx ended): then it starts no more tasks.
func (s *Store) replayPass(ctx context.Context) (away bool) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.ReplayConcurrency)
	groups, _ := s.spool.snapshot(s.cfg.Now())
	for _, group := range groups {
		if stop.Load() {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || stop.Load() { // a task that ended meanwhile found the broker away
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if s.replayTask(ctx, group) == replayBrokerAway {
				stop.Store(true)
			}
		}()
	}
	wg.Wait()
	return stop.Load() || ctx.Err() != nil
}

// replayTask writes one task's pending records in order, stopping at the
// first temporary failure.
func (s *Store) replayTask(ctx context.Context, items []*item) replayOutcome {
	unlock, err := s.locks.lock(ctx, items[0].e.TaskID)
	if err != nil {
		return replayBrokerAway // ctx ended
	}
	defer unlock()
	for _, it := range items {
		e, st, removed, err := s.spool.entry(it)
		if st != statePending {
			continue
		}
		if err != nil {
			if s.spool.unreadable(it, err) {
				continue
			}
			s.taskFailed(it)
			return replayTaskFailed
		}
		rem := removed
		err = s.writeOnce(ctx, e, &rem)
		if rem && !removed {
			s.spool.markRemoved(it)
		}
		switch {
		case err == nil:
			oversize := e.oversize(s.cfg.MaxResultBytes)
			if !oversize {
				s.cache.put(e.TaskID, e.Body, e.Terminal)
				s.spool.settle(it, stateGone)
			} else {
				s.spool.settle(it, stateHeld)
			}
			s.replayed.Add(1)
		case permanent(err):
			s.spool.settle(it, stateUndeliverable)
			s.parked.Add(1)
			s.warn.Log(ctx, slog.LevelError, msgUndeliverable, "entry", e, "err", err)
		case ctx.Err() != nil:
			return replayBrokerAway
		case s.brokerAway(err):
			s.warn.Warn(msgReplayFailed, "entry", e, "err", err)
			return replayBrokerAway
		default:
			s.warn.Warn(msgReplayTaskFailed, "entry", e, "err", err)
			s.taskFailed(it)
			return replayTaskFailed
		}
	}
	return replayDone
}

// taskFailed puts off the next replay of it's task after a failure of its
// own.
func (s *Store) taskFailed(it *item) {
	s.spool.deferRetry(it, s.cfg.Now(), s.cfg.ReplayBackoff, s.cfg.ReplayBackoffMax)
}

// brokerAway reports whether a temporary write error means the broker is
// away (Config.BrokerAway; every temporary error without one).
func (s *Store) brokerAway(err error) bool {
	return s.cfg.BrokerAway == nil || s.cfg.BrokerAway(err)
}
