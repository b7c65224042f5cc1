package results

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/cenkalti/backoff/v5"
)

// Replay log messages, rate-limited and reset once a pass succeeds.
const (
	msgReplayPaused = "result replay paused: broker not answering"
	msgReplayFailed = "result replay failed"
)

// Run replays spooled records to the broker until ctx ends, then returns
// nil. It sleeps while the spool is empty, wakes when Put spools a record,
// and after a pass that met a broker error waits Config.ReplayBackoff,
// doubling up to ReplayBackoffMax, before trying again. Records written by a
// previous process (loaded by New) are replayed first. Each record is sent
// as it was spooled, never rebuilt; a task's records go in order, under the
// same per-task lock as Put; up to ReplayConcurrency tasks go at once. A
// replayed record leaves the spool (and the disk); an oversize one stays
// there, held for lookups. Call Run once.
func (s *Store) Run(ctx context.Context) error {
	wait := &backoff.ExponentialBackOff{
		InitialInterval: s.cfg.ReplayBackoff, MaxInterval: s.cfg.ReplayBackoffMax,
		Multiplier: 2, RandomizationFactor: 0, // one replay loop per process: nothing to spread
	}
	for {
		if s.spool.stats().pending == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-s.kick:
				continue
			}
		}
		if s.replayPass(ctx) {
			wait.Reset()
			s.warn.Reset(msgReplayPaused) // the next outage is logged from its start
			s.warn.Reset(msgReplayFailed)
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		d := wait.NextBackOff()
		s.warn.Info(msgReplayPaused, "retry_in", d, "pending", s.spool.stats().pending)
		if sleep(ctx, d) != nil {
			return nil
		}
	}
}

// replayPass tries every pending record once and reports whether none met a
// temporary error. It stops starting tasks after ReplayConcurrency tasks in a
// row failed (the broker is likely away), but one record that keeps failing
// while others go through does not hold the rest back.
func (s *Store) replayPass(ctx context.Context) bool {
	var failed atomic.Bool
	var inARow atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.ReplayConcurrency)
	limit := int64(s.cfg.ReplayConcurrency)
	for _, group := range s.spool.snapshot() {
		if inARow.Load() >= limit {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if s.replayTask(ctx, group) {
				inARow.Store(0)
			} else {
				failed.Store(true)
				inARow.Add(1)
			}
		}()
	}
	wg.Wait()
	return !failed.Load() && ctx.Err() == nil
}

// replayTask writes one task's pending records in order, stopping at the
// first temporary error.
func (s *Store) replayTask(ctx context.Context, items []*item) bool {
	unlock, err := s.locks.lock(ctx, items[0].e.TaskID)
	if err != nil {
		return false
	}
	defer unlock()
	for _, it := range items {
		e, pending, removed, err := s.spool.entry(it)
		if !pending {
			continue
		}
		if err != nil {
			s.spool.bad(it, err)
			continue
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
			}
			s.spool.settle(it, oversize)
			s.replayed.Add(1)
		case permanent(err):
			s.spool.settle(it, true)
			s.parked.Add(1)
			s.log.Error("spooled result refused by the broker for good; kept for lookups only", "entry", e, "err", err)
		default:
			s.warn.Warn(msgReplayFailed, "entry", e, "err", err)
			return false
		}
	}
	return true
}
