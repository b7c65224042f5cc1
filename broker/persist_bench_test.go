package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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

// BenchmarkDurableTasks runs inferq's task pattern, as `inferq infer -n`
// against `inferq serve` drives the broker, in memory, with a data dir and,
// when KUBEMQ_ADDRESS is set, on a real KubeMQ: a producer sends tasks in
// batches of 256 on one QueuesUpstream stream, each after the last one's
// answer; two workers, each with its
// own QueuesDownstream stream, poll 64 at a time, store one result per task
// on a reply channel of the events store through one SendEventsStream they
// share (as mq.Conn does), wait for those results to be confirmed, then ack
// the batch without waiting for the ack's answer (as kubemq-go does). An op
// is one task, from its send to its ack; run it with -benchtime=20000x to
// match issue 25's `infer -n 20000`. data-dir-slow-fsync adds 5 ms to each
// fsync of the log, as a disk shared with other writers does.
func BenchmarkDurableTasks(b *testing.B) {
	tgs := benchBrokers(b)
	// A shared disk, where other writers make each fsync wait: the data
	// dir's log takes 5 ms more per fsync.
	opts := broker.Options{DataDir: b.TempDir()}
	broker.SetDiskFault(&opts, func(op, path string) error {
		if op == "sync" && strings.HasPrefix(filepath.Base(path), "wal-") {
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	})
	srv, err := broker.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	if err := srv.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	tgs = append(tgs, &target{Name: "data-dir-slow-fsync", Addr: srv.Addr(), Embedded: srv})
	if addr := os.Getenv("KUBEMQ_ADDRESS"); addr != "" {
		tgs = append(tgs, &target{Name: "kubemq", Addr: addr, Real: true})
	}
	for _, tg := range tgs {
		b.Run(tg.Name, func(b *testing.B) { benchTasks(b, tg) })
	}
}

func benchTasks(b *testing.B, tg *target) {
	const batch, sendBatch, workers = 64, 256, 2 // infer sends 256 tasks per call
	c := rawClient(b, tg.Addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	queue, reply := benchChannel("bench.tasks"), benchChannel("bench.reply")
	results, err := newBenchStore(ctx, c)
	if err != nil {
		b.Fatalf("events store stream: %v", err)
	}
	var (
		wg       sync.WaitGroup
		done     atomic.Int64
		finished = make(chan struct{})
		once     sync.Once
	)
	fail := func(format string, args ...any) {
		if ctx.Err() == nil {
			b.Errorf(format, args...)
		}
		once.Do(func() { close(finished) })
	}
	b.ResetTimer()
	start := time.Now()
	wg.Add(1)
	go func() { // the producer
		defer wg.Done()
		up, err := c.QueuesUpstream(ctx)
		if err != nil {
			fail("upstream: %v", err)
			return
		}
		body := make([]byte, 200)
		for sent := 0; sent < b.N; sent += sendBatch {
			req := &pb.QueuesUpstreamRequest{RequestID: strconv.Itoa(sent)}
			for range sendBatch {
				req.Messages = append(req.Messages, &pb.QueueMessage{ClientID: "bench", Channel: queue, Body: body})
			}
			if err := up.Send(req); err != nil {
				fail("upstream send: %v", err)
				return
			}
			r, err := up.Recv()
			if err != nil || r.IsError || r.Results[0].IsError {
				fail("upstream: %v %v", err, r)
				return
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.QueuesDownstream(ctx)
			if err != nil {
				fail("downstream: %v", err)
				return
			}
			for ctx.Err() == nil {
				if err := d.Send(&pb.QueuesDownstreamRequest{RequestID: "get", ClientID: "bench", RequestTypeData: pb.QueuesDownstreamRequestType_Get,
					Channel: queue, MaxItems: batch, WaitTimeout: 1000}); err != nil {
					fail("worker %d get: %v", w, err)
					return
				}
				r, err := d.Recv()
				for err == nil && r.RequestTypeData != pb.QueuesDownstreamRequestType_Get {
					r, err = d.Recv() // the answer to an ack: kubemq-go does not wait for it
				}
				if err != nil {
					fail("worker %d get: %v", w, err)
					return
				}
				if len(r.Messages) == 0 {
					continue // a timeout (the end of the run) or an error
				}
				waits := make([]<-chan error, len(r.Messages))
				for i, m := range r.Messages {
					waits[i] = results.send(&pb.Event{EventID: "r" + m.MessageID, ClientID: "bench", Channel: reply, Body: m.Body[:100], Store: true})
				}
				for _, ch := range waits {
					if err := <-ch; err != nil {
						fail("worker %d result: %v", w, err)
						return
					}
				}
				if err := d.Send(&pb.QueuesDownstreamRequest{RequestID: "ack", ClientID: "bench", RequestTypeData: pb.QueuesDownstreamRequestType_AckAll,
					RefTransactionId: r.TransactionId}); err != nil {
					fail("worker %d ack: %v", w, err)
					return
				}
				if done.Add(int64(len(r.Messages))) >= int64(b.N) {
					once.Do(func() { close(finished) })
				}
			}
		}()
	}
	<-finished
	b.StopTimer()
	took := time.Since(start)
	cancel()
	wg.Wait()
	b.ReportMetric(float64(done.Load())/took.Seconds(), "tasks/s")
}

// benchStore is one SendEventsStream shared by concurrent senders, its
// results matched to them by event id.
type benchStore struct {
	mu      sync.Mutex
	s       pb.Kubemq_SendEventsStreamClient
	pending map[string]chan error
	err     error
}

func newBenchStore(ctx context.Context, c pb.KubemqClient) (*benchStore, error) {
	s, err := c.SendEventsStream(ctx)
	if err != nil {
		return nil, err
	}
	bs := &benchStore{s: s, pending: map[string]chan error{}}
	go func() {
		for {
			res, err := s.Recv()
			bs.mu.Lock()
			if err != nil {
				bs.err = err
				for id, ch := range bs.pending {
					ch <- err
					delete(bs.pending, id)
				}
				bs.mu.Unlock()
				return
			}
			ch := bs.pending[res.EventID]
			delete(bs.pending, res.EventID)
			bs.mu.Unlock()
			if ch != nil && !res.Sent {
				ch <- fmt.Errorf("event %s: %s", res.EventID, res.Error)
			} else if ch != nil {
				ch <- nil
			}
		}
	}()
	return bs, nil
}

func (bs *benchStore) send(ev *pb.Event) <-chan error {
	ch := make(chan error, 1)
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.err != nil {
		ch <- bs.err
		return ch
	}
	bs.pending[ev.EventID] = ch
	if err := bs.s.Send(ev); err != nil {
		delete(bs.pending, ev.EventID)
		ch <- err
	}
	return ch
}
