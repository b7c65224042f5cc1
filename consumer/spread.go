package consumer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/shard"
	"github.com/inferq/inferq/task"
)

// Spreading: see doc.go.

// spreadInfoEvery is how old the shards' depths may be before the owner of
// shard 0 asks the broker again (QueuesInfo, about 3-10 ms).
const spreadInfoEvery = 20 * time.Millisecond

// spreader is a queue's mover of shard 0 (see Spreading). Its methods are
// called from shard 0's poller goroutine, and on from runShards (set).
type spreader struct {
	mu sync.Mutex
	// on: more than one live member; moves happen then. lone: this
	// replica is the only live member; it moves its polls into its own
	// shards only while piped (pipe.go).
	on, lone bool
	pipe     pipeCtl
	meter    pipeMeter
	// owner is each shard's owner, as an index among the live members.
	owner []int
	// waiting is each shard's depth as last asked (Waiting: ready and
	// delivered unsettled), plus what was moved there since; at is when
	// it was asked.
	waiting []int64
	at      time.Time
}

// set turns moving on or off and says who owns each shard (runShards, when
// the members change): moving is on while more than one member is live.
func (sp *spreader) set(live []string, shards int) {
	owner := make([]int, shards)
	for k, id := range live {
		for _, i := range shard.Owned(id, live, shards) {
			owner[i] = k
		}
	}
	sp.mu.Lock()
	sp.on, sp.lone, sp.owner = len(live) > 1, len(live) == 1, owner
	sp.mu.Unlock()
}

// active: shard 0's polls are moved now (a fleet, or a lone replica
// piped).
func (sp *spreader) active() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.on || sp.lone && sp.pipe.on
}

// shardRoom is how many messages may wait in one shard before the owner of
// shard 0 moves no more there: what one replica takes and holds at once.
func (s *Server) shardRoom() int64 { return int64(s.cfg.MaxInFlight) }

// pick returns the shard (1..n-1) to move n messages to: of the replica
// with the fewest waiting in its shards (ready and delivered unsettled:
// what it holds and what waits for it), the shard with the fewest, when
// that replica has room for n more (shardRoom). While none has, it waits,
// asking the broker again every spreadInfoEvery; false when ctx ends or
// moving was turned off meanwhile.
func (s *Server) pick(ctx context.Context, q *queue, n int) (int, bool) {
	sp := q.spread
	room := max(s.shardRoom(), int64(n))
	for {
		s.pipe(q) // a pipeline's trial ends while it waits for room, too
		if !sp.active() {
			return 0, false
		}
		if err := s.refreshDepths(ctx, q); err != nil && ctx.Err() == nil {
			s.log.Debug("shard depths unknown; moving on the last ones", "queue", q.name, "err", err)
		}
		sp.mu.Lock()
		if to := choose(sp.waiting, sp.owner, int64(n), room); to > 0 {
			sp.waiting[to] += int64(n)
			sp.mu.Unlock()
			return to, true
		}
		sp.mu.Unlock()
		t := time.NewTimer(spreadInfoEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, false
		case <-t.C:
		}
	}
}

// choose is pick's choice among shards 1..len(waiting)-1, owned by
// owner[i]: the least loaded owner's least loaded shard, if that owner's
// load plus n fits room; 0 when none fits.
func choose(waiting []int64, owner []int, n, room int64) int {
	if len(owner) != len(waiting) {
		return 0
	}
	load := map[int]int64{}
	for i := 1; i < len(waiting); i++ {
		load[owner[i]] += waiting[i]
	}
	best := 0
	for i := 1; i < len(waiting); i++ {
		o, b := owner[i], owner[best]
		if best == 0 || load[o] < load[b] || load[o] == load[b] && waiting[i] < waiting[best] {
			best = i
		}
	}
	if best == 0 || load[owner[best]]+n > room {
		return 0
	}
	return best
}

// refreshDepths asks the broker for q's shard depths when the last answer
// is older than spreadInfoEvery.
func (s *Server) refreshDepths(ctx context.Context, q *queue) error {
	sp := q.spread
	sp.mu.Lock()
	fresh := time.Since(sp.at) < spreadInfoEvery && len(sp.waiting) == len(q.chans)
	sp.mu.Unlock()
	if fresh {
		return nil
	}
	names := make([]string, len(q.chans))
	for i, ch := range q.chans {
		names[i] = ch.name
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := s.cfg.Broker.QueuesInfo(ictx, mq.InfoFilter(names...))
	if err != nil {
		return fmt.Errorf("consumer: depths of %s's shards: %w", q.name, err)
	}
	w := make([]int64, len(q.chans))
	for i, ch := range q.chans {
		c, _ := mq.LookupInfo(info, ch.name)
		w[i] = c.Waiting
	}
	sp.mu.Lock()
	sp.waiting, sp.at = w, time.Now()
	sp.mu.Unlock()
	return nil
}

// spread is shard 0's Deliver while moving is on: it moves batch whole
// into the shard with the most room, then acks it (moveTo). It returns
// how many it handed over (all, moved or run here) and, when ctx ended
// first, ctx's error: the rest are refused.
func (s *Server) spread(ctx context.Context, q *queue, ch *channel, batch []*mq.Message) (int, error) {
	to, ok := s.pick(ctx, q, len(batch))
	if !ok {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return s.deliverWhenRoom(ctx, q, ch, batch) // moving turned off: run it here
	}
	if err := s.moveTo(ctx, batch, q.chans[to].name); err != nil {
		s.log.Warn("move to a shard failed; running the batch here", "queue", q.name, "shard", q.chans[to].name, "n", len(batch), "err", err)
		return s.deliverWhenRoom(ctx, q, ch, batch)
	}
	s.met.Moved.WithLabelValues(q.name).Add(float64(len(batch)))
	return len(batch), nil
}

// moved is the copy of m that spread sends to channel: its attempts so far
// in TagAttempt (the attempt it would have had here: attempt, crashes
// aside), its MaxReceiveCount and MaxReceiveQueue as the producer set them
// (the consumer caps attempts at MaxReceiveCount, as for a delayed retry's
// copy).
func moved(m *mq.Message, channel string) mq.OutMessage {
	a := 1
	if v, err := strconv.Atoi(m.Tags[task.TagAttempt]); err == nil && v > 0 {
		a = v
	}
	if m.ReceiveCount > 1 {
		a += m.ReceiveCount - 1
	}
	return m.Out(channel, map[string]string{task.TagAttempt: strconv.Itoa(a)})
}
