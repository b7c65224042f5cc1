package runtime

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inferq/inferq/models"
)

// GPU is what placement needs to know of one GPU.
type GPU struct {
	// Index is the GPU's CUDA ordinal: its position among the GPUs CUDA
	// sees once CUDA_VISIBLE_DEVICES is applied (see Visible). It is what a
	// model's `device: [..]` list names and the device_id sessions use.
	Index int
	// NVMLIndex is NVML's index of the GPU among all of the machine's, as
	// `inferq devices` and the metrics show it. Without
	// CUDA_VISIBLE_DEVICES it equals Index (with CUDA_DEVICE_ORDER=
	// PCI_BUS_ID, which inferq serve sets).
	NVMLIndex   int
	UUID        string
	Name        string
	MemoryFree  uint64
	MemoryTotal uint64
}

// Placement is where one model's instances run: one Device per session.
type Placement struct {
	Model   string
	Devices []Device
	// Concurrency is the number of runs in flight per session.
	Concurrency int
	// MaxBatchSize is the model's largest batch.
	MaxBatchSize int
	// GPUMemory is the GPU memory reserved per session (the model's
	// cuda.gpu_mem_limit; 0: none reserved).
	GPUMemory uint64
	// Note explains a fallback (auto with no GPU) or a GPU skipped for lack
	// of memory, for the log.
	Note string
}

// Runs returns how many runs of the model can be in flight at once:
// sessions x concurrency. It sizes the batcher's run loops; the consumer
// sizes what it takes from the model's queue from it.
func (p Placement) Runs() int { return len(p.Devices) * max(p.Concurrency, 1) }

// MaxInFlight returns how many items the model can hold at once without
// starving a run loop: 4 full batches per run in flight, the batcher's
// default queue size.
func (p Placement) MaxInFlight() int { return 4 * max(p.MaxBatchSize, 1) * p.Runs() }

// OnGPU returns how many of the model's sessions run on the GPU with CUDA
// ordinal i.
func (p Placement) OnGPU(i int) int {
	n := 0
	for _, d := range p.Devices {
		if d.Kind == KindCUDA && d.Index == i {
			n++
		}
	}
	return n
}

// Place decides the devices of every model's instances, as a pure function
// of the config and the GPUs CUDA sees (from Visible; noGPU says why there
// are none). Models are placed in config order; each takes its instances'
// memory (instances x cuda.gpu_mem_limit per GPU) from the GPUs it lands
// on, so the next model sees what is left.
//   - device cpu: `instances` sessions on the CPU;
//   - device auto: `instances` sessions on every visible GPU with room,
//     most free memory first; on the CPU when there is no GPU (Note says
//     so); GPUs but none with room is an error naming the model;
//   - device cuda: like auto, but no GPU is an error naming the model;
//   - a GPU list: `instances` sessions on each listed GPU; a GPU that is
//     not visible, or lacks the memory, is an error naming the model.
func Place(ms []models.Model, gpus []GPU, noGPU string) ([]Placement, error) {
	free := map[int]uint64{}
	for _, g := range gpus {
		free[g.Index] = g.MemoryFree
	}
	if noGPU == "" {
		noGPU = "no GPU visible"
	}
	out := make([]Placement, 0, len(ms))
	for _, m := range ms {
		n := max(m.Instances, 1)
		p := Placement{Model: m.Name, Concurrency: max(m.Concurrency, 1), MaxBatchSize: m.Batching.MaxBatchSize,
			GPUMemory: uint64(max(m.CUDA.GPUMemLimit, 0))}
		perGPU := p.GPUMemory * uint64(n)
		onGPU := func(i int) {
			for range n {
				p.Devices = append(p.Devices, CUDA(i))
			}
			free[i] -= perGPU
		}
		switch m.Device.Kind {
		case models.DeviceCPU:
			for range n {
				p.Devices = append(p.Devices, CPU())
			}
		case models.DeviceAuto, models.DeviceCUDA, "":
			if len(gpus) == 0 {
				if m.Device.Kind == models.DeviceCUDA {
					return nil, fmt.Errorf("runtime: model %q asks for device cuda, but there is no usable GPU: %s", m.Name, noGPU)
				}
				for range n {
					p.Devices = append(p.Devices, CPU())
				}
				p.Note = "no usable GPU (" + noGPU + "); running on the CPU"
				break
			}
			var skipped []string
			for _, g := range byFree(gpus, free) {
				if free[g.Index] < perGPU {
					skipped = append(skipped, fmt.Sprintf("GPU %d (%s free)", g.Index, mib(free[g.Index])))
					continue
				}
				onGPU(g.Index)
			}
			if len(p.Devices) == 0 {
				best := byFree(gpus, free)[0]
				return nil, fmt.Errorf("runtime: model %q fits on no GPU: it needs %s per GPU (%d instances x cuda.gpu_mem_limit %s), the most free is %s on GPU %d",
					m.Name, mib(perGPU), n, mib(p.GPUMemory), mib(free[best.Index]), best.Index)
			}
			if len(skipped) > 0 {
				p.Note = fmt.Sprintf("needs %s per GPU; skipped for lack of memory: %s", mib(perGPU), strings.Join(skipped, ", "))
			}
		case models.DeviceList:
			for _, i := range m.Device.GPUs {
				f, ok := free[i]
				if !ok {
					return nil, fmt.Errorf("runtime: model %q asks for GPU %d, which is not visible (visible: %v; %s)", m.Name, i, indexes(gpus), visibleWhy(gpus, noGPU))
				}
				if f < perGPU {
					return nil, fmt.Errorf("runtime: model %q fits nowhere: GPU %d has %s free, the model needs %s (%d instances x cuda.gpu_mem_limit %s)",
						m.Name, i, mib(f), mib(perGPU), n, mib(p.GPUMemory))
				}
				onGPU(i)
			}
		default:
			return nil, fmt.Errorf("runtime: model %q: unknown device %q", m.Name, m.Device.Kind)
		}
		out = append(out, p)
	}
	return out, nil
}

// byFree returns gpus ordered by the free memory left to them, most first,
// then by index.
func byFree(gpus []GPU, free map[int]uint64) []GPU {
	s := slices.Clone(gpus)
	slices.SortStableFunc(s, func(a, b GPU) int {
		return cmp.Or(cmp.Compare(free[b.Index], free[a.Index]), cmp.Compare(a.Index, b.Index))
	})
	return s
}

func indexes(gpus []GPU) []int {
	out := make([]int, len(gpus))
	for i, g := range gpus {
		out[i] = g.Index
	}
	slices.Sort(out)
	return out
}

func visibleWhy(gpus []GPU, noGPU string) string {
	if len(gpus) > 0 {
		return "GPU indexes are CUDA's, after CUDA_VISIBLE_DEVICES"
	}
	return noGPU
}

func mib(b uint64) string { return strconv.FormatUint(b>>20, 10) + " MiB" }

// Visible applies CUDA_VISIBLE_DEVICES to the GPUs NVML reports and numbers
// the result as CUDA does. all holds every GPU with its NVMLIndex; value is
// the variable's value and set whether it is set at all (set and empty
// hides every GPU). Entries are NVML indexes or GPU UUIDs (or a unique
// prefix of one, "GPU-8f2a"); as in CUDA, the first entry that names no GPU,
// or one already named, ends the list. The note says what was dropped or
// hidden, for the log; with no GPU left it is the reason to give.
func Visible(all []GPU, value string, set bool) (visible []GPU, note string) {
	ordered := slices.Clone(all)
	slices.SortStableFunc(ordered, func(a, b GPU) int { return cmp.Compare(a.NVMLIndex, b.NVMLIndex) })
	if !set {
		for i := range ordered {
			ordered[i].Index = i
		}
		return ordered, ""
	}
	seen := map[int]bool{}
	entries := strings.Split(value, ",")
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		g, why := findGPU(ordered, e)
		if why == "" && seen[g.NVMLIndex] {
			why = "names a GPU listed before it"
		}
		if why != "" {
			if e == "" && len(entries) == 1 {
				break
			}
			note = fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: entry %q %s; CUDA ignores it and the entries after it", value, e, why)
			break
		}
		seen[g.NVMLIndex] = true
		g.Index = len(visible)
		visible = append(visible, g)
	}
	if len(visible) == 0 {
		hides := fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q hides every GPU", value)
		if note != "" {
			hides += " (" + note + ")"
		}
		return nil, hides
	}
	return visible, note
}

// findGPU finds the GPU an entry of CUDA_VISIBLE_DEVICES names.
func findGPU(gpus []GPU, e string) (GPU, string) {
	if e == "" {
		return GPU{}, "is empty"
	}
	if i, err := strconv.Atoi(e); err == nil {
		for _, g := range gpus {
			if g.NVMLIndex == i {
				return g, ""
			}
		}
		return GPU{}, "is not the index of a GPU"
	}
	if strings.HasPrefix(e, "MIG-") {
		return GPU{}, "is a MIG instance, which inferq does not place on"
	}
	var found []GPU
	for _, g := range gpus {
		if g.UUID != "" && strings.HasPrefix(g.UUID, e) {
			found = append(found, g)
		}
	}
	switch len(found) {
	case 1:
		return found[0], ""
	case 0:
		return GPU{}, "is neither an index nor the UUID of a GPU"
	}
	return GPU{}, "is the prefix of more than one GPU's UUID"
}
