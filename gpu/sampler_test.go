package gpu

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var _ prometheus.Collector = (*Sampler)(nil)

// startSampler runs a Sampler over lib until the test ends and waits for
// its first sample.
func startSampler(t *testing.T, lib Library) *Sampler {
	t.Helper()
	s, err := NewSampler(SamplerConfig{Library: lib, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, func() bool { _, ok := s.Devices(); return ok })
	return s
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSamplerMetrics(t *testing.T) {
	m := fakeMachine(t)
	var used0 atomic.Uint64
	d0 := m.Devices[0].(*dgxa100.Device)
	used0.Store(d0.MemoryInfo.Used)
	mem0 := d0.MemoryInfo
	d0.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		m := mem0
		m.Used = used0.Load()
		return m, nvml.SUCCESS
	}
	s := startSampler(t, m)
	reg := prometheus.NewRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 24 {
		t.Fatalf("%d series (%v), want 3 per GPU x 8", n, err)
	}
	want := `
# HELP inferq_gpu_memory_total_bytes GPU memory installed (NVML).
# TYPE inferq_gpu_memory_total_bytes gauge
inferq_gpu_memory_total_bytes{gpu="0"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="1"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="2"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="3"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="4"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="5"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="6"} 4.294967296e+10
inferq_gpu_memory_total_bytes{gpu="7"} 4.294967296e+10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inferq_gpu_memory_total_bytes"); err != nil {
		t.Error(err)
	}
	devs, _ := s.Devices()
	if devs[7].Utilization != 0.7 || devs[2].MemoryUsed != 40960<<20-3<<30 || devs[2].UUID == "" || devs[2].Name == "" {
		t.Errorf("device sample: %+v", devs[7])
	}
	if probs, err := testutil.CollectAndLint(s); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
	// A new sample shows up at the next scrape.
	used0.Store(123)
	waitFor(t, func() bool {
		d, _ := s.Devices()
		return d[0].MemoryUsed == 123
	})
}

func TestSamplerInitFailureCallsNothingElse(t *testing.T) {
	for _, r := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION} {
		// Every other method of the mock is nil and panics when called.
		lib := &mock.Interface{InitFunc: func() nvml.Return { return r }}
		s, err := NewSampler(SamplerConfig{Library: lib})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(context.Background()); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "NVML init failed") {
			t.Errorf("%v: Run = %v", r, err)
		}
		if n := testutil.CollectAndCount(s); n != 0 {
			t.Errorf("%d series without NVML", n)
		}
	}
}

func TestSamplerStartErrors(t *testing.T) {
	tests := attachBreakages()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fakeMachine(t)
			tt.breakIt(m)
			s, _ := NewSampler(SamplerConfig{Library: m})
			err := s.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrNoGPU) != tt.noGPU {
				t.Fatalf("Run = %v, want %q (no GPU: %v)", err, tt.want, tt.noGPU)
			}
			if len(m.ShutdownCalls()) != 1 {
				t.Errorf("Shutdown called %d times after a successful Init", len(m.ShutdownCalls()))
			}
		})
	}
}

func TestSamplerDeviceErrors(t *testing.T) {
	m := fakeMachine(t)
	var memBroken, utilBroken atomic.Bool
	memBroken.Store(true)
	utilBroken.Store(true)
	d1 := m.Devices[1].(*dgxa100.Device)
	d1.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if memBroken.Load() {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return d1.MemoryInfo, nvml.SUCCESS
	}
	m.Devices[3].(*dgxa100.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if utilBroken.Load() {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.Utilization{Gpu: 50}, nvml.SUCCESS
	}
	s := startSampler(t, m)
	// GPU 1 is left out entirely; GPU 3 has no utilization.
	if n := testutil.CollectAndCount(s, "inferq_gpu_memory_used_bytes"); n != 7 {
		t.Errorf("%d memory series, want 7 (GPU 1 left out)", n)
	}
	if n := testutil.CollectAndCount(s, "inferq_gpu_utilization_ratio"); n != 6 {
		t.Errorf("%d utilization series, want 6 (GPU 1 lost, GPU 3 unsupported)", n)
	}
	// Both come back.
	memBroken.Store(false)
	utilBroken.Store(false)
	waitFor(t, func() bool { return testutil.CollectAndCount(s, "inferq_gpu_utilization_ratio") == 8 })
	if n := testutil.CollectAndCount(s); n != 24 {
		t.Errorf("%d series after recovery, want 24", n)
	}
}

func TestSamplerConfig(t *testing.T) {
	if _, err := NewSampler(SamplerConfig{}); err == nil {
		t.Error("nil Library accepted")
	}
	if _, err := NewSampler(SamplerConfig{Library: dgxa100.New(), Interval: -time.Second}); err == nil {
		t.Error("negative interval accepted")
	}
	s, err := NewSampler(SamplerConfig{Library: dgxa100.New()})
	if err != nil || s.cfg.Interval != DefaultSampleInterval {
		t.Errorf("defaults: %v %v", s, err)
	}
}
