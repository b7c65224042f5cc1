package runtime_test

// The dynamic batcher (package batch) over a real session; the batcher's
// own tests, with fake runners, are in batch/.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
)

var _ batch.Runner = (*runtime.Session)(nil)

type countingObserver struct {
	batches, items atomic.Int64
}

func (o *countingObserver) ObserveQueueWait(time.Duration) {}
func (o *countingObserver) ObserveBatch(s batch.Stats) {
	o.batches.Add(1)
	o.items.Add(int64(s.Items))
}

// TestBatcherMLP: the mlp model through the batcher gives each item what
// Session.Run gives it alone; an item the model refuses fails alone.
func TestBatcherMLP(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "mlp", examples.MLP())
	obs := new(countingObserver)
	b, err := batch.New(batch.Config{
		Name: "mlp", Policy: batch.Policy{MaxBatchSize: 8, MaxQueueDelay: 2 * time.Millisecond}, Runners: []batch.Runner{s}, Concurrency: 2, Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	r := rngFor(t)
	items := make([]batch.Item, 24)
	for i := range items {
		items[i] = mlpItem(r, 1+r.IntN(3))
	}
	bad := mlpItem(r, 1)
	bad.Inputs[0].Data = bad.Inputs[0].Data[:8] // same shape, too little data
	items = append(items, bad)

	results := make([]batch.ItemResult, len(items))
	var wg sync.WaitGroup
	for i := range items {
		wg.Go(func() {
			results[i], _ = b.Submit(context.Background(), items[i], i%5 == 0)
		})
	}
	wg.Wait()
	for i, res := range results[:len(results)-1] {
		if res.Err != nil {
			t.Fatalf("item %d: %v", i, res.Err)
		}
		want, err := s.Run(context.Background(), items[i].Inputs)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, fmt.Sprintf("item %d", i), res.Outputs, want)
	}
	if err := results[len(results)-1].Err; !errors.Is(err, batch.ErrInvalidInput) {
		t.Errorf("bad item: %v", err)
	}
	t.Logf("%d items in %d runs", obs.items.Load(), obs.batches.Load())
}
