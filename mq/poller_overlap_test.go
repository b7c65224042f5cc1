package mq

import (
	"context"
	"testing"
	"time"
)

// TestPollerNoPeekBesideAnOpenBatch: while a batch of the Poller's is open
// it does not peek. On KubeMQ (and the embedded broker, which reproduces
// it) a message that a peek saw moves into the open batch when the peek
// closes, where no poll sees it until that batch completes. The Poller
// counts instead and polls what the count finds, so a second task is
// delivered while the first is still running. Before, the idle watch
// peeked beside the open batch: the second task waited for the first to
// be settled.
func TestPollerNoPeekBesideAnOpenBatch(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	got := make(chan *Message, 4)
	p := runPoller(t, c, PollerConfig{
		Channel: ch, MaxItems: 1,
		Deliver: func(_ context.Context, batch []*Message) (int, error) {
			for _, m := range batch {
				got <- m
			}
			return len(batch), nil
		},
	})
	waitFor(t, 5*time.Second, "poller up", p.Up)
	sendN(t, c.Sender(), ch, 1)
	var first *Message
	select {
	case first = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("first message not delivered")
	}
	// The first task runs (unsettled) while the second arrives; let the
	// Poller settle into whatever it does beside an open batch.
	time.Sleep(20 * time.Millisecond)
	peeks := p.Stats().Peeks
	sendN(t, c.Sender(), ch, 1)
	select {
	case second := <-got:
		t.Logf("second delivered beside the open first; peeks during it: %d", p.Stats().Peeks-peeks)
		if err := second.Ack(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("second message not delivered while the first is unsettled (peeks since: %d, queue %+v)",
			p.Stats().Peeks-peeks, tg.srv.QueueState(ch))
	}
	if n := p.Stats().Peeks - peeks; n != 0 {
		t.Errorf("%d peeks while a batch was open, want 0", n)
	}
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}
}
