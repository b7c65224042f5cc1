package runtime

import (
	"fmt"
	"strings"
	"testing"

	"github.com/inferq/inferq/models"
)

const gib = 1 << 30

// fakeGPUs returns n GPUs with the given free memory in GiB (cycled), CUDA
// ordinal = NVML index.
func fakeGPUs(n int, freeGiB ...uint64) []GPU {
	var gs []GPU
	for i := range n {
		gs = append(gs, GPU{Index: i, NVMLIndex: i, UUID: fmt.Sprintf("GPU-%d000aaaa-%d", i, i), Name: "A100",
			MemoryFree: freeGiB[i%len(freeGiB)] * gib, MemoryTotal: 40 * gib})
	}
	return gs
}

func model(name string, d models.Device, inst int) models.Model {
	m := models.NewModel(name)
	m.Device, m.Instances = d, inst
	return m
}

func withLimit(m models.Model, limit models.ByteSize) models.Model {
	m.CUDA.GPUMemLimit = limit
	return m
}

func devs(p Placement) string {
	var got []string
	for _, d := range p.Devices {
		got = append(got, d.String())
	}
	return strings.Join(got, ",")
}

var (
	auto = models.Device{Kind: models.DeviceAuto}
	cpu  = models.Device{Kind: models.DeviceCPU}
	cuda = models.Device{Kind: models.DeviceCUDA}
)

func list(i ...int) models.Device { return models.Device{Kind: models.DeviceList, GPUs: i} }

func TestPlace(t *testing.T) {
	two := []GPU{{Index: 0, MemoryFree: 1 * gib}, {Index: 1, MemoryFree: 8 * gib}}
	tests := []struct {
		name    string
		ms      []models.Model
		gpus    []GPU
		want    []string // devices per model, joined
		note    string   // in the first model's note
		wantErr string
	}{
		// 0 GPUs
		{"0 gpus cpu", []models.Model{model("a", cpu, 2)}, nil, []string{"cpu,cpu"}, "", ""},
		{"0 gpus auto falls back", []models.Model{model("a", auto, 1)}, nil, []string{"cpu"}, "no usable GPU (no driver); running on the CPU", ""},
		{"0 gpus cuda", []models.Model{model("m1", cuda, 1)}, nil, nil, "", `model "m1" asks for device cuda, but there is no usable GPU: no driver`},
		{"0 gpus list", []models.Model{model("m2", list(0), 1)}, nil, nil, "", `model "m2" asks for GPU 0, which is not visible (visible: []; no driver)`},
		// 1 GPU
		{"1 gpu auto", []models.Model{model("a", auto, 2)}, fakeGPUs(1, 40), []string{"cuda:0,cuda:0"}, "", ""},
		{"1 gpu cuda and cpu", []models.Model{model("a", cuda, 1), model("b", cpu, 1)}, fakeGPUs(1, 40), []string{"cuda:0", "cpu"}, "", ""},
		{"1 gpu list 1", []models.Model{model("m3", list(1), 1)}, fakeGPUs(1, 40), nil, "", `model "m3" asks for GPU 1, which is not visible (visible: [0]`},
		// 2 GPUs, uneven
		{"2 gpus most free first", []models.Model{model("a", auto, 1)}, two, []string{"cuda:1,cuda:0"}, "", ""},
		{"2 gpus instances per gpu", []models.Model{model("a", auto, 2)}, two, []string{"cuda:1,cuda:1,cuda:0,cuda:0"}, "", ""},
		{"2 gpus list", []models.Model{model("a", list(0), 1)}, two, []string{"cuda:0"}, "", ""},
		{"2 gpus list not visible", []models.Model{model("m2", list(3), 1)}, two, nil, "", `model "m2" asks for GPU 3, which is not visible (visible: [0 1]`},
		{"2 gpus one too full", []models.Model{withLimit(model("a", auto, 1), 2*gib)}, two, []string{"cuda:1"},
			"needs 2048 MiB per GPU; skipped for lack of memory: GPU 0 (1024 MiB free)", ""},
		{"2 gpus second model sees what is left", []models.Model{withLimit(model("a", list(1), 2), 3*gib), withLimit(model("b", auto, 1), 1536<<20)}, two,
			[]string{"cuda:1,cuda:1", "cuda:1"}, "", ""},
		{"2 gpus spread by what is left", []models.Model{withLimit(model("a", list(1), 1), 7*gib), model("b", auto, 1)}, two,
			[]string{"cuda:1", "cuda:0,cuda:1"}, "", ""},
		{"2 gpus fits nowhere", []models.Model{withLimit(model("big", auto, 1), 16*gib)}, two, nil, "",
			`model "big" fits on no GPU: it needs 16384 MiB per GPU (1 instances x cuda.gpu_mem_limit 16384 MiB), the most free is 8192 MiB on GPU 1`},
		{"2 gpus cuda fits nowhere", []models.Model{withLimit(model("big", cuda, 3), 3*gib)}, two, nil, "", `model "big" fits on no GPU: it needs 9216 MiB per GPU (3 instances`},
		{"2 gpus list fits nowhere", []models.Model{withLimit(model("big", list(0), 1), 2*gib)}, two, nil, "", `model "big" fits nowhere: GPU 0 has 1024 MiB free, the model needs 2048 MiB`},
		// 8 GPUs
		{"8 gpus auto", []models.Model{model("a", auto, 1)}, fakeGPUs(8, 10, 30, 20, 40),
			[]string{"cuda:3,cuda:7,cuda:1,cuda:5,cuda:2,cuda:6,cuda:0,cuda:4"}, "", ""},
		{"8 gpus two models", []models.Model{withLimit(model("a", list(0, 2, 4, 6), 1), 5*gib), withLimit(model("b", auto, 1), 6*gib)}, fakeGPUs(8, 10),
			[]string{"cuda:0,cuda:2,cuda:4,cuda:6", "cuda:1,cuda:3,cuda:5,cuda:7"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := Place(tt.ms, tt.gpus, "no driver")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range ps {
				if got := devs(p); got != tt.want[i] {
					t.Errorf("model %s on %s, want %s", p.Model, got, tt.want[i])
				}
			}
			if ps[0].Note != tt.note {
				t.Errorf("note %q, want %q", ps[0].Note, tt.note)
			}
		})
	}
}

func TestPlacementSizing(t *testing.T) {
	m := model("a", auto, 2)
	m.Concurrency, m.Batching.MaxBatchSize = 3, 16
	ps, err := Place([]models.Model{m, model("b", cpu, 1)}, fakeGPUs(2, 40), "")
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if len(p.Devices) != 4 || p.Runs() != 12 || p.MaxInFlight() != 4*16*12 || p.OnGPU(1) != 2 || p.OnGPU(5) != 0 {
		t.Errorf("sessions %d runs %d in flight %d on gpu 1 %d", len(p.Devices), p.Runs(), p.MaxInFlight(), p.OnGPU(1))
	}
	if q := ps[1]; q.Runs() != 1 || q.MaxInFlight() != 4*models.DefaultMaxBatchSize {
		t.Errorf("cpu model runs %d in flight %d", q.Runs(), q.MaxInFlight())
	}
}

func TestVisible(t *testing.T) {
	all := fakeGPUs(4, 10)
	tests := []struct {
		value string
		set   bool
		want  string // NVML indexes in CUDA order
		note  string
	}{
		{"", false, "0,1,2,3", ""},
		{"", true, "", `CUDA_VISIBLE_DEVICES="" hides every GPU`},
		{"2", true, "2", ""},
		{"3,1", true, "3,1", ""},
		{" 1 , 2 ", true, "1,2", ""},
		{"GPU-2000", true, "2", ""},
		{"GPU-2000aaaa-2,0", true, "2,0", ""},
		{"0,7,1", true, "0", `entry "7" is not the index of a GPU; CUDA ignores it`},
		{"0,0", true, "0", `entry "0" names a GPU listed before it`},
		{"-1", true, "", `hides every GPU (CUDA_VISIBLE_DEVICES="-1": entry "-1" is not the index`},
		{"GPU-", true, "", "prefix of more than one"},
		{"GPU-ffff", true, "", "neither an index nor the UUID"},
		{"MIG-abc", true, "", "MIG instance"},
		{"1,,2", true, "1", `entry "" is empty`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%v", tt.value, tt.set), func(t *testing.T) {
			vis, note := Visible(all, tt.value, tt.set)
			var got []string
			for i, g := range vis {
				if g.Index != i {
					t.Errorf("GPU %d has CUDA ordinal %d, want %d", g.NVMLIndex, g.Index, i)
				}
				got = append(got, fmt.Sprint(g.NVMLIndex))
			}
			if strings.Join(got, ",") != tt.want {
				t.Errorf("visible %v, want %s", got, tt.want)
			}
			if !strings.Contains(note, tt.note) || (tt.note == "") != (note == "") {
				t.Errorf("note %q, want %q", note, tt.note)
			}
		})
	}
	// Visible then Place: the list names CUDA ordinals.
	vis, _ := Visible(all, "3,1", true)
	ps, err := Place([]models.Model{model("a", list(1), 1)}, vis, "")
	if err != nil || devs(ps[0]) != "cuda:1" {
		t.Fatalf("place on CUDA 1 (NVML 1 behind 3): %v %v", ps, err)
	}
}

func FuzzVisible(f *testing.F) {
	for _, s := range []string{"", "0", "3,1", "GPU-2000", "0,7,1", "-1", "MIG-x", "1,,2"} {
		f.Add(s, true)
	}
	all := fakeGPUs(4, 10)
	f.Fuzz(func(t *testing.T, value string, set bool) {
		vis, note := Visible(all, value, set)
		seen := map[int]bool{}
		for i, g := range vis {
			if g.Index != i || seen[g.NVMLIndex] {
				t.Fatalf("bad visible list %+v", vis)
			}
			seen[g.NVMLIndex] = true
		}
		if len(vis) == 0 && note == "" {
			t.Fatal("no GPU and no reason")
		}
	})
}
