package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

// The batcher benchmarks report, per item: ns/op (one op is one item),
// items/s and fill (mean items per run).
//
//	go test -run '^$' -bench Batcher -benchtime 20000x ./runtime/
//
// BenchmarkBatcherOverhead runs a runner that returns at once, so ns/op is
// the batcher's own cost per item: Submit (synchronous, the query path) or
// Enqueue with an Owner that recycles the request (asynchronous, the
// consumer's path), from 1 or 8 submitters.
//
// BenchmarkBatcherMLP runs the mlp model on one session (one intra-op
// thread): impl=direct calls Session.RunBatch with one item per call from
// each submitter (no batching) or with 8 items from one; impl=batcher sends
// one-row items through Submit, MaxBatchSize 32, one run at a time; with
// MaxQueueDelay 0 batches fill only while a run is in flight; with
// preferred size 8 and 8 submitters a batch runs as soon as all 8 are in.

type noopRunner struct{}

func (noopRunner) RunBatch(_ context.Context, items []batch.Item) []batch.ItemResult {
	return make([]batch.ItemResult, len(items))
}

type fillObserver struct{ runs, items atomic.Int64 }

func (o *fillObserver) ObserveQueueWait(time.Duration) {}
func (o *fillObserver) ObserveBatch(s batch.Stats) {
	o.runs.Add(1)
	o.items.Add(int64(s.Items))
}

func (o *fillObserver) report(b *testing.B) {
	if n := o.runs.Load(); n > 0 {
		b.ReportMetric(float64(o.items.Load())/float64(n), "fill")
	}
}

func reportRate(b *testing.B, items int) {
	b.ReportMetric(float64(items)/b.Elapsed().Seconds(), "items/s")
}

// benchBatcher starts a batcher for b and stops it at cleanup.
func benchBatcher(b *testing.B, cfg batch.Config) *batch.Batcher {
	bt, err := batch.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bt.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	return bt
}

// submitters runs b.N calls of one(i) spread over k goroutines.
func submitters(b *testing.B, k int, one func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range k {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				one(int(i))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
}

// recycler is the Owner of a benchmark's requests: a finished request goes
// back to its submitter's free list.
type recycler struct {
	free    chan *batch.Request
	pending *sync.WaitGroup
}

func (*recycler) RunStarting(*batch.Request)  {}
func (o *recycler) Finished(r *batch.Request) { o.free <- r; o.pending.Done() }

func BenchmarkBatcherOverhead(b *testing.B) {
	item := batch.Item{Inputs: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}}}}
	for _, k := range []int{1, 8} {
		b.Run(fmt.Sprintf("api=submit/submitters=%d", k), func(b *testing.B) {
			obs := new(fillObserver)
			bt := benchBatcher(b, batch.Config{Policy: batch.Policy{MaxBatchSize: 32}, Runners: []batch.Runner{noopRunner{}}, Observer: obs})
			ctx := context.Background()
			b.ReportAllocs()
			submitters(b, k, func(int) {
				if _, err := bt.Submit(ctx, item, false); err != nil {
					b.Error(err)
				}
			})
			reportRate(b, b.N)
			obs.report(b)
		})
		b.Run(fmt.Sprintf("api=enqueue/submitters=%d", k), func(b *testing.B) {
			obs := new(fillObserver)
			bt := benchBatcher(b, batch.Config{Policy: batch.Policy{MaxBatchSize: 32}, Runners: []batch.Runner{noopRunner{}}, Observer: obs})
			ctx := context.Background()
			// Each submitter recycles its own requests: nothing allocated
			// per item.
			const perSubmitter = 64
			free := make([]chan *batch.Request, k)
			var pending sync.WaitGroup
			for s := range free {
				free[s] = make(chan *batch.Request, perSubmitter)
				for range perSubmitter {
					free[s] <- &batch.Request{Item: item, Owner: &recycler{free: free[s], pending: &pending}}
				}
			}
			var who atomic.Int64
			b.ReportAllocs()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range k {
				wg.Go(func() {
					mine := free[who.Add(1)-1]
					for next.Add(1) <= int64(b.N) {
						r := <-mine
						pending.Add(1)
						if err := bt.Enqueue(ctx, r); err != nil {
							b.Error(err)
							pending.Done()
						}
					}
				})
			}
			wg.Wait()
			pending.Wait()
			b.StopTimer()
			reportRate(b, b.N)
			obs.report(b)
		})
	}
}

func BenchmarkBatcherMLP(b *testing.B) {
	env := newEnv(b)
	s, err := runtime.NewSession(env, runtime.SessionConfig{Name: "mlp", Model: examples.MLP(), IntraOpThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if err := s.Warmup(ctx, 32); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	items := make([]batch.Item, 256)
	for i := range items {
		items[i] = mlpItem(r, 1)
	}

	for _, k := range []int{1, 8} {
		b.Run(fmt.Sprintf("impl=direct/submitters=%d/batch=1", k), func(b *testing.B) {
			submitters(b, k, func(i int) {
				if res := s.RunBatch(ctx, items[i%len(items):i%len(items)+1]); res[0].Err != nil {
					b.Error(res[0].Err)
				}
			})
			reportRate(b, b.N)
			b.ReportMetric(1, "fill")
		})
	}
	b.Run("impl=direct/submitters=1/batch=8", func(b *testing.B) {
		n := 0
		for b.Loop() {
			at := n % (len(items) - 8)
			for _, res := range s.RunBatch(ctx, items[at:at+8]) {
				if res.Err != nil {
					b.Fatal(res.Err)
				}
			}
			n += 8
		}
		reportRate(b, n)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/item")
		b.ReportMetric(8, "fill")
	})
	for _, c := range []struct {
		k         int
		delay     time.Duration
		preferred int
	}{{1, 0, 0}, {8, 0, 0}, {8, time.Millisecond, 8}} {
		name := fmt.Sprintf("impl=batcher/submitters=%d/delay=%s", c.k, c.delay)
		p := batch.Policy{MaxBatchSize: 32, MaxQueueDelay: c.delay}
		if c.preferred > 0 {
			name += fmt.Sprintf("/preferred=%d", c.preferred)
			p.PreferredBatchSizes = []int{c.preferred}
		}
		b.Run(name, func(b *testing.B) {
			k := c.k
			obs := new(fillObserver)
			bt := benchBatcher(b, batch.Config{Name: "mlp", Policy: p, Runners: []batch.Runner{s}, Observer: obs})
			submitters(b, k, func(i int) {
				if _, err := bt.Submit(ctx, items[i%len(items)], false); err != nil {
					b.Error(err)
				}
			})
			reportRate(b, b.N)
			obs.report(b)
		})
	}
}
