package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/shard"
	"github.com/inferq/inferq/task"
	"github.com/prometheus/client_golang/prometheus"
)

// Two servers on a queue of four shards split them, each shard polled by
// one server only; every task, sent to the shard its id hashes to, is done
// once. When one server stops, the other takes its shards over at once
// (the leaving heartbeat), and the tasks sent after that are done too.
func TestShardedQueueTwoServers(t *testing.T) {
	forBrokers(t, func(t *testing.T, on brokerOpt) {
		const shards = 4
		sharded := func(cc *consumer.Config) { cc.QueueShards, cc.ShardBeat = shards, 50*time.Millisecond }
		h := newHarness(t, on, withConfig(sharded))
		fake := newFakeBatcher()
		// Its results go through h's store, to h's reply channel.
		second := startPeer(t, h, fake, h.store, sharded)
		servers := []*consumer.Server{h.cons, second.srv}
		// Wait for the two to find each other and split the shards.
		waitFor(t, 20*time.Second, "the servers to split the shards", func() bool {
			return ownedChannels(h.cons) == shards/2 && ownedChannels(second.srv) == shards/2
		})
		send := func(from, n int) {
			for i := from; i < from+n; i++ {
				id := fmt.Sprintf("s%d", i)
				m := h.taskMsg(id, testModel, 1, float32(i))
				m.Channel = shard.Channel(h.q, shard.Pick(id, shards))
				h.sendMsg(m)
			}
		}
		send(0, 200)
		for i := range 200 {
			if r := h.record(fmt.Sprintf("s%d", i)); r.Status != task.StatusSuccess {
				t.Fatalf("task s%d: %s %s", i, r.Status, r.Error)
			}
		}
		// Each shard was polled by one server.
		for i, ch := range shard.Channels(h.q, shards) {
			took := 0
			for _, srv := range servers {
				if srv.PollerStats()[ch].Messages > 0 {
					took++
				}
			}
			if took != 1 {
				t.Errorf("shard %d (%s) polled by %d servers, want 1", i, ch, took)
			}
		}
		if n := h.fake.Total.Load() + fake.Total.Load(); n != 200 {
			t.Errorf("%d runs for 200 tasks", n)
		}
		second.stop()
		waitFor(t, 10*time.Second, "the first server to own every shard", func() bool { return ownedChannels(h.cons) == shards })
		send(200, 40)
		for i := 200; i < 240; i++ {
			if r := h.record(fmt.Sprintf("s%d", i)); r.Status != task.StatusSuccess {
				t.Fatalf("task s%d: %s %s", i, r.Status, r.Error)
			}
		}
	})
}

// ownedChannels counts the channels srv polls now.
func ownedChannels(srv *consumer.Server) int { return len(srv.PollingChannels()) }

// peer is a second server of a harness's model and queue.
type peer struct {
	srv  *consumer.Server
	stop func()
}

// startPeer starts a second server of h's model and queue with batcher b
// and store, configured by configure (when set).
func startPeer(t *testing.T, h *harness, b consumer.Batcher, store consumer.Store, configure func(*consumer.Config)) *peer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := mq.Dial(ctx, mq.Config{Address: h.addr, ClientID: "inferq-second-" + strings.ReplaceAll(t.Name(), "/", "-")})
	if err != nil {
		t.Fatal(err)
	}
	met, err := consumer.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := consumer.Config{Broker: consumer.Conn(conn), Store: store, Metrics: met,
		Models: []consumer.Model{{Config: h.cfg.model, Info: fakeInfo, Batcher: b}}, Writers: 4, IntakeWorkers: 1}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx); conn.Close() }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return &peer{srv: srv, stop: stop}
}

// A server is not ready before its pollers answer the broker: before Run,
// with a queue alone or sharded. Before, a queue whose poller had not
// started yet counted as answering, and inferq bench's query probe went
// out before the query subscription was live.
func TestNotReadyBeforeThePollersAnswer(t *testing.T) {
	h := newHarness(t)
	for _, shards := range []int{1, 3} {
		met, err := consumer.NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := consumer.New(consumer.Config{Broker: consumer.Conn(h.prod), Store: nopStore{}, Metrics: met, QueueShards: shards,
			Models: []consumer.Model{{Config: h.cfg.model, Info: fakeInfo, Batcher: newFakeBatcher()}}})
		if err != nil {
			t.Fatal(err)
		}
		if srv.Ready() {
			t.Errorf("%d shard(s): ready before Run", shards)
		}
	}
}

// fakeRunner runs a fakeBatcher's items as one batch, for a batch.Batcher.
type fakeRunner struct{ f *fakeBatcher }

func (r fakeRunner) RunBatch(_ context.Context, items []batch.Item) []batch.ItemResult {
	res := make([]batch.ItemResult, len(items))
	for i := range items {
		res[i] = r.f.Run(items[i])
	}
	return res
}

// simBatcher is a dynamic batcher over f on a simulated accelerator of
// latency lat (batch.Simulate), running until the test ends.
func simBatcher(t *testing.T, f *fakeBatcher, lat batch.Latency) *batch.Batcher {
	t.Helper()
	b, err := batch.New(batch.Config{Name: testModel, Policy: batch.Policy{MaxBatchSize: 8, MaxQueueDelay: time.Millisecond},
		Runners: []batch.Runner{batch.Simulate(fakeRunner{f}, lat)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

// Two replicas on a sharded queue whose producers send to the queue's own
// name (shard 0), as the Python adapter and kubemq-js do: the owner of
// shard 0 moves its polls to the shards with room, so both replicas serve
// the load (each at least a quarter of it), every task once, none lost.
// Before, shard 0's owner ran them all and the other replica idled.
func TestPlainQueueFleet(t *testing.T) {
	forBrokers(t, func(t *testing.T, on brokerOpt) {
		const shards, tasks = 4, 600
		lat := batch.Latency{Base: 5 * time.Millisecond, PerRow: 500 * time.Microsecond}
		firstRuns, secondRuns := newFakeBatcher(), newFakeBatcher()
		sharded := func(cc *consumer.Config) { cc.QueueShards, cc.ShardBeat = shards, 50*time.Millisecond }
		h := newHarness(t, on, withConfig(func(cc *consumer.Config) {
			sharded(cc)
			cc.Models[0].Batcher = simBatcher(t, firstRuns, lat)
		}))
		second := startPeer(t, h, simBatcher(t, secondRuns, lat), h.store, sharded)
		waitFor(t, 20*time.Second, "the servers to split the shards", func() bool {
			return ownedChannels(h.cons) == shards/2 && ownedChannels(second.srv) == shards/2
		})
		msgs := make([]mq.OutMessage, tasks)
		for i := range msgs {
			msgs[i] = h.taskMsg(fmt.Sprintf("p%d", i), testModel, 1, float32(i)) // to h.q: shard 0
		}
		h.sendMsg(msgs...)
		for i := range tasks {
			if r := h.record(fmt.Sprintf("p%d", i)); r.Status != task.StatusSuccess {
				t.Fatalf("task p%d: %s %s", i, r.Status, r.Error)
			}
		}
		first, other := firstRuns.Total.Load(), secondRuns.Total.Load()
		t.Logf("runs: %d and %d of %d tasks", first, other, tasks)
		if first+other != tasks {
			t.Errorf("%d + %d runs for %d tasks: some ran twice or not at all", first, other, tasks)
		}
		if first < tasks/4 || other < tasks/4 {
			t.Errorf("runs %d and %d: want each replica to serve at least a quarter of %d", first, other, tasks)
		}
		for i := range tasks {
			if n := firstRuns.RunsOf(float32(i)) + secondRuns.RunsOf(float32(i)); n != 1 {
				t.Errorf("task p%d ran %d times", i, n)
			}
		}
	})
}
