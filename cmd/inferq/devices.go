package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/inferq/inferq/gpu"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

func runDevices(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("devices", "devices [--config FILE]", `List the GPUs that NVML reports: index, name, compute capability, memory
and utilization. On a machine without an NVIDIA driver (or a container
started without the NVIDIA runtime) it prints one line saying why and exits 0.

With --config it also shows where inferq serve would place each model's
sessions (CUDA_VISIBLE_DEVICES applied), and fails as serve would when a
model cannot be placed.`)
	var cfgPath string
	fs.StringVarP(&cfgPath, "config", "c", "", "YAML config file whose models to place")
	if err := parse(fs, args); err != nil {
		return err
	}
	var ms []models.Model
	if cfgPath != "" {
		c, err := models.Load(cfgPath)
		if err != nil {
			return err
		}
		ms = c.Models
	}
	v, set := a.cudaVisibleDevices()
	return a.showDevices(nvml.New(), ms, v, set)
}

// cudaVisibleDevices returns CUDA_VISIBLE_DEVICES and whether it is set
// (set and empty hides every GPU from CUDA).
func (a *app) cudaVisibleDevices() (string, bool) {
	if v := a.getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		return v, true
	}
	_, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	return "", set
}

// printDevices prints the GPU table alone.
func (a *app) printDevices(lib gpu.Library) error { return a.showDevices(lib, nil, "", false) }

// gpuPlan is what discovery and placement decided.
type gpuPlan struct {
	inv        gpu.Inventory
	noGPU      string        // why there is no usable GPU, or ""
	visible    []runtime.GPU // the GPUs CUDA sees, in CUDA's order
	note       string        // what CUDA_VISIBLE_DEVICES dropped
	placements []runtime.Placement
}

// planGPUs discovers lib's GPUs, applies CUDA_VISIBLE_DEVICES (value, set)
// and places ms (none: no placement). A discovery error leaves no usable
// GPU, with the error as the reason; a placement error is returned with the
// plan so far.
func planGPUs(lib gpu.Library, ms []models.Model, value string, set bool) (gpuPlan, error) {
	var p gpuPlan
	inv, err := gpu.Discover(lib)
	if err != nil {
		// A GPU that NVML cannot describe makes the inventory unusable;
		// CPU models still run, and GPU ones fail naming this reason.
		p.noGPU = trimNoGPU(err)
		inv.Devices = nil
	}
	p.inv = inv
	all := make([]runtime.GPU, len(inv.Devices))
	for i, d := range inv.Devices {
		all[i] = runtime.GPU{Index: d.Index, NVMLIndex: d.Index, UUID: d.UUID, Name: d.Name, MemoryFree: d.MemoryFree, MemoryTotal: d.MemoryTotal}
	}
	if p.noGPU == "" {
		p.visible, p.note = runtime.Visible(all, value, set)
		if len(p.visible) == 0 {
			p.noGPU, p.note = p.note, ""
		}
	}
	if len(ms) == 0 {
		return p, nil
	}
	p.placements, err = runtime.Place(ms, p.visible, p.noGPU)
	return p, err
}

// showDevices prints the GPUs and, when ms is not empty, where their
// sessions would go.
func (a *app) showDevices(lib gpu.Library, ms []models.Model, value string, set bool) error {
	p, err := planGPUs(lib, ms, value, set)
	if err != nil && p.noGPU == "" && len(p.inv.Devices) == 0 {
		return err
	}
	placeErr := err
	if len(p.inv.Devices) == 0 {
		fmt.Fprintf(a.stdout, "no GPU: %s\n", p.noGPU)
	} else {
		a.printGPUTable(p, ms != nil && placeErr == nil, set)
	}
	if placeErr != nil {
		return fmt.Errorf("placement: %w", placeErr)
	}
	if onCPU := cpuModels(p.placements); onCPU != "" {
		fmt.Fprintf(a.stdout, "cpu: %s\n", onCPU)
	}
	for _, pl := range p.placements {
		if pl.Note != "" {
			fmt.Fprintf(a.stdout, "note: model %s: %s\n", pl.Model, pl.Note)
		}
	}
	if p.note != "" {
		fmt.Fprintf(a.stdout, "note: %s\n", p.note)
	}
	return nil
}

func (a *app) printGPUTable(p gpuPlan, withModels, cudaCol bool) {
	cuda := map[int]int{} // NVML index -> CUDA ordinal
	for _, g := range p.visible {
		cuda[g.NVMLIndex] = g.Index
	}
	if p.noGPU != "" {
		fmt.Fprintf(a.stdout, "NVIDIA driver %s, %d GPU(s), none usable: %s\n", p.inv.Driver, len(p.inv.Devices), p.noGPU)
	} else {
		fmt.Fprintf(a.stdout, "NVIDIA driver %s, %d GPU(s)\n", p.inv.Driver, len(p.inv.Devices))
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	head := []string{"GPU"}
	if cudaCol {
		head = append(head, "CUDA")
	}
	head = append(head, "NAME", "CC", "MEMORY USED / TOTAL", "FREE", "UTIL", "UUID")
	if withModels {
		head = append(head, "MODELS")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, d := range p.inv.Devices {
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
				on = gpuModels(p.placements, ord)
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

func cpuModels(ps []runtime.Placement) string {
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

// startGPUMetrics registers the GPU sampler's gauges on reg and samples
// NVML until the returned stop is called (it waits for the sampler). With
// no GPU the gauges stay empty and the reason is logged once.
func startGPUMetrics(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, lib gpu.Library) (stop func(), err error) {
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
