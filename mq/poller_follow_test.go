package mq

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A producer that sends its next task as soon as the last one is settled
// (one task at a time, the light-load bench) keeps the queue live: after
// the first few, the Poller follows it, polling at once after each
// completion, with no peek per task (FollowWithin). Disabled, it peeks for
// every task. Each task is delivered once, in order.
func TestPollerFollowsALiveQueue(t *testing.T) {
	const n = 20
	for _, tg := range targets(t, fastBroker()) {
		for _, tc := range []struct {
			name   string
			within time.Duration
		}{{"follows", 0}, {"disabled", -1}} {
			t.Run(tg.name+"/"+tc.name, func(t *testing.T) {
				c := dial(t, tg)
				ch := chanName(t)
				got := make(chan *Message, 1)
				p := runPoller(t, c, PollerConfig{Channel: ch, FollowWithin: tc.within, Deliver: deliverInto(got)})
				waitFor(t, 5*time.Second, "poller up", p.Up)
				send := func(i int) {
					if err := c.Sender().Send(t.Context(), OutMessage{Channel: ch, Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
						t.Fatal(err)
					}
				}
				// slow counts the tasks that came more than FollowWithin
				// after the ack of the one before, as this test saw it: the
				// Poller's own gap (completion to delivery) lies within the
				// test's (before the ack to after the receipt), so only
				// these may end a follow and cost a peek. Under -race on a
				// loaded machine a few do.
				var slow int64
				var ackAt time.Time
				send(0)
				for i := range n {
					want := fmt.Sprintf("m%d", i)
					m := nextMsg(t, got, 5*time.Second, want)
					if tc.within >= 0 && i > 0 && time.Since(ackAt) > p.cfg.FollowWithin {
						slow++
					}
					if string(m.Body) != want {
						t.Fatalf("got %s, want %s", m.Body, want)
					}
					ackAt = time.Now()
					if err := m.Ack(); err != nil {
						t.Fatalf("ack %s: %v", want, err)
					}
					if i+1 < n {
						send(i + 1)
					}
				}
				st := p.Stats()
				t.Logf("%d tasks: %d peeks, %d polls, %d follows, %d counts", n, st.Peeks, st.Polls, st.Follows, st.Counts)
				if tc.within >= 0 {
					t.Logf("%d tasks came over %v after the ack before them", slow, p.cfg.FollowWithin)
				}
				switch {
				case tc.within < 0 && (st.Follows != 0 || st.Peeks < n):
					t.Errorf("disabled: %d follows and %d peeks for %d tasks, want 0 and at least %d", st.Follows, st.Peeks, n, n)
				case tc.within >= 0 && (st.Follows < n-4-slow || st.Peeks > 4+slow):
					t.Errorf("%d follows and %d peeks for %d tasks, %d of them slow, want at least %d and at most %d", st.Follows, st.Peeks, n, slow, n-4-slow, 4+slow)
				}
				select {
				case m := <-got:
					t.Errorf("delivered again: %s", m.Body)
				case <-time.After(100 * time.Millisecond):
				}
			})
		}
	}
}

// A quiet queue, tasks further apart than FollowWithin, is watched with a
// peek per task and never followed: a follow there would hold a poll slot
// of the broker for its whole wait (trap 11).
func TestPollerDoesNotFollowAQuietQueue(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	got := make(chan *Message, 1)
	p := runPoller(t, c, PollerConfig{Channel: ch, FollowWithin: 20 * time.Millisecond, Deliver: deliverInto(got)})
	waitFor(t, 5*time.Second, "poller up", p.Up)
	const n = 5
	for i := range n {
		time.Sleep(150 * time.Millisecond)
		sendN(t, c.Sender(), ch, 1)
		ackNext(t, got, 5*time.Second, fmt.Sprint("task ", i))
	}
	if st := p.Stats(); st.Follows != 0 || st.Peeks < n {
		t.Errorf("%d tasks 150 ms apart: %d follows, %d peeks; want 0 and at least %d", n, st.Follows, st.Peeks, n)
	}
}

// A busy queue is polled by its counts, never followed: a burst is polled
// in batches, not one task at a time. Until the first count answers, the
// burst's first tasks look lone and may be followed (more of them under
// -race, where a count takes longer); once a count has sized a poll, no
// follow comes, not even when the burst ends.
func TestPollerDoesNotFollowABusyQueue(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	const n = 200
	sendN(t, c.Sender(), ch, n)
	got := make(chan *Message, n)
	p, err := c.NewPoller(PollerConfig{Channel: ch, Deliver: deliverInto(got)})
	if err != nil {
		t.Fatal(err)
	}
	var atCount atomic.Int64 // follows before the first poll a count sized
	atCount.Store(-1)
	p.onPoll = func(asked, _, _ int) {
		if asked > 1 && atCount.Load() < 0 {
			atCount.Store(p.Stats().Follows)
		}
	}
	startPoller(t, p)
	for i := range n {
		ackNext(t, got, 10*time.Second, fmt.Sprintf("task %d of %d", i, n))
	}
	// The burst's last batch completes: a follow now would be a stream
	// poll waiting on an empty queue (trap 11), where a peek belongs.
	time.Sleep(200 * time.Millisecond)
	st := p.Stats()
	t.Logf("%d tasks: %d peeks, %d polls, %d follows, %d counts", n, st.Peeks, st.Polls, st.Follows, st.Counts)
	if at := atCount.Load(); at < 0 || st.Follows > at || st.Polls > n/4 {
		t.Errorf("a burst of %d: %d polls (want at most %d), %d follows of which %d before a count sized a poll (-1: none did); want none after",
			n, st.Polls, n/4, st.Follows, at)
	}
}
