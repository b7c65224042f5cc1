package main

import (
	"context"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/inferq/inferq/gpu"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/worker"
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

// showDevices prints the GPUs and, when ms is not empty, where their
// sessions would go.
func (a *app) showDevices(lib gpu.Library, ms []models.Model, value string, set bool) error {
	p, err := worker.PlanGPUs(lib, ms, value, set)
	if err != nil && p.NoGPU == "" && len(p.Inventory.Devices) == 0 {
		return err
	}
	placeErr := err
	if len(p.Inventory.Devices) == 0 {
		fmt.Fprintf(a.stdout, "no GPU: %s\n", p.NoGPU)
	} else {
		p.WriteTable(a.stdout, ms != nil && placeErr == nil, set)
	}
	if placeErr != nil {
		return fmt.Errorf("placement: %w", placeErr)
	}
	if onCPU := worker.CPUModels(p.Placements); onCPU != "" {
		fmt.Fprintf(a.stdout, "cpu: %s\n", onCPU)
	}
	for _, pl := range p.Placements {
		if pl.Note != "" {
			fmt.Fprintf(a.stdout, "note: model %s: %s\n", pl.Model, pl.Note)
		}
	}
	if p.Note != "" {
		fmt.Fprintf(a.stdout, "note: %s\n", p.Note)
	}
	return nil
}
