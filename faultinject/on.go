//go:build faultinject

package faultinject

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
)

// Hook, in a binary built with -tags faultinject, makes the process die
// (SIGKILL, no cleanup, like an OOM kill or a segfault in a kernel) when a batch holds an item whose first FP32 input starts with the
// value of INFERQ_FAULT_CRASH_ON. Tests use it to prove that a crash counts
// as an attempt. INFERQ_FAULT_RUN_DELAY (a Go duration) makes every batch
// take that long more, like a model on a GPU: the chaos harness's fleet
// scenario uses it so that its kills land mid-inference.
// INFERQ_FAULT_SIM_LATENCY (BASE,PER_ROW, as bench's --sim-latency) puts
// every instance on a simulated accelerator (batch.Simulate): each run
// takes at least BASE + PER_ROW x rows, one at a time per instance.
func Hook(getenv func(string) string) func(batch.Runner) batch.Runner {
	delay, _ := time.ParseDuration(getenv("INFERQ_FAULT_RUN_DELAY"))
	v, err := strconv.ParseFloat(getenv("INFERQ_FAULT_CRASH_ON"), 32)
	crash := err == nil
	sim, _ := batch.ParseLatency(getenv("INFERQ_FAULT_SIM_LATENCY"))
	return func(r batch.Runner) batch.Runner {
		r = batch.Simulate(r, sim)
		if delay > 0 {
			r = slowRunner{r, delay}
		}
		if crash {
			r = crashRunner{r, float32(v)}
		}
		return r
	}
}

// slowRunner makes every batch take delay more (or until ctx ends).
type slowRunner struct {
	batch.Runner
	delay time.Duration
}

func (s slowRunner) RunBatch(ctx context.Context, items []batch.Item) []batch.ItemResult {
	t := time.NewTimer(s.delay)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	return s.Runner.RunBatch(ctx, items)
}

type crashRunner struct {
	batch.Runner
	marker float32
}

func (c crashRunner) RunBatch(ctx context.Context, items []batch.Item) []batch.ItemResult {
	for _, it := range items {
		if len(it.Inputs) == 0 || it.Inputs[0].DType != tensor.FP32 {
			continue
		}
		if v, err := tensor.Values[float32](it.Inputs[0]); err == nil && len(v) > 0 && v[0] == c.marker {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	return c.Runner.RunBatch(ctx, items)
}
