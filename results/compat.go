package results

import (
	"context"
	"fmt"
)

// Writing a record to the compat channel <prefix><task_id>.
//
// The Python adapter's readers peek the oldest message of the channel, so the
// old record (the PENDING the producer wrote before enqueuing, or our own
// record from an earlier delivery) must be gone before the new one is sent.
// The adapter purges with AckAll, which blocks its whole wait (>= 1 s), blocks
// readers and drops anything written during its window: never used here.
//
// Options, as mean removal cost per task (KUBEMQ.md figures: receive or peek
// of a present record 1 / 0.3 ms, of an empty channel the 1 s floor,
// QueuesInfo ~10 ms at 2k channels; TestRemovalCostModel runs them):
//
//	channels holding a PENDING:     100%      99%      95%      50%
//	receive first (this code)       1.0 ms   11 ms    51 ms   500 ms
//	peek, then receive if seen      1.3 ms   11 ms    51 ms   500 ms
//	QueuesInfo, receive if waiting   11 ms   11 ms    11 ms    11 ms
//
// We receive first: one receive of one message, acked on receipt (legacy
// ReceiveQueueMessages). The compat path serves the Python producer, which
// always writes its PENDING before enqueuing (inferq's Go client uses reply
// channels; in compat mode it should write a PENDING too), so the first
// column is the real one: 1 ms, ten times cheaper than QueuesInfo. Empty
// channels happen after a crash between our removal and our send, or with a
// producer that writes no PENDING; they cost that one task 1 s of latency,
// not throughput (below). QueuesInfo would win only below 99% PENDING, and
// only by trusting its Waiting count, which KUBEMQ.md calls an estimate: the
// saving comes entirely from skipping the receive on a 0, and one stale 0
// writes the result behind a live PENDING that readers then see for up to an
// hour (the model's "1% stale" row hides 1 result in 100). Receive-first
// depends on nothing but the channel. Peek-first pays the same floor on an
// empty channel and a second round trip otherwise.
//
// The 1 s floor on an empty channel is kept off everything but the one task:
// no store-wide lock is held across the receive (only the task's own lock),
// receives run in parallel bounded by Config.RemoveConcurrency (default 64:
// were every channel empty, removals would still pass 64 tasks/s, while the
// broker holds only ~6.5k result channels a day), and the legacy receive
// waits outside the broker's shared stream poll pool (trap 11), so waiting
// removals do not slow the task pollers. Where the channel was
// emptied already (a write that failed after its removal), the replay does
// not remove again.
//
// A receive that meets only an expired record swallows the next message sent
// to that channel (trap 8), and the PENDING expires Config.Expiry after the
// task's created_at; so once created_at + Expiry - ExpiryMargin has passed
// the removal is skipped: the PENDING is expired or about to be, and the
// record is simply sent.

// writeOnce is one attempt at writing e to the broker. *removed records that
// the compat channel's old record is gone (or need not be removed), so a
// retry or a replay does not remove again.
func (s *Store) writeOnce(ctx context.Context, e Entry, removed *bool) error {
	body := e.wire(s.cfg.MaxResultBytes)
	if e.ReplyTo != "" {
		tags := map[string]string{"task_id": e.TaskID, "status": e.Status}
		if err := s.broker.SendEventStore(ctx, e.ReplyTo, body, tags); err != nil {
			return fmt.Errorf("send result of %s to events store %s: %w", e.TaskID, e.ReplyTo, err)
		}
		return nil
	}
	ch := s.cfg.ResultPrefix + e.TaskID
	if !*removed {
		if s.pendingExpired(e) {
			s.log.Debug("result channel's old record expired; not removing it", "entry", e)
		} else if err := s.removeOld(ctx, ch); err != nil {
			return err
		}
		*removed = true
	}
	if err := s.broker.SendQueue(ctx, ch, body, s.cfg.Expiry); err != nil {
		return fmt.Errorf("send result to %s: %w", ch, err)
	}
	return nil
}

// pendingExpired reports whether the producer's PENDING record has expired,
// or will within the margin.
func (s *Store) pendingExpired(e Entry) bool {
	if e.CreatedAt.IsZero() {
		return false
	}
	return !s.cfg.Now().Before(e.CreatedAt.Add(s.cfg.Expiry - s.cfg.ExpiryMargin))
}

// removeOld removes the channel's old record with one receive.
func (s *Store) removeOld(ctx context.Context, ch string) error {
	select {
	case s.removeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("remove old record from %s: %w", ch, ctx.Err())
	}
	defer func() { <-s.removeSem }()
	found, err := s.broker.ReceiveOne(ctx, ch, s.cfg.RemoveWait)
	if err != nil {
		return fmt.Errorf("remove old record from %s: %w", ch, err)
	}
	if !found {
		s.log.Debug("result channel had no old record", "channel", ch)
	}
	return nil
}
