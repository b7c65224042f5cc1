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
// The channel has other writers: the producer's soft cancel purges it and
// writes CANCELLED at any moment (KUBEMQ.md trap 24), and a removal that
// took "the oldest message" took that CANCELLED whenever the cancel crossed
// the task's finish (issue 25 item 5: 6 cancels in 6 lost on a real KubeMQ,
// where the removal queues behind the purge and then waits for the next
// message). So the removal (Broker.RemoveOld, mq.Conn.TakeHead) peeks the
// oldest message and takes it only when it is a record ours supersedes: one
// inferq wrote (tagged task.TagWriter) or a non-terminal one (PENDING). It
// checks the message it received too, and writes it back at once if it is
// not the one peeked (a purge slipped in between the two calls, which the
// broker otherwise serialises, KUBEMQ.md fact 28). A producer's record
// written after the task started is never consumed.
//
// When a cancel and a finish cross, the cancel wins (README, DESIGN.md
// 4.7): a terminal record of another writer at the head (the producer's
// CANCELLED) is final; nothing is written behind it, where no reader would
// see it, and the result stays in the store for lookups (GET
// /v1/tasks/{id}). A finish written before the cancel's purge is purged
// with it; one written after the CANCELLED sits behind it. The one gap is
// the adapter's own: its purge and its write are two calls, and a record
// that lands between them is read first; a removal that is waiting then
// queues behind the purge (KUBEMQ.md fact 28) and sees the CANCELLED, so
// only a write already on its way after an earlier removal can land there.
//
// Cost per task, for a present record: a peek and a receive (the "peek
// first" row of TestRemovalCostModel; KUBEMQ.md fact 44 has the measured
// numbers). An
// empty channel costs the peek's 1 s floor, as the one-message receive used
// before did: it happens after a crash between our removal and our send, or
// with a producer that writes no PENDING, and costs that one task 1 s of
// latency, not throughput. QueuesInfo would skip that second only by trusting
// its Waiting count, which KUBEMQ.md calls an estimate: one stale 0 writes
// the result behind a live PENDING that readers then see for up to an hour.
//
// The 1 s floor on an empty channel is kept off everything but the one task:
// no store-wide lock is held across the removal (only the task's own lock),
// removals run in parallel bounded by Config.RemoveConcurrency (default 64:
// were every channel empty, removals would still pass 64 tasks/s, while the
// broker holds only ~6.5k result channels a day), and the legacy peek waits
// outside the broker's shared stream poll pool (trap 11), so waiting
// removals do not slow the task pollers; the receive that follows a peek
// finds its message at once. Where the channel was emptied already (a
// write that failed after its removal), the replay does not remove again.
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
		} else {
			old, err := s.removeOld(ctx, ch)
			if err != nil {
				return err
			}
			if old == OldFinal {
				// The producer cancelled (or another writer finished) first:
				// its record stands, and the result stays for lookups.
				s.withheld.Add(1)
				s.log.Info("result channel holds another writer's final record (the producer cancelled the task); it stands, and the result is kept for lookups only",
					"entry", e, "channel", ch)
				return nil
			}
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

// removeOld removes the channel's old record if ours supersedes it.
func (s *Store) removeOld(ctx context.Context, ch string) (Old, error) {
	select {
	case s.removeSem <- struct{}{}:
	case <-ctx.Done():
		return OldNone, fmt.Errorf("remove old record from %s: %w", ch, ctx.Err())
	}
	defer func() { <-s.removeSem }()
	old, err := s.broker.RemoveOld(ctx, ch, s.cfg.RemoveWait)
	if err != nil {
		return OldNone, fmt.Errorf("remove old record from %s: %w", ch, err)
	}
	if old == OldNone || old == OldKept {
		s.log.Debug("result channel had no old record to remove", "channel", ch, "found", old)
	}
	return old, nil
}
