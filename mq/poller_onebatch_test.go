package mq

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestPollerGiveBackClosesItsBatchFirst: a message given back keeps its
// batch open on the broker until the client closes; the Poller closes that
// client before its next poll (so no two batches are open at once), and
// the message comes back uncounted.
func TestPollerGiveBackClosesItsBatchFirst(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	const total = 40
	var (
		mu      sync.Mutex
		seen    = map[string]int{}
		counts  = map[string][]int{}
		maxOpen int
		gave    bool
	)
	p := runPoller(t, c, PollerConfig{
		Channel: ch, MaxItems: 8,
		Deliver: func(ctx context.Context, batch []*Message) error {
			open := tg.srv.QueueState(ch).Open
			mu.Lock()
			defer mu.Unlock()
			maxOpen = max(maxOpen, open)
			for _, m := range batch {
				seen[string(m.Body)]++
				counts[string(m.Body)] = append(counts[string(m.Body)], m.ReceiveCount)
				if !gave {
					gave = true
					_ = m.GiveBack()
					continue
				}
				_ = m.Ack()
			}
			return nil
		},
	})
	out := make([]OutMessage, total)
	for i := range out {
		out[i] = OutMessage{Channel: ch, Body: fmt.Appendf(nil, "m%d", i)}
	}
	if err := c.Sender().Send(context.Background(), out...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every message settled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, k := range seen {
			n += k
		}
		return len(seen) == total && n == total+1 && p.InFlight() == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for k, rc := range counts {
		if len(rc) == 2 && rc[1] != rc[0] {
			t.Errorf("%s given back came again with ReceiveCount %v; want it unchanged", k, rc)
		}
	}
	if maxOpen > 1 {
		t.Errorf("%d poll transactions open at a delivery; want 1", maxOpen)
	}
	if p.Stats().Recycles < 1 {
		t.Errorf("recycles %d; want the client changed after the GiveBack", p.Stats().Recycles)
	}
}

// TestPollerOneBatchAtATimeOnABusyQueue: while more is known to be waiting
// than one poll takes, the Poller holds one batch at a time: no poll until
// the open batch is settled, however much room MaxInFlight leaves. Before,
// it kept up to MaxInFlight in overlapping batches.
func TestPollerOneBatchAtATimeOnABusyQueue(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	sendN(t, c.Sender(), ch, 40)
	batches := make(chan []*Message, 40)
	runPoller(t, c, PollerConfig{
		Channel: ch, MaxItems: 4, MaxInFlight: 40,
		Deliver: func(ctx context.Context, batch []*Message) error {
			batches <- batch
			return nil
		},
	})
	for got := 0; got < 40; {
		var b []*Message
		select {
		case b = <-batches:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 40 delivered; the next batch never came", got)
		}
		got += len(b)
		if 40-got > 4 { // more waiting than one poll takes
			select {
			case more := <-batches:
				t.Fatalf("a batch of %d polled while a batch of %d was open and %d were waiting", len(more), len(b), 40-got)
			case <-time.After(150 * time.Millisecond):
			}
		}
		for _, m := range b {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
