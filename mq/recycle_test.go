package mq

import (
	"context"
	"testing"
	"time"
)

// An idle Poller replaces its stream client once it is RecycleEvery old
// (closing the old one gives back what a real broker stranded in its
// subscriptions, trap 12), and keeps delivering after the swap.
func TestPollerRecyclesByAge(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ch := chanName(t)
			got := make(chan *Message, 4)
			p := runPoller(t, c, PollerConfig{
				Channel: ch, RecycleEvery: 300 * time.Millisecond,
				Deliver: func(ctx context.Context, b []*Message) error {
					for _, m := range b {
						got <- m
					}
					return nil
				},
			})
			for i, body := range []string{"before", "after"} {
				if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte(body)}); err != nil {
					t.Fatal(err)
				}
				select {
				case m := <-got:
					if string(m.Body) != body {
						t.Fatalf("got %q, want %q", m.Body, body)
					}
					if err := m.Ack(); err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("message %d not delivered", i)
				}
				if i == 0 {
					waitFor(t, 5*time.Second, "a recycle by age", func() bool { return p.Stats().Recycles >= 1 })
				}
			}
		})
	}
}
