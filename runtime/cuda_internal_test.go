package runtime

import (
	"maps"
	"strings"
	"testing"
)

func TestCUDAOptions(t *testing.T) {
	no := false
	tests := []struct {
		name string
		cfg  SessionConfig
		want map[string]string
	}{
		{"defaults", SessionConfig{Device: CUDA(0)}, map[string]string{"device_id": "0"}},
		{"all", SessionConfig{Device: CUDA(3), GPUMemLimit: 2 << 30, CUDNNConvAlgoSearch: "heuristic",
			ArenaExtendStrategy: "ksameasrequested", DoCopyInDefaultStream: &no},
			map[string]string{"device_id": "3", "gpu_mem_limit": "2147483648", "cudnn_conv_algo_search": "HEURISTIC",
				"arena_extend_strategy": "kSameAsRequested", "do_copy_in_default_stream": "0"}},
		{"next power of two", SessionConfig{Device: CUDA(1), ArenaExtendStrategy: "kNextPowerOfTwo"},
			map[string]string{"device_id": "1", "arena_extend_strategy": "kNextPowerOfTwo"}},
	}
	for _, tt := range tests {
		if got := cudaOptions(tt.cfg); !maps.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSessionConfigValidateCUDA(t *testing.T) {
	tests := []struct {
		cfg  SessionConfig
		want string
	}{
		{SessionConfig{Device: CUDA(0), ArenaExtendStrategy: "grow"}, `arena_extend_strategy "grow"`},
		{SessionConfig{Device: CUDA(0), CUDNNConvAlgoSearch: "fast"}, `cudnn_conv_algo_search "fast"`},
		{SessionConfig{Device: CUDA(0), GPUMemLimit: -1}, "negative gpu_mem_limit"},
		{SessionConfig{Device: CPU(), TensorRT: true}, "tensorrt needs a CUDA device, not cpu"},
		{SessionConfig{Device: CUDA(-1)}, "negative GPU index"},
	}
	for _, tt := range tests {
		tt.cfg.Name, tt.cfg.Model = "m", []byte{1}
		if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `model "m"`) {
			t.Errorf("%+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
	ok := SessionConfig{Name: "m", Model: []byte{1}, Device: CUDA(0), TensorRT: true, ArenaExtendStrategy: "kSameAsRequested", CUDNNConvAlgoSearch: "DEFAULT"}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}
