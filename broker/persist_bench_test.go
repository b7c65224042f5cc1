package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	qs "github.com/kubemq-io/kubemq-go/queues_stream"
	pb "github.com/kubemq-io/protobuf/go"
)

// benchBrokers are the embedded broker in memory and with a data dir.
func benchBrokers(b *testing.B) []*target {
	b.Helper()
	var out []*target
	for _, name := range []string{"memory", "data-dir"} {
		opts := broker.Options{}
		if name == "data-dir" {
			opts.DataDir = b.TempDir()
		}
		srv, err := broker.Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Close() })
		if err := srv.Start("127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		out = append(out, &target{Name: name, Addr: srv.Addr(), Embedded: srv})
	}
	return out
}

// BenchmarkDataDirSendPollAck: one kubemq-go client sends a batch of 100
// 200-byte messages, polls them and acks them all, in memory and with a
// data dir (where the send and the ack each wait for an fsync).
func BenchmarkDataDirSendPollAck(b *testing.B) {
	for _, tg := range benchBrokers(b) {
		b.Run(tg.Name, func(b *testing.B) {
			c, ctx := benchStream(b, tg)
			ch := benchChannel("bench.persist")
			msgs := benchBatch(ch, 100)
			benchSend(b, ctx, c, msgs[:1]) // open the streams (trap 3)
			if _, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 1, WaitTimeout: 1000, AutoAck: true}); err != nil {
				b.Fatalf("warm poll: %v", err)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				for _, m := range msgs {
					m.MessageID = ""
				}
				benchSend(b, ctx, c, msgs)
				r, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 100, WaitTimeout: 1000})
				if err != nil || len(r.Messages) != 100 {
					b.Fatalf("poll: %v (%d messages)", err, len(r.Messages))
				}
				if err := r.AckAll(); err != nil {
					b.Fatalf("ack all: %v", err)
				}
			}
			b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkDataDirSendPollAckSingles: 16 concurrent clients (raw gRPC)
// each send one message, poll it and ack it, over and over: with a data dir
// their fsyncs are shared (group commit).
func BenchmarkDataDirSendPollAckSingles(b *testing.B) {
	for _, tg := range benchBrokers(b) {
		b.Run(tg.Name, func(b *testing.B) {
			c := rawClient(b, tg.Addr)
			var id atomic.Int64
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pbb *testing.PB) {
				ch := fmt.Sprintf("bench.single.%d", id.Add(1))
				d := openDownstream(b, c)
				body := make([]byte, 200)
				for pbb.Next() {
					res, err := c.SendQueueMessage(context.Background(), &pb.QueueMessage{ClientID: "bench", Channel: ch, Body: body})
					if err != nil || res.IsError {
						b.Errorf("send: %v %v", err, res)
						return
					}
					r := d.get(ch, 1, 1000)
					if len(r.Messages) != 1 {
						b.Errorf("poll: %v", r)
						return
					}
					d.send(&pb.QueuesDownstreamRequest{RequestID: "a", RequestTypeData: pb.QueuesDownstreamRequestType_AckAll, RefTransactionId: r.TransactionId})
					d.recv()
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// TestEventsStoreMillionEventsRSS (INFERQ_BROKER_RSS_TEST=1; it takes a
// while) sends 1M 100-byte events to one events store channel with the
// default bounds, from 64 goroutines, in memory and with a data dir, and
// logs the process's RSS: the bounds keep the newest 100000.
func TestEventsStoreMillionEventsRSS(t *testing.T) {
	if os.Getenv("INFERQ_BROKER_RSS_TEST") != "1" {
		t.Skip("set INFERQ_BROKER_RSS_TEST=1 to measure")
	}
	for _, tg := range []string{"memory", "data-dir"} {
		t.Run(tg, func(t *testing.T) {
			opts := broker.Options{}
			if tg == "data-dir" {
				opts.DataDir = t.TempDir()
			}
			srv, err := broker.Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			const total, senders = 1_000_000, 64
			start := time.Now()
			var wg sync.WaitGroup
			body := make([]byte, 100)
			for s := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range total / senders {
						if _, err := srv.SendEvent(context.Background(), &pb.Event{ClientID: "c", Channel: "rss", Body: body, Store: true}); err != nil {
							t.Errorf("sender %d: %v", s, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			took := time.Since(start)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			rss, hwm := procStatus(t, "VmRSS"), procStatus(t, "VmHWM")
			var du int64
			if opts.DataDir != "" {
				_ = filepath.Walk(opts.DataDir, func(_ string, fi os.FileInfo, _ error) error {
					if fi != nil && !fi.IsDir() {
						du += fi.Size()
					}
					return nil
				})
			}
			t.Logf("%s: 1M events in %v (%.0f events/s); RSS %s, peak %s, live heap %d MiB; data dir %d MiB",
				tg, took.Round(time.Millisecond), float64(total)/took.Seconds(), rss, hwm, ms.HeapAlloc>>20, du>>20)
		})
	}
}

// procStatus reads one field of /proc/self/status.
func procStatus(t *testing.T, field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
