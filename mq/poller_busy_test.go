package mq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPollerBusyQueuePollsWhole: a queue that stays deeper than a poll,
// its batches settled in two parts (a batcher that cuts a poll into two
// runs). Each batch's settlement leaves as many strays as it held, and the
// next poll is handed all of them (KUBEMQ.md fact 45). A Poller that
// asked for what was left of an older count (the count minus the polls
// since) asked for fewer than were handed to it when that remainder ran
// low, and held the rest unseen: one poll of a few (on an accelerator, a
// run of a few rows at the cost of a full one) and one more batch for the
// rest. Measured before the fix, 2026-12-06, real KubeMQ heavy load
// (MaxItems 128): a pair of polls such as 67 and 61 about once a second.
// While the queue is busy every poll must ask for MaxItems.
func TestPollerBusyQueuePollsWhole(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ch := chanName(t)
			const maxItems, bursts, burst = 16, 2880, 9
			total := 8*maxItems + bursts
			got := make(chan []*Message, total)
			p, err := c.NewPoller(PollerConfig{Channel: ch, MaxItems: maxItems, Deliver: func(_ context.Context, b []*Message) error {
				got <- b
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var asks []int
			var sending atomic.Bool
			sending.Store(true)
			p.onPoll = func(asked, n, _ int) {
				if sending.Load() && n > 0 {
					mu.Lock()
					asks = append(asks, asked)
					mu.Unlock()
				}
			}
			// The producer: bursts of 9 every 8 ms (1,125/s), faster
			// than the batches below take them (16 in 20 ms), so that the queue deepens and every count
			// finds a number that is no multiple of a poll.
			go func() {
				defer sending.Store(false)
				for i := 0; i < bursts; i += burst {
					out := make([]OutMessage, burst)
					for j := range out {
						out[j] = OutMessage{Channel: ch, Body: fmt.Appendf(nil, "b%d", i+j)}
					}
					if err := c.Sender().Send(context.Background(), out...); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(8 * time.Millisecond)
				}
			}()
			sendN(t, c.Sender(), ch, 8*maxItems) // deep from the start
			startPoller(t, p)
			seen := map[string]int{}
			for len(seen) < total {
				select {
				case b := <-got:
					for _, m := range b {
						seen[string(m.Body)]++
					}
					half := len(b) / 2
					for i, m := range b {
						if i == 0 || i == half {
							time.Sleep(10 * time.Millisecond) // the batch's two runs
						}
						if err := m.Ack(); err != nil {
							t.Fatal(err)
						}
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("%d of %d delivered", len(seen), total)
				}
			}
			deliveredOnce(t, seen)
			mu.Lock()
			defer mu.Unlock()
			// The first poll may be a peek's one: from the first full
			// one on, the queue only deepens.
			small, first := 0, -1
			for i, a := range asks {
				if first < 0 && a == maxItems {
					first = i
				}
				if first >= 0 && a < maxItems {
					small++
				}
			}
			if first < 0 || small > 0 {
				t.Errorf("while the queue was busy, %d poll(s) asked for fewer than %d: %v", small, maxItems, asks)
			}
		})
	}
}
