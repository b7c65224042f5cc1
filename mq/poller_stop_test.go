package mq

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// A Deliver cut off by the end of Run's ctx after it took part of a batch:
// the messages it took stay its own (their settlements go through, and the
// drain waits for them); only the rest go back to the queue, uncounted.
// Before, the Poller gave back the whole batch, the taken messages with
// it: they ran twice, and their acks failed with ErrAlreadySettled.
func TestPollerGivesBackOnlyWhatDeliverDidNotTake(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	var (
		mu    sync.Mutex
		taken []*Message
	)
	cut := make(chan struct{})
	p, err := c.NewPoller(PollerConfig{
		Channel: ch, DrainTimeout: 10 * time.Second,
		Deliver: func(ctx context.Context, batch []*Message) error {
			mu.Lock()
			defer mu.Unlock()
			if len(batch) < 3 {
				// The lone message a peek saw first.
				taken = append(taken, batch...)
				return nil
			}
			// Take one, then wait for room that never comes.
			taken = append(taken, batch[0])
			close(cut)
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			for _, m := range batch[1:] {
				_ = m.GiveBack() // never taken: back to the queue uncounted
			}
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var out []OutMessage
	for _, b := range []string{"lone", "a", "b", "c"} {
		out = append(out, OutMessage{Channel: ch, Body: []byte(b)})
	}
	if err := c.Sender().Send(context.Background(), out...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch of three delivered")
	}
	cancel() // the stop comes while Deliver waits in the middle of the batch
	waitFor(t, 5*time.Second, "Deliver to return", func() bool { return p.InFlight() < 4 })
	mu.Lock()
	mine := slices.Clone(taken)
	mu.Unlock()
	for _, m := range mine {
		if err := m.Ack(); err != nil {
			t.Errorf("ack of taken message %q: %v", m.Body, err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	waitFor(t, 5*time.Second, "no message held", func() bool { return tg.srv.QueueState(ch).InFlight == 0 })
	back := tg.srv.Queue(ch)
	if len(back) != 2 {
		t.Errorf("%d messages back in the queue, want the 2 not taken", len(back))
	}
	for _, m := range back {
		if string(m.Body) != "b" && string(m.Body) != "c" {
			t.Errorf("message %q is back in the queue; only b and c were not taken", m.Body)
		}
		// A waiting message's count is its deliveries so far: 0 as if
		// never delivered; a NAck would have left 1.
		if rc := m.Attributes.ReceiveCount; rc != 0 {
			t.Errorf("message %q given back with ReceiveCount %d, want 0 (uncounted)", m.Body, rc)
		}
	}
}
