package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/inferq/inferq/gpu"
)

func runDevices(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("devices", "devices", `List the GPUs that NVML reports: index, name, compute capability, memory
and utilization. On a machine without an NVIDIA driver (or a container
started without the NVIDIA runtime) it prints one line saying why and exits 0.`)
	if err := parse(fs, args); err != nil {
		return err
	}
	return a.printDevices(nvml.New())
}

func (a *app) printDevices(lib gpu.Library) error {
	inv, err := gpu.Discover(lib)
	if errors.Is(err, gpu.ErrNoGPU) {
		fmt.Fprintf(a.stdout, "no GPU: %s\n", trimNoGPU(err))
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "NVIDIA driver %s, %d GPU(s)\n", inv.Driver, len(inv.Devices))
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tCC\tMEMORY USED / TOTAL\tFREE\tUTIL\tUUID")
	for _, d := range inv.Devices {
		util := "n/a"
		if d.Utilization >= 0 {
			util = fmt.Sprintf("%.0f%%", d.Utilization*100)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s / %s\t%s\t%s\t%s\n", d.Index, d.Name, d.ComputeCapability,
			mib(d.MemoryUsed), mib(d.MemoryTotal), mib(d.MemoryFree), util, d.UUID)
	}
	return tw.Flush()
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
