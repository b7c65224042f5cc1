package mq

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPollerNoPollWhileOverlappingBatchesClose: on a light queue batches
// may overlap while none completes, but once one completes while others
// are open (it may have stranded messages in them, see Poller) the Poller
// polls again only when none is open. Before, it polled as soon as
// MaxInFlight had room, and overlapping batches passed stranded messages
// on for as long as the load lasted.
func TestPollerNoPollWhileOverlappingBatchesClose(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	var (
		mu      sync.Mutex
		batches [][]*Message
	)
	delivered := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range batches {
			n += len(b)
		}
		return n
	}
	ack := func(b []*Message) {
		for _, m := range b {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	runPoller(t, c, PollerConfig{
		Channel: ch, MaxItems: 16, MaxInFlight: 64,
		Deliver: func(ctx context.Context, batch []*Message) error {
			mu.Lock()
			batches = append(batches, batch)
			mu.Unlock()
			return nil
		},
	})
	sendN(t, c.Sender(), ch, 16)
	waitFor(t, 10*time.Second, "16 delivered in overlapping batches", func() bool { return delivered() == 16 })
	mu.Lock()
	held := slices.Clone(batches)
	mu.Unlock()
	if len(held) < 2 {
		t.Fatalf("%d batches; the test needs overlapping ones", len(held))
	}
	ack(held[0]) // completes while the later batches are open
	sendN(t, c.Sender(), ch, 8)
	for i, b := range held[1:] {
		time.Sleep(150 * time.Millisecond)
		if n := delivered(); n != 16 {
			t.Fatalf("%d more delivered after batch 1 of %d completed with later ones open and %d of them settled; want none until all are", n-16, len(held), i)
		}
		if i < len(held)-2 {
			ack(b)
		}
	}
	ack(held[len(held)-1])
	waitFor(t, 10*time.Second, "the next 8 once no batch is open", func() bool { return delivered() == 24 })
	mu.Lock()
	ack(slices.Concat(batches[len(held):]...))
	mu.Unlock()
}

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
