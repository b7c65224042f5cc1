package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/shard"
)

// channel is one channel of a queue: the queue itself, or one of its
// shards (Config.QueueShards), with the poller that consumes it.
type channel struct {
	name string
	// poller is the channel's current poller: a Poller runs once, so a
	// shard owned again gets a new one.
	poller atomic.Pointer[pollerRef]
	used   atomic.Bool  // poller has been run
	runs   atomic.Int32 // pollers of the channel running now
	// start is the lowest broker sequence of the first batch delivered
	// since the channel's poller last started; 0 until then (returnedTo).
	start atomic.Uint64
}

// pollerRef holds a channel's current poller.
type pollerRef struct{ Poller }

// current is ch's current poller.
func (ch *channel) current() Poller { return ch.poller.Load().Poller }

// use makes p ch's current poller.
func (ch *channel) use(p Poller) { ch.poller.Store(&pollerRef{p}) }

// memberID is a replica's id among a queue's shard members: its journal's
// id, which a data dir keeps across restarts, so that a replica killed and
// restarted on its volume takes its own shards back instead of making the
// others split them twice (once at its return, again when its old id
// expires). Without a data dir the journal's id is new per process.
func memberID(j *crash.Journal) string { return "inferq-" + j.ID() }

// runChannel runs a poller of q's channel ch until ctx ends and it has
// drained; its error goes to the server's. The caller counts the run in
// ch.runs before it starts runChannel's goroutine (so that readiness
// never sees an owned shard without its poller); runChannel uncounts it.
func (s *Server) runChannel(ctx context.Context, q *queue, ch *channel) {
	defer ch.runs.Add(-1)
	ch.start.Store(0) // a new stint (returnedTo)
	p := ch.current()
	if ch.used.Swap(true) {
		np, err := s.newPoller(q, ch)
		if err != nil {
			s.dynErr(err)
			return
		}
		ch.use(np)
		p = np
	}
	if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		s.dynErr(fmt.Errorf("consumer: poller %s: %w", ch.name, err))
	}
}

// PollingChannels are the channels this server polls now (a queue, or
// the shards of one it owns), sorted.
func (s *Server) PollingChannels() []string {
	var out []string
	for _, q := range s.queueList() {
		for _, ch := range q.chans {
			if ch.runs.Load() > 0 {
				out = append(out, ch.name)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (s *Server) dynErr(err error) {
	s.dyn.mu.Lock()
	s.dyn.errs = append(s.dyn.errs, err)
	s.dyn.mu.Unlock()
}

// runShards consumes the shards of q that this replica owns among the
// members it hears (package shard) until ctx ends: a shard it stops owning
// is let go (its poller drains what it delivered, in the background), one
// it comes to own is polled at once. It announces its leaving when ctx
// ends, so that the others take its shards while its pollers drain.
func (s *Server) runShards(ctx context.Context, q *queue) {
	var wg sync.WaitGroup
	defer wg.Wait()
	m, err := shard.NewMembers(s.cfg.ShardEvents, q.name, s.memberID, s.cfg.ShardBeat, s.log)
	if err != nil {
		s.dynErr(fmt.Errorf("consumer: queue %s shards: %w", q.name, err))
		return
	}
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	running := map[int]context.CancelFunc{}
	var owned []int
	apply := func() {
		ready := m.Ready()
		var want []int
		if ready {
			want = shard.Owned(m.Self(), m.Live(), len(q.chans))
		}
		// Shard 0's owner moves its polls to the other shards while
		// other replicas serve the queue (spread.go).
		if ready {
			q.spread.set(m.Live(), len(q.chans))
		} else {
			q.spread.set(nil, len(q.chans))
		}
		if !slices.Equal(want, owned) {
			s.log.Info("queue shards owned", "queue", q.name, "shards", want, "of", len(q.chans), "members", m.Live())
			owned = want
			for i, stop := range running {
				if !slices.Contains(want, i) {
					stop()
					delete(running, i)
				}
			}
			for _, i := range want {
				if running[i] != nil {
					continue
				}
				sctx, stop := context.WithCancel(ctx)
				running[i] = stop
				q.chans[i].runs.Add(1)
				wg.Add(1)
				go func() { defer wg.Done(); s.runChannel(sctx, q, q.chans[i]) }()
			}
		}
		// Split once the owned shards' pollers are counted, so that
		// readiness (BrokerAnswers) waits for them to answer.
		if ready {
			q.split.Store(true)
		}
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, stop := range running {
				stop()
			}
			return
		case <-m.Changed():
		case <-t.C:
		}
		apply()
	}
}
