package models

import (
	"errors"
	"strings"
	"testing"
)

func TestCUDADefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Models[0].CUDA, NewCUDA(); got != want {
		t.Errorf("cuda defaults = %+v, want %+v", got, want)
	}
	if want := (CUDA{ArenaExtendStrategy: "kNextPowerOfTwo", CUDNNConvAlgoSearch: "EXHAUSTIVE", DoCopyInDefaultStream: true}); NewCUDA() != want {
		t.Errorf("NewCUDA() = %+v: onnxruntime's defaults are %+v", NewCUDA(), want)
	}
}

func TestCUDAParse(t *testing.T) {
	c, err := Parse([]byte(`
models:
  - name: r
    path: r.onnx
    device: cuda
    cuda:
      gpu_mem_limit: 2GiB
      arena_extend_strategy: ksameasrequested
      cudnn_conv_algo_search: heuristic
      do_copy_in_default_stream: false
      tensorrt: true
`))
	if err != nil {
		t.Fatal(err)
	}
	want := CUDA{GPUMemLimit: 2 << 30, ArenaExtendStrategy: ArenaSameAsRequested, CUDNNConvAlgoSearch: ConvAlgoHeuristic, TensorRT: true}
	if got := c.Models[0].CUDA; got != want {
		t.Errorf("cuda = %+v, want %+v", got, want)
	}
	// The rendered config reads back the same.
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "gpu_mem_limit: 2GiB") {
		t.Errorf("rendered config lacks gpu_mem_limit: 2GiB:\n%s", out)
	}
	c2, err := Parse(out)
	if err != nil {
		t.Fatalf("re-parse: %v", err)
	}
	if c2.Models[0].CUDA != want {
		t.Errorf("round trip: %+v", c2.Models[0].CUDA)
	}
}

func TestCUDAValidate(t *testing.T) {
	tests := []struct {
		block string
		field string // in the error
	}{
		{"gpu_mem_limit: -1", "cuda.gpu_mem_limit: must not be negative"},
		{"gpu_mem_limit: lots", `line 5: not a size`},
		{"gpu_mem_limit: [1]", "want a size"},
		{"arena_extend_strategy: grow", `cuda.arena_extend_strategy: "grow" is not kNextPowerOfTwo or kSameAsRequested`},
		{"cudnn_conv_algo_search: fast", `cuda.cudnn_conv_algo_search: "FAST" is not EXHAUSTIVE, HEURISTIC or DEFAULT`},
		{"tensorrt: maybe", "tensorrt"},
		{"gpu_memory_limit: 1", "field gpu_memory_limit not found"},
	}
	for _, tt := range tests {
		t.Run(tt.block, func(t *testing.T) {
			_, err := Parse([]byte("models:\n  - name: m\n    path: m.onnx\n    cuda:\n      " + tt.block + "\n"))
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %v, want it to contain %q", err, tt.field)
			}
			var fe *FieldError
			if strings.HasPrefix(tt.field, "cuda.") && (!errors.As(err, &fe) || fe.Model != `"m"`) {
				t.Errorf("error %v is not a FieldError naming model m", err)
			}
		})
	}
	// A Model built in Go with the cuda block left zero is valid.
	m := NewModel("z")
	m.Path, m.Queue, m.DLQQueue, m.UnprocessableQueue = "z.onnx", "q", "q.dlq", "q.u"
	m.CUDA = CUDA{}
	if err := (&Config{Broker: Broker{Address: "a"}, HTTP: HTTP{Listen: "b"}, Models: []Model{m}}).Validate(); err != nil {
		t.Errorf("zero cuda block: %v", err)
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"0", 0, true}, {"1048576", 1 << 20, true}, {"512MiB", 512 << 20, true}, {"2GiB", 2 << 30, true},
		{"1.5GiB", 3 << 29, true}, {"1GB", 1e9, true}, {" 4 KiB ", 4 << 10, true}, {"10B", 10, true},
		{"", 0, false}, {"GiB", 0, false}, {"-1GiB", 0, false}, {"2 parsecs", 0, false}, {"1e30TB", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	for _, b := range []ByteSize{0, 1, 1 << 10, 3 << 29, 2 << 30, 1e9} {
		back, err := ParseByteSize(b.String())
		if err != nil || back != b {
			t.Errorf("%d -> %q -> %d, %v", b, b.String(), back, err)
		}
	}
}
