package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/inferq/inferq/gpu"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

// GPUPlan is what GPU discovery and placement decided.
type GPUPlan struct {
	Inventory  gpu.Inventory
	NoGPU      string        // why there is no usable GPU, or ""
	Visible    []runtime.GPU // the GPUs CUDA sees, in CUDA's order
	Note       string        // what CUDA_VISIBLE_DEVICES dropped
	Placements []runtime.Placement
}

// PlanGPUs discovers lib's GPUs, applies CUDA_VISIBLE_DEVICES (value, set)
// and places ms (none: no placement). A discovery error leaves no usable
// GPU, with the error as the reason; a placement error is returned with the
// plan so far.
func PlanGPUs(lib gpu.Library, ms []models.Model, value string, set bool) (GPUPlan, error) {
	var p GPUPlan
	inv, err := gpu.Discover(lib)
	if err != nil {
		// A GPU that NVML cannot describe makes the inventory unusable;
		// CPU models still run, and GPU ones fail naming this reason.
		p.NoGPU = trimNoGPU(err)
		inv.Devices = nil
	}
	p.Inventory = inv
	all := make([]runtime.GPU, len(inv.Devices))
	for i, d := range inv.Devices {
		all[i] = runtime.GPU{Index: d.Index, NVMLIndex: d.Index, UUID: d.UUID, Name: d.Name, MemoryFree: d.MemoryFree, MemoryTotal: d.MemoryTotal}
	}
	if p.NoGPU == "" {
		p.Visible, p.Note = runtime.Visible(all, value, set)
		if len(p.Visible) == 0 {
			p.NoGPU, p.Note = p.Note, ""
		}
	}
	if len(ms) == 0 {
		return p, nil
	}
	p.Placements, err = runtime.Place(ms, p.Visible, p.NoGPU)
	return p, err
}

// WriteTable prints the GPU table to w: driver, then one row per GPU
// (with its CUDA ordinal when cudaCol, and the models placed on it when
// withModels).
func (p GPUPlan) WriteTable(w io.Writer, withModels, cudaCol bool) {
	cuda := map[int]int{} // NVML index -> CUDA ordinal
	for _, g := range p.Visible {
		cuda[g.NVMLIndex] = g.Index
	}
	if p.NoGPU != "" {
		fmt.Fprintf(w, "NVIDIA driver %s, %d GPU(s), none usable: %s\n", p.Inventory.Driver, len(p.Inventory.Devices), p.NoGPU)
	} else {
		fmt.Fprintf(w, "NVIDIA driver %s, %d GPU(s)\n", p.Inventory.Driver, len(p.Inventory.Devices))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"GPU"}
	if cudaCol {
		head = append(head, "CUDA")
	}
	head = append(head, "NAME", "CC", "MEMORY USED / TOTAL", "FREE", "UTIL", "UUID")
	if withModels {
		head = append(head, "MODELS")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, d := range p.Inventory.Devices {
		util := "n/a"
		if d.Utilization >= 0 {
			util = fmt.Sprintf("%.0f%%", d.Utilization*100)
		}
		row := []string{fmt.Sprint(d.Index)}
		ord, visible := cuda[d.Index]
		if cudaCol {
			c := "hidden"
			if visible {
				c = fmt.Sprint(ord)
			}
			row = append(row, c)
		}
		row = append(row, d.Name, d.ComputeCapability, mib(d.MemoryUsed)+" / "+mib(d.MemoryTotal), mib(d.MemoryFree), util, d.UUID)
		if withModels {
			on := "-"
			if visible {
				on = gpuModels(p.Placements, ord)
			}
			row = append(row, on)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

// gpuModels lists the models with sessions on CUDA GPU ord: "resnet18 x2, mlp".
func gpuModels(ps []runtime.Placement, ord int) string {
	var out []string
	for _, p := range ps {
		if n := p.OnGPU(ord); n > 0 {
			out = append(out, countSessions(p.Model, n))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// CPUModels lists the models with sessions on the CPU: "mlp, multitype x2".
func CPUModels(ps []runtime.Placement) string {
	var out []string
	for _, p := range ps {
		n := 0
		for _, d := range p.Devices {
			if d.Kind == runtime.KindCPU {
				n++
			}
		}
		if n > 0 {
			out = append(out, countSessions(p.Model, n))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func countSessions(model string, n int) string {
	if n == 1 {
		return model
	}
	return fmt.Sprintf("%s x%d", model, n)
}

// trimNoGPU drops the sentinel's own prefix so the line reads once.
func trimNoGPU(err error) string {
	s := err.Error()
	prefix := gpu.ErrNoGPU.Error() + ": "
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

func mib(b uint64) string { return fmt.Sprintf("%d MiB", b>>20) }

// StartGPUMetrics registers the GPU sampler's gauges on reg and samples
// NVML until the returned stop is called (it waits for the sampler). With
// no GPU the gauges stay empty and the reason is logged once.
func StartGPUMetrics(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, lib gpu.Library) (stop func(), err error) {
	s, err := gpu.NewSampler(gpu.SamplerConfig{Library: lib, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(s); err != nil {
		return nil, fmt.Errorf("gpu metrics: %w", err)
	}
	// The sampler outlives a cancelled ctx: the drain after SIGTERM still
	// shows GPU metrics.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.Run(ctx)
		switch {
		case errors.Is(err, gpu.ErrNoGPU):
			log.Info("gpu metrics off", "reason", trimNoGPU(err))
		case err != nil:
			log.Warn("gpu metrics stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
