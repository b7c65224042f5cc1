package mq

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func benchConn(b *testing.B, tg target) *Conn {
	c := dial(b, tg)
	ch := chanName(b)
	waitFor(b, 5*time.Second, "sender warm", func() bool {
		return c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("w")}) == nil
	})
	return c
}

// BenchmarkSender measures Send throughput with 1 and 64 concurrent callers
// of one message each (200 B bodies).
func BenchmarkSender(b *testing.B) {
	body := make([]byte, 200)
	for _, tg := range targets(b, fastBroker()) {
		for _, callers := range []int{1, 64} {
			b.Run(tg.name+"/callers="+itoa(callers), func(b *testing.B) {
				c := benchConn(b, tg)
				ch := chanName(b)
				var next atomic.Int64
				b.ResetTimer()
				var wg sync.WaitGroup
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: body}); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkPollerAck measures poll + per-message Ack through a Poller on a
// preloaded queue.
func BenchmarkPollerAck(b *testing.B) {
	body := make([]byte, 200)
	for _, tg := range targets(b, fastBroker()) {
		for _, maxItems := range []int{1, 32, 128} {
			b.Run(tg.name+"/max="+itoa(maxItems), func(b *testing.B) {
				c := benchConn(b, tg)
				ch := chanName(b)
				batch := make([]OutMessage, 0, 256)
				for i := 0; i < b.N; i += len(batch) {
					batch = batch[:0]
					for j := 0; j < 256 && i+j < b.N; j++ {
						batch = append(batch, OutMessage{Channel: ch, Body: body})
					}
					if err := c.Sender().Send(context.Background(), batch...); err != nil {
						b.Fatal(err)
					}
				}
				var got atomic.Int64
				var first atomic.Int64 // unix ns of the first delivery: excludes the 1 s warm-up
				done := make(chan struct{})
				p, err := c.NewPoller(PollerConfig{Channel: ch, MaxItems: maxItems, MaxInFlight: 4 * maxItems, RecycleAfter: 1000,
					Deliver: func(ctx context.Context, msgs []*Message) error {
						first.CompareAndSwap(0, time.Now().UnixNano())
						for _, m := range msgs {
							if err := m.Ack(); err != nil {
								b.Error(err)
							}
						}
						if got.Add(int64(len(msgs))) >= int64(b.N) {
							select {
							case <-done:
							default:
								close(done)
							}
						}
						return nil
					}})
				if err != nil {
					b.Fatal(err)
				}
				// Start timing once the poller's first client is warm.
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				b.ResetTimer()
				ran := make(chan struct{})
				go func() { _ = p.Run(ctx); close(ran) }()
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					b.Fatalf("got %d of %d", got.Load(), b.N)
				}
				el := time.Since(time.Unix(0, first.Load()))
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
				cancel()
				<-ran
			})
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf []byte
	for ; n > 0; n /= 10 {
		buf = append([]byte{byte('0' + n%10)}, buf...)
	}
	return string(buf)
}

// BenchmarkEvents compares the two ways to publish plain events from one
// goroutine: a unary SendEvent per event (a round trip each) and an
// EventStream (a stream write each).
func BenchmarkEvents(b *testing.B) {
	body := []byte(`{"task_id":"0123456789abcdef0123456789abcdef","pct":50,"detail":"running (batch of 64)"}`)
	tags := map[string]string{"task_id": "0123456789abcdef0123456789abcdef", "pct": "50"}
	for _, tg := range targets(b, fastBroker()) {
		b.Run(tg.name+"/unary", func(b *testing.B) {
			c := benchConn(b, tg)
			ch := chanName(b)
			for b.Loop() {
				if err := c.SendEvent(context.Background(), ch, body, tags); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(tg.name+"/stream", func(b *testing.B) {
			c := benchConn(b, tg)
			ch := chanName(b)
			s := c.NewEventStream(func(err error) { b.Error(err) })
			defer s.Close(context.Background())
			for b.Loop() {
				if err := s.Publish(context.Background(), ch, body, tags); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRemoveRecord measures removing a per-task result record that is
// there: the one-message auto-ack receive (ReceiveOne) against TakeWhile's
// peek and receive, which never keeps a message it has not checked. Each
// iteration writes the record (not timed) and removes it.
func BenchmarkRemoveRecord(b *testing.B) {
	body := make([]byte, 200)
	for _, tg := range targets(b, fastBroker()) {
		for _, how := range []string{"receive-one", "take-while"} {
			b.Run(tg.name+"/"+how, func(b *testing.B) {
				c := benchConn(b, tg)
				ch := chanName(b)
				ctx := context.Background()
				all := func(*Message) bool { return true }
				for b.Loop() {
					b.StopTimer()
					if err := c.Sender().Send(ctx, OutMessage{Channel: ch, Body: body}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					var found bool
					var err error
					if how == "receive-one" {
						found, err = c.ReceiveOne(ctx, ch, time.Second)
					} else {
						var n int
						_, n, err = c.TakeWhile(ctx, ch, time.Second, 1, all)
						found = n == 1
					}
					if err != nil || !found {
						b.Fatalf("%s: found %v, %v", how, found, err)
					}
				}
			})
		}
	}
}
