package results

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Writing a record to the compat channel <prefix><task_id>.
//
// The Python adapter's readers peek the oldest message of the channel, so the
// old record (the PENDING the producer wrote before enqueuing, or our own
// record from an earlier delivery) must go once the new one is there. The
// adapter purges with AckAll, which blocks its whole wait (>= 1 s), blocks
// readers and drops anything written during its window: never used here.
//
// The new record is sent first, then what is older is removed: the channel
// is never empty when the removal looks, so the removal never waits out the
// broker's 1 s floor for a peek of an empty channel. Removing first cost
// that second whenever the producer wrote no PENDING (any producer but the
// Python adapter, or a crash between a removal and its send), and the
// second was not the one task's: a batch is acked only once every record
// of it is stored, and a busy queue has one batch open at a time
// (KUBEMQ.md fact 40), so one such task per batch held the queue to one
// batch a second (a full chaos flood on a fresh real KubeMQ: about 160
// tasks/s, the CPU idle, 18k of 110k unanswered after 10 minutes).
//
// Each write is named (a random id in the record's tags, Broker.SendQueue),
// and the removal (Broker.RemoveOld, mq.Conn.TakeWhile) takes the oldest
// message, one at a time, while it is a record this write supersedes: one
// inferq wrote in another write (tagged task.TagWriter) or a non-terminal
// one (PENDING). It stops at this write's own record, at a final record of
// another writer, or at a message that is no record. A try that failed
// after its send leaves a record that the next try's removal takes.
//
// The channel has other writers: the producer's soft cancel purges it and
// writes CANCELLED at any moment (KUBEMQ.md trap 24), and a removal that
// took "the oldest message" took that CANCELLED whenever the cancel crossed
// the task's finish (issue 25 item 5: 6 cancels in 6 lost on a real KubeMQ,
// where the removal queued behind the purge and then waited for the next
// message). So the removal peeks the oldest message and takes it only when
// it is superseded, checks the message it received too, and writes it back
// at once if it is not the one peeked (a purge slipped in between the two
// calls, which the broker otherwise serialises, KUBEMQ.md fact 28). A
// producer's record written after the task started is never consumed.
//
// When a cancel and a finish cross, the cancel wins (README, DESIGN.md
// 4.7): a purge before our send leaves CANCELLED ahead of our record; a
// purge after it takes our record with the PENDING, and CANCELLED is all
// that is left; a removal waiting meanwhile queues behind the purge
// (KUBEMQ.md fact 28) and then meets the CANCELLED, which stands. Our
// record behind a CANCELLED is never read, and the result stays in the
// store for lookups (GET /v1/tasks/{id}). The one gap is the adapter's
// own: its purge and its write are two calls, and a record that lands
// between them is read first.
//
// Cost per task, for a present PENDING: a send, a peek and a receive of the
// PENDING, and a peek that finds our record (KUBEMQ.md fact 44 has the
// measured numbers of a peek and a receive); for an empty channel a send
// and a peek. TestRemovalCostModel sets this beside the other ways: about
// 1.6 ms a task whoever wrote a PENDING, where removing first paid 1 s for
// each channel without one. Removals run in parallel bounded by Config.RemoveConcurrency
// (default 64), hold no store-wide lock (only the task's own), and the
// legacy peek runs outside the broker's shared stream poll pool (trap 11).
//
// A receive that meets only an expired record swallows the next message sent
// to that channel (trap 8), and the PENDING expires Config.Expiry after the
// task's created_at; so once created_at + Expiry - ExpiryMargin has passed
// the removal is skipped: the PENDING is expired or about to be, and the
// record is simply sent.

// writeOnce is one attempt at writing e to the broker. *removed records that
// the compat channel's old record need not be removed (it has expired, or a
// spool of an earlier version removed it before its send), so the record is
// only sent.
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
	if !*removed && s.pendingExpired(e) {
		s.log.Debug("result channel's old record expired; not removing it", "entry", e)
		*removed = true
	}
	write := strconv.FormatUint(rand.Uint64(), 36)
	if err := s.broker.SendQueue(ctx, ch, body, s.cfg.Expiry, write); err != nil {
		return fmt.Errorf("send result to %s: %w", ch, err)
	}
	if *removed {
		return nil
	}
	return s.removeOld(ctx, e, ch, write)
}

// pendingExpired reports whether the producer's PENDING record has expired,
// or will within the margin.
func (s *Store) pendingExpired(e Entry) bool {
	if e.CreatedAt.IsZero() {
		return false
	}
	return !s.cfg.Now().Before(e.CreatedAt.Add(s.cfg.Expiry - s.cfg.ExpiryMargin))
}

// maxRemovals bounds the records one write removes ahead of its own: a
// PENDING and the records of earlier tries or deliveries, a few at most.
const maxRemovals = 8

// removeOld removes the records ahead of write's, the one just sent, that
// it supersedes (see the top of this file).
func (s *Store) removeOld(ctx context.Context, e Entry, ch, write string) error {
	select {
	case s.removeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("remove old records from %s: %w", ch, ctx.Err())
	}
	defer func() { <-s.removeSem }()
	old, removed, err := s.broker.RemoveOld(ctx, ch, s.cfg.RemoveWait, write, maxRemovals)
	if err != nil {
		return fmt.Errorf("remove old records from %s: %w", ch, err)
	}
	switch old {
	case OldRemoved:
		s.log.Warn("result channel still holds older records after as many removals as one write makes; readers may see an older one", "entry", e, "channel", ch, "removed", removed)
	case OldFinal:
		// The producer cancelled (or another writer finished) first:
		// its record stands, and the result stays for lookups.
		s.withheld.Add(1)
		s.log.Info("result channel holds another writer's final record (the producer cancelled the task); it stands, and the result is kept for lookups only",
			"entry", e, "channel", ch)
	case OldNone, OldKept:
		s.log.Debug("result channel's oldest message is no record of ours", "channel", ch, "found", old)
	}
	return nil
}
