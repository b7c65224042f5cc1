package mq

// The Poller against both brokers: once-only delivery across recycling, a
// lone message, backpressure, a broker restart, settlement errors and a
// batch's settlements going out together.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
)

func TestPollerDeliversEachMessageOnceAcrossRecycling(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ch := chanName(t)
			const total = 600
			var (
				mu       sync.Mutex
				seen     = map[string]int{}
				overAsk  atomic.Int64
				maxAsked atomic.Int64
				errMu    sync.Mutex
				errs     = map[string]int{}
			)
			p := runPoller(t, c, PollerConfig{
				Channel: ch, MaxItems: 16, RecycleAfter: 5,
				OnSettleError: func(err error) {
					errMu.Lock()
					errs[err.Error()]++
					errMu.Unlock()
				},
				Deliver: func(ctx context.Context, batch []*Message) error {
					for _, m := range batch {
						mu.Lock()
						seen[string(m.Body)]++
						mu.Unlock()
						// Settle from other goroutines, as a pipeline would.
						go func() {
							if err := m.Ack(); err != nil {
								t.Errorf("ack: %v", err)
							}
						}()
					}
					return nil
				},
			})
			p.onPoll = func(asked, got, waiting int) {
				if got < asked {
					overAsk.Add(1) // the poll waited: it asked for more than was there
					t.Logf("poll asked %d, got %d, %d thought waiting", asked, got, waiting)
				}
				if int64(asked) > maxAsked.Load() {
					maxAsked.Store(int64(asked))
				}
			}
			// Two waves: the next stream client warms up (1 s) meanwhile,
			// so the second wave runs through recycled clients.
			sendN(t, c.Sender(), ch, total/2)
			waitFor(t, 10*time.Second, "first wave", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seen) == total/2
			})
			time.Sleep(1500 * time.Millisecond)
			var wg sync.WaitGroup
			for i := range total / 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: fmt.Appendf(nil, "w2-%d", i)}); err != nil {
						t.Errorf("send: %v", err)
					}
				}()
			}
			wg.Wait()
			waitFor(t, 20*time.Second, "all messages", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seen) == total
			})
			waitFor(t, 5*time.Second, "settlements", func() bool { return p.InFlight() == 0 })
			time.Sleep(300 * time.Millisecond) // a duplicate would show up now
			mu.Lock()
			deliveredOnce(t, seen)
			mu.Unlock()
			st := p.Stats()
			t.Logf("stats %+v, max asked %d, polls that asked for more than was there %d", st, maxAsked.Load(), overAsk.Load())
			if st.Recycles == 0 {
				t.Errorf("no recycling after %d polls with RecycleAfter 5", st.Polls)
			}
			if overAsk.Load() > 0 {
				t.Errorf("%d polls asked for more than was waiting", overAsk.Load())
			}
			if maxAsked.Load() > 16 {
				t.Errorf("asked for %d > MaxItems", maxAsked.Load())
			}
			if st.SettleErrors != 0 {
				errMu.Lock()
				for e, n := range errs {
					t.Logf("settle error x%d: %s", n, e)
				}
				errMu.Unlock()
				t.Errorf("%d settle errors", st.SettleErrors)
			}
			if tg.srv != nil {
				waitFor(t, 5*time.Second, "empty queue", func() bool {
					qs := tg.srv.QueueState(ch)
					return len(qs.Waiting) == 0 && qs.InFlight == 0
				})
			} else {
				// The real broker's Waiting counts unsettled messages too:
				// 0 means every ack was applied, including those of the
				// batches the SDK reported as cancelled at close.
				waitFor(t, 5*time.Second, "empty queue", func() bool {
					q, _, err := c.queueInfo(context.Background(), ch)
					return err == nil && q.Waiting == 0
				})
			}
		})
	}
}

func TestPollerLoneMessageIsNotHeld(t *testing.T) {
	// Real broker timings: 1 s poll floor and whole-second peek waits.
	for _, tg := range targets(t, broker.Options{}) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ch := chanName(t)
			got := make(chan time.Time, 8)
			p := runPoller(t, c, PollerConfig{
				Channel: ch,
				Deliver: func(ctx context.Context, batch []*Message) error {
					for _, m := range batch {
						got <- time.Now()
						_ = m.Ack()
					}
					return nil
				},
			})
			// Let the poller warm up and settle into the idle peek.
			waitFor(t, 5*time.Second, "poller up", p.Up)
			for i := range 3 {
				time.Sleep(time.Duration(1200+rand.IntN(400)) * time.Millisecond)
				start := time.Now()
				if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("lone")}); err != nil {
					t.Fatal(err)
				}
				select {
				case at := <-got:
					lat := at.Sub(start)
					t.Logf("lone message %d delivered after %v", i, lat)
					if lat > 1500*time.Millisecond {
						t.Errorf("lone message held %v", lat)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("lone message not delivered")
				}
			}
		})
	}
}

func TestPollerBackpressure(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	var (
		mu   sync.Mutex
		held []*Message
	)
	p := runPoller(t, c, PollerConfig{
		// MaxItems over what is sent: a light queue, whose batches may
		// overlap up to MaxInFlight (see Poller).
		Channel: ch, MaxItems: 32, MaxInFlight: 5,
		Deliver: func(ctx context.Context, batch []*Message) error {
			mu.Lock()
			held = append(held, batch...)
			mu.Unlock()
			return nil
		},
	})
	sendN(t, c.Sender(), ch, 20)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(held) }
	waitFor(t, 5*time.Second, "first 5", func() bool { return count() == 5 })
	time.Sleep(300 * time.Millisecond)
	if n := count(); n != 5 || p.InFlight() != 5 {
		t.Fatalf("delivered %d, in flight %d with MaxInFlight 5", n, p.InFlight())
	}
	for settled := 0; settled < 20; {
		mu.Lock()
		batch := held[settled:]
		mu.Unlock()
		for _, m := range batch {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
			settled++
		}
		if settled < 20 {
			waitFor(t, 5*time.Second, "more deliveries", func() bool { return count() > settled || count() == 20 })
		}
		if p.InFlight() > 5 {
			t.Fatalf("in flight %d", p.InFlight())
		}
	}
}

func TestPollerRecoversFromBrokerRestart(t *testing.T) {
	skipSDKRace(t)
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		downs atomic.Int64
		ups   atomic.Int64
	)
	runPoller(t, c, PollerConfig{
		Channel: ch,
		OnState: func(up bool, err error) {
			if up {
				ups.Add(1)
			} else {
				downs.Add(1)
				if !errors.Is(err, ErrUnavailable) {
					t.Errorf("down with %v, want ErrUnavailable", err)
				}
			}
		},
		Deliver: func(ctx context.Context, batch []*Message) error {
			for _, m := range batch {
				mu.Lock()
				seen[string(m.Body)] = true
				mu.Unlock()
				_ = m.Ack()
			}
			return nil
		},
	})
	sendN(t, c.Sender(), ch, 10)
	waitFor(t, 5*time.Second, "first messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 10 })
	tg.srv.Stop()
	waitFor(t, 5*time.Second, "poller down", func() bool { return downs.Load() > 0 })
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("x")}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("send while away: %v, want ErrUnavailable", err)
	}
	time.Sleep(500 * time.Millisecond)
	tg.srv.Restart()
	start := time.Now()
	waitFor(t, 15*time.Second, "poller up again", func() bool { return ups.Load() > 1 })
	t.Logf("poller up %v after restart", time.Since(start))
	// The sender's stream comes back too (the SDK reconnects each second).
	waitFor(t, 15*time.Second, "sender back", func() bool {
		return c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("after")}) == nil
	})
	waitFor(t, 10*time.Second, "message after restart", func() bool { mu.Lock(); defer mu.Unlock(); return seen["after"] })
}

func TestSettleErrors(t *testing.T) {
	skipSDKRace(t)
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	var settleErrs atomic.Int64
	msgs := make(chan *Message, 10)
	p := runPoller(t, c, PollerConfig{
		// One message per batch: each settlement goes out at once.
		Channel: ch, MaxItems: 1,
		OnSettleError: func(err error) { settleErrs.Add(1) },
		Deliver: func(ctx context.Context, batch []*Message) error {
			for _, m := range batch {
				msgs <- m
			}
			return nil
		},
	})
	sendN(t, c.Sender(), ch, 2)
	m1, m2 := <-msgs, <-msgs
	if err := m1.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := m1.Ack(); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("second ack: %v, want ErrAlreadySettled", err)
	}
	if err := m1.NAck(); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("nack after ack: %v, want ErrAlreadySettled", err)
	}
	// Ack returns before the broker has it (trap 6): wait until it has.
	waitFor(t, 5*time.Second, "ack applied", func() bool { return tg.srv.InFlight(ch) == 1 })
	// m2's stream goes away while it is held: its settlement fails, now or
	// later through OnErrorFunc, and it comes back uncounted.
	tg.srv.Stop()
	tg.srv.Restart()
	waitFor(t, 10*time.Second, "redelivery", func() bool { return len(msgs) > 0 })
	again := <-msgs
	if again.ID != m2.ID || again.ReceiveCount != m2.ReceiveCount {
		t.Errorf("redelivered %s rc %d, want %s rc %d", again.ID, again.ReceiveCount, m2.ID, m2.ReceiveCount)
	}
	err := m2.Ack()
	waitFor(t, 5*time.Second, "ack failure surfaced", func() bool { return err != nil || settleErrs.Load() > 0 })
	t.Logf("stale ack: returned %v, settle errors %d", err, p.Stats().SettleErrors)
	if err != nil && !errors.Is(err, ErrUnavailable) {
		t.Errorf("stale ack error %v, want ErrUnavailable", err)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := (&Message{}).Ack(); !errors.Is(err, ErrNotSettleable) {
		t.Error("unpolled message settled")
	}
}

// TestSettlementsOfABatchGoOutTogether: the broker gets a batch's
// settlements when its last message is settled (see txn).
func TestSettlementsOfABatchGoOutTogether(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	batches := make(chan []*Message, 4)
	runPoller(t, c, PollerConfig{
		Channel: ch, MaxItems: 3,
		Deliver: func(ctx context.Context, batch []*Message) error {
			batches <- batch
			return nil
		},
	})
	// The first message after an idle watch comes alone (it is polled as
	// soon as the peek sees it). While it is open the Poller does not
	// peek: it counts, and the next three come as one batch.
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	next := func(what string) []*Message {
		t.Helper()
		select {
		case b := <-batches:
			return b
		case <-time.After(5 * time.Second):
			t.Fatal(what)
			return nil
		}
	}
	w := next("first message not delivered")
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("a")},
		OutMessage{Channel: ch, Body: []byte("b")}, OutMessage{Channel: ch, Body: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	b := next("no batch of 3")
	if len(b) != 3 {
		t.Fatalf("batch of %d, want 3", len(b))
	}
	for _, m := range w {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b[0].Ack(); err != nil {
		t.Fatal(err)
	}
	if err := b[1].NAck(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // nothing may reach the broker meanwhile
	if n := tg.srv.InFlight(ch); n != 3 {
		t.Fatalf("in flight %d after 2 of 3 settled, want 3", n)
	}
	if err := b[2].Ack(); err != nil {
		t.Fatal(err)
	}
	again := next("nacked message not redelivered")
	if len(again) != 1 || again[0].ID != b[1].ID || again[0].ReceiveCount != 2 {
		t.Fatalf("redelivered %d messages, first %+v", len(again), again[0])
	}
	_ = again[0].Ack()
	waitFor(t, 5*time.Second, "queue empty", func() bool {
		st := tg.srv.QueueState(ch)
		return len(st.Waiting) == 0 && st.InFlight == 0
	})
}
