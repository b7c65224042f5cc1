package mq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// subscribed subscribes to ch and waits until the subscription is in place
// (events are not stored: a probe is published until one comes back). It
// returns the events channel with the probes read off.
func subscribed(t *testing.T, ctx context.Context, c *Conn, ch string) <-chan Event {
	t.Helper()
	events, err := c.SubscribeEvents(ctx, ch, "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "subscription", func() bool {
		if c.SendEvent(ctx, ch, []byte("probe"), nil) != nil {
			return false // the broker may be coming back
		}
		select {
		case <-events:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	for { // late probes
		select {
		case <-events:
		case <-time.After(200 * time.Millisecond):
			return events
		}
	}
}

// Every event handed to an EventStream reaches a subscriber that keeps up,
// in order, with its body and tags, and the stream's refusals reach the
// rejected callback. Plain events are dropped for a subscriber that falls
// a buffer behind, on both brokers, so the publisher waits for the
// subscriber every pace events: on a loaded machine it fell behind
// (make test, packages in parallel).
func TestEventStreamPublishes(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := chanName(t)
			events := subscribed(t, ctx, c, ch)
			var rejected atomic.Int64
			var lastErr atomic.Pointer[error]
			s := c.NewEventStream(func(err error) { rejected.Add(1); lastErr.Store(&err) })
			const n, pace = 5000, 100
			got := make(chan int, 1)
			var recv atomic.Int64
			go func() {
				i := 0
				for e := range events {
					if want := fmt.Sprint(i); string(e.Body) != want || e.Tags["i"] != want {
						t.Errorf("event %d: body %q tags %v", i, e.Body, e.Tags)
					}
					recv.Add(1)
					if i++; i == n {
						break
					}
				}
				got <- i
			}()
			for i := range n {
				if err := s.Publish(ctx, ch, fmt.Append(nil, i), map[string]string{"i": fmt.Sprint(i)}); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				if (i+1)%pace == 0 {
					waitFor(t, 10*time.Second, "the subscriber to keep up", func() bool { return recv.Load() >= int64(i+1) })
				}
			}
			select {
			case i := <-got:
				if i != n {
					t.Errorf("received %d of %d", i, n)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("not all %d events received", n)
			}
			// An empty event (no body, no metadata) is refused by the broker,
			// after Publish returned.
			if err := s.Publish(ctx, ch, nil, nil); err != nil {
				t.Fatalf("publish empty: %v", err)
			}
			waitFor(t, 5*time.Second, "rejection", func() bool { return rejected.Load() == 1 })
			t.Logf("rejected: %v", *lastErr.Load())
			if err := s.Publish(ctx, ch, []byte("after"), nil); err != nil {
				t.Errorf("publish after a rejection: %v", err)
			}
			s.Close(ctx)
			if err := s.Publish(ctx, ch, []byte("closed"), nil); !errors.Is(err, ErrClosed) {
				t.Errorf("publish after close: %v, want ErrClosed", err)
			}
			cancel()
			for range events {
			}
		})
	}
}

// A stream lost with the broker fails the next publishes with
// ErrUnavailable, and a later Publish opens a new stream.
func TestEventStreamAfterBrokerRestart(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := chanName(t)
	s := c.NewEventStream(nil)
	defer s.Close(ctx)
	if err := s.Publish(ctx, ch, []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	tg.srv.Stop()
	var err error
	waitFor(t, 5*time.Second, "publish to fail", func() bool {
		err = s.Publish(ctx, ch, []byte("x"), nil)
		return err != nil
	})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("publish with the broker away: %v, want ErrUnavailable", err)
	}
	tg.srv.Restart()
	events := subscribed(t, ctx, c, ch)
	waitFor(t, 10*time.Second, "publish after restart", func() bool {
		if s.Publish(ctx, ch, []byte("2"), nil) != nil {
			return false
		}
		select {
		case e := <-events:
			return string(e.Body) == "2"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
}

// A Publish whose ctx has ended fails and sends nothing.
func TestEventStreamPublishHonoursContext(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	s := c.NewEventStream(nil)
	defer s.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Publish(ctx, chanName(t), []byte("x"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("publish with an ended ctx: %v, want context.Canceled", err)
	}
	if err := s.Publish(context.Background(), chanName(t), []byte("x"), nil); err != nil {
		t.Errorf("publish after: %v", err)
	}
}
