package runtime

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/inferq/inferq/models"
)

// GPU is what placement needs to know of one visible GPU.
type GPU struct {
	Index      int
	Name       string
	MemoryFree uint64
}

// Placement is where one model's instances run: one Device per session.
type Placement struct {
	Model   string
	Devices []Device
	// Note explains a fallback (auto with no GPU), for the log.
	Note string
}

// Place decides the devices of every model's instances, as a pure function
// of the config and the visible GPUs (noGPU says why there are none):
//   - device cpu: `instances` sessions on the CPU;
//   - device auto: `instances` sessions per visible GPU, most free memory
//     first; on the CPU when there is no GPU (Note says so);
//   - device cuda: like auto, but no GPU is an error naming the model;
//   - a GPU list: `instances` sessions on each listed GPU; a GPU that is not
//     visible is an error naming the model.
func Place(ms []models.Model, gpus []GPU, noGPU string) ([]Placement, error) {
	byFree := slices.Clone(gpus)
	slices.SortStableFunc(byFree, func(a, b GPU) int { return cmp.Compare(b.MemoryFree, a.MemoryFree) })
	visible := map[int]bool{}
	for _, g := range gpus {
		visible[g.Index] = true
	}
	out := make([]Placement, 0, len(ms))
	for _, m := range ms {
		p := Placement{Model: m.Name}
		n := max(m.Instances, 1)
		onEach := func(idx []int) {
			for _, i := range idx {
				for range n {
					p.Devices = append(p.Devices, CUDA(i))
				}
			}
		}
		all := make([]int, len(byFree))
		for i, g := range byFree {
			all[i] = g.Index
		}
		switch m.Device.Kind {
		case models.DeviceCPU:
			for range n {
				p.Devices = append(p.Devices, CPU())
			}
		case models.DeviceAuto, "":
			if len(all) == 0 {
				for range n {
					p.Devices = append(p.Devices, CPU())
				}
				p.Note = "no usable GPU (" + noGPU + "); running on the CPU"
				break
			}
			onEach(all)
		case models.DeviceCUDA:
			if len(all) == 0 {
				return nil, fmt.Errorf("runtime: model %q asks for device cuda, but there is no usable GPU: %s", m.Name, noGPU)
			}
			onEach(all)
		case models.DeviceList:
			for _, i := range m.Device.GPUs {
				if !visible[i] {
					return nil, fmt.Errorf("runtime: model %q asks for GPU %d, which is not visible (visible: %v; %s)", m.Name, i, sortedKeys(visible), noGPU)
				}
			}
			onEach(m.Device.GPUs)
		default:
			return nil, fmt.Errorf("runtime: model %q: unknown device %q", m.Name, m.Device.Kind)
		}
		out = append(out, p)
	}
	return out, nil
}

func sortedKeys(m map[int]bool) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
