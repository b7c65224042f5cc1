package results

import (
	"context"
	"fmt"
	"time"
)

// flushPoll is how often Flush looks at the spool, and flushLogEvery how
// often it logs its progress.
const (
	flushPoll     = 20 * time.Millisecond
	flushLogEvery = 5 * time.Second
)

// Flush waits until no spooled record waits for the broker (Stats.Pending
// is 0) while Run, which must still be running, replays them; it returns
// nil then, or, when ctx ends first, an error with the count still
// waiting. It is the stop of a replica that goes away (a scale-down): the
// caller stops taking tasks, then flushes before it stops Run and calls
// Close. Once Flush is called a broker that was away is tried again every
// FlushRetry instead of the growing wait up to ReplayBackoffMax, so a
// broker back during the flush is met in time. Held oversize records (the
// broker has their substitute) and undeliverable ones are not waited for:
// they stay in the spool, on disk with a data dir, like the records left
// when ctx ends, and the next process on the data dir serves or replays
// them. Progress is logged every 5 s. Safe for concurrent use.
func (s *Store) Flush(ctx context.Context) error {
	s.drainOnce.Do(func() { close(s.draining) })
	start, replayed0 := time.Now(), s.replayed.Load()
	pending := s.spool.stats().pending
	if pending == 0 {
		return nil
	}
	s.log.Info("result spool flushing to the broker", "pending", pending)
	poll := time.NewTicker(flushPoll)
	defer poll.Stop()
	logAt := start.Add(flushLogEvery)
	for {
		select {
		case <-ctx.Done():
			left := s.spool.stats().pending
			return fmt.Errorf("results: flush: %d records still wait for the broker (%d replayed in %s): %w",
				left, s.replayed.Load()-replayed0, time.Since(start).Round(time.Millisecond), ctx.Err())
		case now := <-poll.C:
			pending = s.spool.stats().pending
			if pending == 0 {
				s.log.Info("result spool flushed", "replayed", s.replayed.Load()-replayed0, "took", now.Sub(start).Round(time.Millisecond))
				return nil
			}
			if now.After(logAt) {
				s.log.Info("result spool flushing to the broker", "pending", pending, "replayed", s.replayed.Load()-replayed0)
				logAt = now.Add(flushLogEvery)
			}
		}
	}
}

// awayWait is Run's wait after a pass that found the broker away: d, or
// once Flush is called at most FlushRetry; a Flush called during the
// wait ends it. It returns early when ctx ends.
func (s *Store) awayWait(ctx context.Context, d time.Duration) {
	select {
	case <-s.draining:
		_ = sleep(ctx, min(d, s.cfg.FlushRetry))
		return
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.draining:
	case <-t.C:
	}
}
