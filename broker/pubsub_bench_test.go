package broker_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubemq-io/kubemq-go"

	"github.com/inferq/inferq/broker"
)

// psBenchServer starts an embedded broker and returns it with a client
// factory for it.
func psBenchServer(b *testing.B) (*broker.Server, func(id string) *kubemq.Client) {
	b.Helper()
	srv := broker.New(broker.Options{})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	host, portText, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portText)
	return srv, func(id string) *kubemq.Client {
		ctx, cancel := context.WithCancel(context.Background())
		c, err := kubemq.NewClient(ctx, kubemq.WithAddress(host, port), kubemq.WithClientId(id),
			kubemq.WithTransportType(kubemq.TransportTypeGRPC))
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		b.Cleanup(func() { cancel(); _ = c.Close() })
		return c
	}
}

func psBenchSettle(b *testing.B, srv *broker.Server, ch string) {
	for deadline := time.Now().Add(5 * time.Second); srv.Subscribers(ch) == 0; {
		if time.Now().After(deadline) {
			b.Fatal("subscription not active")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkEventsStoreStream measures events store events streamed by one
// client (StreamEventsStore) and pushed to one subscriber
// (SubscribeToEventsStore), end to end through gRPC and kubemq-go.
func BenchmarkEventsStoreStream(b *testing.B) {
	srv, client := psBenchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ch = "bench.es"
	sub := client("sub")
	errCh := make(chan error, 1)
	events, err := sub.SubscribeToEventsStore(ctx, ch, "", errCh, kubemq.StartFromNewEvents())
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-events:
				got.Add(1)
			}
		}
	}()
	psBenchSettle(b, srv, ch)

	pub := client("pub")
	send := make(chan *kubemq.EventStore, 128)
	results := make(chan *kubemq.EventStoreResult, 128)
	go pub.StreamEventsStore(ctx, send, results, errCh)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-results:
			}
		}
	}()
	body := make([]byte, 200)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		send <- pub.NewEventStore().SetChannel(ch).SetBody(body)
	}
	for deadline := time.Now().Add(time.Minute); got.Load() < int64(b.N); {
		if time.Now().After(deadline) {
			b.Fatalf("subscriber got %d of %d", got.Load(), b.N)
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkQueryRoundTrip measures one query sent, received by a responder
// in group "inferq", answered and returned, through gRPC and kubemq-go.
func BenchmarkQueryRoundTrip(b *testing.B) {
	srv, client := psBenchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ch = "bench.q"
	resp := client("responder")
	errCh := make(chan error, 1)
	queries, err := resp.SubscribeToQueries(ctx, ch, "inferq", errCh)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case q := <-queries:
				_ = resp.NewResponse().SetRequestId(q.Id).SetResponseTo(q.ResponseTo).SetBody(q.Body).Send(ctx)
			}
		}
	}()
	psBenchSettle(b, srv, ch)
	req := client("requester")
	body := make([]byte, 200)
	rtts := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := req.NewQuery().SetChannel(ch).SetBody(body).SetTimeout(5 * time.Second).Send(ctx); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds())/1000, "p99-ms")
}
