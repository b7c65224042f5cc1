// Package gpu discovers the CUDA devices NVML reports and samples their
// memory and utilization.
//
// NVML is reached only through the small Library interface declared here;
// nvml.New() satisfies it in production and go-nvml's mock servers in tests.
// NVML's nvml.Return codes are turned into errors at this boundary. A failed
// Init (no library, no driver) is a normal outcome, reported as "no GPU"
// with its reason, and no device function is ever called after it: doing so
// kills the process.
package gpu

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Library is the part of NVML this package calls. Its methods follow
// go-nvml; nvml.New() and the mock servers in go-nvml/pkg/nvml/mock satisfy it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// ErrNoGPU wraps every reason discovery found no usable GPU.
var ErrNoGPU = errors.New("gpu: no GPU")

// Device is one GPU as NVML reported it at discovery or at the last sample.
type Device struct {
	Index             int
	UUID              string
	Name              string
	ComputeCapability string // "9.0"
	MemoryTotal       uint64 // bytes
	MemoryFree        uint64 // bytes
	MemoryUsed        uint64 // bytes
	// Utilization is the GPU's busy ratio (0..1) over NVML's last sample
	// period; negative when NVML does not report it.
	Utilization float64
}

// LogValue lets slog print a device compactly.
func (d Device) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("index", d.Index), slog.String("name", d.Name), slog.String("uuid", d.UUID),
		slog.Uint64("memory_free_bytes", d.MemoryFree), slog.Uint64("memory_total_bytes", d.MemoryTotal),
	)
}

// Inventory is the result of a discovery.
type Inventory struct {
	Driver  string
	Devices []Device
}

// Error converts an NVML return code into an error; nvml.SUCCESS is nil.
func Error(op string, r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("gpu: %s: %s", op, nvml.ErrorString(r))
}

// Discover initialises NVML, lists every device with its memory and
// utilization, and shuts NVML down again. When NVML cannot be initialised
// or reports no device, the error wraps ErrNoGPU and says why. A device
// whose identity cannot be read is an error; utilization that NVML does not
// support is reported as -1.
func Discover(lib Library) (Inventory, error) {
	driver, handles, devs, err := attach(lib)
	if err != nil {
		return Inventory{Driver: driver}, err
	}
	defer lib.Shutdown()
	for i := range devs {
		if err := sample(&devs[i], handles[i]); err != nil {
			return Inventory{Driver: driver}, err
		}
	}
	return Inventory{Driver: driver, Devices: devs}, nil
}

// attach initialises NVML and reads every device's handle and identity
// (index, UUID, name, compute capability). On success the caller owns the
// NVML session and must call lib.Shutdown; on error it is already shut down
// (or never started: nothing may be called after a failed Init). The error
// wraps ErrNoGPU when NVML cannot start or reports no device.
func attach(lib Library) (driver string, handles []nvml.Device, devs []Device, err error) {
	if r := lib.Init(); r != nvml.SUCCESS {
		return "", nil, nil, fmt.Errorf("%w: NVML init failed: %s", ErrNoGPU, initReason(r))
	}
	defer func() {
		if err != nil {
			lib.Shutdown()
		}
	}()
	if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
		driver = v
	}
	n, r := lib.DeviceGetCount()
	if err := Error("device count", r); err != nil {
		return driver, nil, nil, fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	if n == 0 {
		return driver, nil, nil, fmt.Errorf("%w: NVML reports no device (driver %s)", ErrNoGPU, driver)
	}
	handles, devs = make([]nvml.Device, n), make([]Device, n)
	for i := range n {
		h, r := lib.DeviceGetHandleByIndex(i)
		if err := Error(fmt.Sprintf("device %d handle", i), r); err != nil {
			return driver, nil, nil, err
		}
		d := Device{Index: i, Utilization: -1}
		if d.UUID, r = h.GetUUID(); r != nvml.SUCCESS {
			return driver, nil, nil, Error(fmt.Sprintf("device %d uuid", i), r)
		}
		if d.Name, r = h.GetName(); r != nvml.SUCCESS {
			return driver, nil, nil, Error(fmt.Sprintf("device %d name", i), r)
		}
		if major, minor, r := h.GetCudaComputeCapability(); r == nvml.SUCCESS {
			d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		}
		handles[i], devs[i] = h, d
	}
	return driver, handles, devs, nil
}

// sample refreshes d's memory and utilization from h.
func sample(d *Device, h nvml.Device) error {
	mem, r := h.GetMemoryInfo()
	if err := Error(fmt.Sprintf("device %d memory", d.Index), r); err != nil {
		return err
	}
	d.MemoryTotal, d.MemoryFree, d.MemoryUsed = mem.Total, mem.Free, mem.Used
	d.Utilization = -1
	if u, r := h.GetUtilizationRates(); r == nvml.SUCCESS {
		d.Utilization = float64(u.Gpu) / 100
	}
	return nil
}

// initReason explains a failed nvml.Init in words a user can act on.
func initReason(r nvml.Return) string {
	switch r {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so not found (no NVIDIA driver on this machine, or the container was started without the NVIDIA runtime)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA driver is not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to use the NVIDIA driver"
	}
	return nvml.ErrorString(r)
}
