package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// twoGPUs is a fake 2-GPU node: GPU 0 with 30 GiB free, GPU 1 with 12 GiB.
func twoGPUs(t *testing.T) *dgxa100.Server {
	t.Helper()
	s := dgxa100.NewWithGPUs(gpus.Multiple(2, gpus.A100_SXM4_40GB)...)
	for i, free := range []uint64{30 << 30, 12 << 30} {
		d := s.Devices[i].(*dgxa100.Device)
		d.MemoryInfo.Free, d.MemoryInfo.Used = free, d.MemoryInfo.Total-free
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 + i)}, nvml.SUCCESS
		}
	}
	return s
}

func TestGPUMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	stop, err := StartGPUMetrics(context.Background(), discard(), reg, twoGPUs(t))
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
