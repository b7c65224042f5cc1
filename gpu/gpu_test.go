package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

var _ Library = (*dgxa100.Server)(nil)

// fakeMachine is an 8-GPU A100 server with free memory and utilization set
// per device.
func fakeMachine(t *testing.T) *dgxa100.Server {
	t.Helper()
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo.Free = uint64(i+1) << 30
		dev.MemoryInfo.Used = dev.MemoryInfo.Total - dev.MemoryInfo.Free
		util := uint32(10 * i)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: util}, nvml.SUCCESS
		}
	}
	return s
}

func TestDiscoverFakeMachine(t *testing.T) {
	s := fakeMachine(t)
	inv, err := Discover(s)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if inv.Driver != "550.54.15" || len(inv.Devices) != 8 {
		t.Fatalf("inventory = driver %q, %d devices", inv.Driver, len(inv.Devices))
	}
	for i, d := range inv.Devices {
		if d.Index != i || d.UUID == "" || !strings.Contains(d.Name, "A100") || d.ComputeCapability != "8.0" {
			t.Errorf("device %d identity = %+v", i, d)
		}
		if d.MemoryFree != uint64(i+1)<<30 || d.MemoryTotal != 40960<<20 || d.MemoryUsed+d.MemoryFree != d.MemoryTotal {
			t.Errorf("device %d memory = total %d free %d used %d", i, d.MemoryTotal, d.MemoryFree, d.MemoryUsed)
		}
		if want := float64(10*i) / 100; d.Utilization != want {
			t.Errorf("device %d utilization = %v, want %v", i, d.Utilization, want)
		}
	}
	if len(s.ShutdownCalls()) != 1 {
		t.Errorf("Shutdown called %d times, want 1", len(s.ShutdownCalls()))
	}
}

func TestDiscoverInitFailureCallsNothingElse(t *testing.T) {
	for _, r := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION, nvml.ERROR_UNKNOWN} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return r }}
		// Every other method of the mock is nil and panics when called.
		_, err := Discover(lib)
		if !errors.Is(err, ErrNoGPU) {
			t.Errorf("%v: error %v does not wrap ErrNoGPU", r, err)
		}
		if !strings.Contains(err.Error(), "NVML init failed") {
			t.Errorf("%v: error %q does not say why", r, err)
		}
	}
}

// breakage is one NVML failure injected into a fake machine, the text the
// error must carry, and whether it means "no GPU".
type breakage struct {
	name    string
	breakIt func(s *dgxa100.Server)
	noGPU   bool
	want    string
}

// attachBreakages fail each call attach makes (shared by Discover and the
// Sampler's start).
func attachBreakages() []breakage {
	return []breakage{
		{"count fails", func(s *dgxa100.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, true, "device count"},
		{"no devices", func(s *dgxa100.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
		}, true, "NVML reports no device"},
		{"handle fails", func(s *dgxa100.Server) {
			s.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
		}, false, "device 0 handle"},
		{"uuid fails", func(s *dgxa100.Server) {
			s.Devices[3].(*dgxa100.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}, false, "device 3 uuid"},
		{"name fails", func(s *dgxa100.Server) {
			s.Devices[6].(*dgxa100.Device).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}, false, "device 6 name"},
	}
}

func TestDiscoverErrors(t *testing.T) {
	tests := append(attachBreakages(), breakage{"memory fails", func(s *dgxa100.Server) {
		s.Devices[1].(*dgxa100.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_UNKNOWN }
	}, false, "device 1 memory"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeMachine(t)
			tt.breakIt(s)
			_, err := Discover(s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
			if errors.Is(err, ErrNoGPU) != tt.noGPU {
				t.Errorf("errors.Is(ErrNoGPU) = %v, want %v", !tt.noGPU, tt.noGPU)
			}
			if len(s.ShutdownCalls()) != 1 {
				t.Errorf("Shutdown called %d times after a successful Init", len(s.ShutdownCalls()))
			}
		})
	}
}

func TestDiscoverOptionalFieldsMissing(t *testing.T) {
	s := fakeMachine(t)
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
		dev.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	}
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	inv, err := Discover(s)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for _, d := range inv.Devices {
		if d.Utilization != -1 || d.ComputeCapability != "" {
			t.Errorf("unsupported fields should read -1 and empty: %+v", d)
		}
	}
}

func TestErrorSuccessIsNil(t *testing.T) {
	if err := Error("x", nvml.SUCCESS); err != nil {
		t.Fatalf("Error(SUCCESS) = %v", err)
	}
	if err := Error("x", nvml.ERROR_UNKNOWN); err == nil || !strings.HasPrefix(err.Error(), "gpu: x: ") {
		t.Fatalf("Error(ERROR_UNKNOWN) = %v", err)
	}
}
