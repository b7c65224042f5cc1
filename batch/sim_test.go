package batch_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
)

func TestParseLatency(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want batch.Latency
		err  bool
	}{
		{"40ms,400us", batch.Latency{Base: 40 * time.Millisecond, PerRow: 400 * time.Microsecond}, false},
		{" 1ms , 0s ", batch.Latency{Base: time.Millisecond}, false},
		{"0s,0s", batch.Latency{}, false},
		{"40ms", batch.Latency{}, true},
		{"40ms,x", batch.Latency{}, true},
		{"-1ms,1us", batch.Latency{}, true},
		{"2m,1us", batch.Latency{}, true},
		{"1ms,2s", batch.Latency{}, true},
	} {
		got, err := batch.ParseLatency(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseLatency(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil {
			if back, err := batch.ParseLatency(got.String()); err != nil || back != got {
				t.Errorf("%v does not read back: %v, %v", got, back, err)
			}
		}
	}
	if d := (batch.Latency{Base: 40 * time.Millisecond, PerRow: 400 * time.Microsecond}).For(64); d != 65600*time.Microsecond {
		t.Errorf("For(64) = %v, want 65.6ms", d)
	}
}

// countRunner counts its runs and the runs in progress at once.
type countRunner struct {
	runs, now, most atomic.Int64
}

func (c *countRunner) RunBatch(_ context.Context, items []batch.Item) []batch.ItemResult {
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			break
		}
	}
	c.runs.Add(1)
	res := make([]batch.ItemResult, len(items))
	for i := range res {
		res[i].Outputs = items[i].Inputs
	}
	return res
}

// A simulated run takes at least BASE + PER_ROW x rows, still runs the
// real runner (whose results come back), and runs one at a time.
func TestSimulate(t *testing.T) {
	inner := new(countRunner)
	lat := batch.Latency{Base: 20 * time.Millisecond, PerRow: time.Millisecond}
	r := batch.Simulate(inner, lat)
	item := func(rows int64) batch.Item {
		return batch.Item{Inputs: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{rows, 2}, Data: make([]byte, rows*8)}}}
	}
	start := time.Now()
	res := r.RunBatch(context.Background(), []batch.Item{item(3), item(7)})
	if d := time.Since(start); d < lat.For(10) {
		t.Errorf("a run of 10 rows took %v, want at least %v", d, lat.For(10))
	}
	if len(res) != 2 || len(res[1].Outputs) != 1 || res[1].Outputs[0].Shape[0] != 7 {
		t.Errorf("results %+v: want the inner runner's", res)
	}
	var wg sync.WaitGroup
	start = time.Now()
	for range 3 {
		wg.Go(func() { r.RunBatch(context.Background(), []batch.Item{item(1)}) })
	}
	wg.Wait()
	if d := time.Since(start); d < 3*lat.For(1) {
		t.Errorf("3 concurrent runs took %v, want at least %v: one at a time", d, 3*lat.For(1))
	}
	if inner.runs.Load() != 4 || inner.most.Load() != 1 {
		t.Errorf("inner runner: %d runs, at most %d at once; want 4, 1", inner.runs.Load(), inner.most.Load())
	}
	if batch.Simulate(inner, batch.Latency{}) != batch.Runner(inner) {
		t.Error("a zero latency should leave the runner as it is")
	}
}
