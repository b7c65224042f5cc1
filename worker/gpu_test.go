package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/inferq/inferq/gpu/gputest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestGPUMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	stop, err := StartGPUMetrics(context.Background(), discard(), reg, gputest.TwoGPUs())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	waitGather(t, reg, "inferq_gpu_memory_total_bytes", 2)
	if n, _ := testutil.GatherAndCount(reg, "inferq_gpu_utilization_ratio", "inferq_gpu_memory_used_bytes"); n != 4 {
		t.Errorf("%d series, want 4", n)
	}
	// No GPU: registered, empty, and stop still returns.
	reg2 := prometheus.NewRegistry()
	stop2, err := StartGPUMetrics(context.Background(), discard(), reg2, &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }})
	if err != nil {
		t.Fatal(err)
	}
	stop2()
	if n, _ := testutil.GatherAndCount(reg2); n != 0 {
		t.Errorf("%d series without a GPU", n)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// waitGather polls reg until it holds n series of name, for 5 s at most.
func waitGather(t *testing.T, reg prometheus.Gatherer, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := testutil.GatherAndCount(reg, name)
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d series (%v), want %d", name, got, err, n)
		}
		time.Sleep(time.Millisecond)
	}
}
