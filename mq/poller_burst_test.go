package mq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestPollerBurstBesideASettlingBatch: bursts sent in one call while the
// batch before them runs, then is settled, as the moves of a fleet or of a
// pipelining replica fill a shard (consumer's spread.go and pipe.go), and
// as producers with many tasks in flight send. On KubeMQ v2.4.0 the
// settlement leaves part or all of the burst in the closing batch's
// subscription, and the next poll is forced to take every one of them but
// keeps only what it asked for (KUBEMQ.md facts 43, 45): a Poller that
// asked for one (its peek saw one) or for the messages after the highest
// it had received left the others in that poll's batch, one more batch
// each, and a poll beside that batch asked for them and waited its whole
// PollWait. Measured before the fix, 2026-12-06: on KubeMQ 57 polls and
// a short poll for 12 bursts (another run: 2 short polls), strays
// delivered one per batch up to 4 s late; the embedded broker, which
// models the forced take since, 42 polls. The Poller must deliver every
// burst once, in few polls, without a poll that waits for more than is
// there.
func TestPollerBurstBesideASettlingBatch(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ch := chanName(t)
			const rounds, burst = 12, 16
			got := make(chan []*Message, rounds*burst)
			p, err := c.NewPoller(PollerConfig{Channel: ch, MaxItems: 128, Deliver: func(_ context.Context, b []*Message) error {
				got <- b
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			var short, polls atomic.Int64
			p.onPoll = func(asked, n, waiting int) {
				if n > 0 {
					polls.Add(1)
				}
				if n < asked {
					short.Add(1)
					t.Logf("poll asked %d, got %d, %d thought waiting", asked, n, waiting)
				}
			}
			startPoller(t, p)
			sent := 0
			send := func() {
				out := make([]OutMessage, burst)
				for i := range out {
					out[i] = OutMessage{Channel: ch, Body: fmt.Appendf(nil, "r%d-%d", sent, i)}
				}
				if err := c.Sender().Send(context.Background(), out...); err != nil {
					t.Fatal(err)
				}
				sent++
			}
			send()
			seen := map[string]int{}
			for len(seen) < rounds*burst {
				select {
				case b := <-got:
					for _, m := range b {
						seen[string(m.Body)]++
					}
					if sent < rounds {
						send() // the next burst arrives while this batch runs
					}
					time.Sleep(30 * time.Millisecond) // the run
					for _, m := range b {
						if err := m.Ack(); err != nil {
							t.Fatal(err)
						}
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("%d of %d delivered", len(seen), rounds*burst)
				}
			}
			deliveredOnce(t, seen)
			if n := short.Load(); n > 0 {
				t.Errorf("%d poll(s) asked for more than was there and waited their PollWait", n)
			}
			// One poll per burst, give or take the first ones (a peek
			// sees the first task of all alone); the trickle took 50.
			if n := polls.Load(); n > 2*rounds {
				t.Errorf("%d polls delivered %d bursts: strays came back a few at a time", n, rounds)
			}
		})
	}
}
