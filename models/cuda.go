package models

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// CUDA arena extension strategies (arena_extend_strategy), as onnxruntime
// names them.
const (
	ArenaNextPowerOfTwo  = "kNextPowerOfTwo"
	ArenaSameAsRequested = "kSameAsRequested"
)

// cuDNN convolution algorithm searches (cudnn_conv_algo_search).
const (
	ConvAlgoExhaustive = "EXHAUSTIVE"
	ConvAlgoHeuristic  = "HEURISTIC"
	ConvAlgoDefault    = "DEFAULT"
)

// CUDA is a model's `cuda:` block: the options of onnxruntime's CUDA
// execution provider for the model's GPU sessions. It is ignored for
// sessions on the CPU. The defaults are onnxruntime's own.
type CUDA struct {
	// GPUMemLimit caps each session's CUDA memory arena (gpu_mem_limit);
	// 0 means no cap. Placement also takes it as the memory one instance
	// needs on its GPU.
	GPUMemLimit ByteSize `yaml:"gpu_mem_limit"`
	// ArenaExtendStrategy is kNextPowerOfTwo (default) or kSameAsRequested.
	ArenaExtendStrategy string `yaml:"arena_extend_strategy"`
	// CUDNNConvAlgoSearch is EXHAUSTIVE (default), HEURISTIC or DEFAULT.
	CUDNNConvAlgoSearch string `yaml:"cudnn_conv_algo_search"`
	// DoCopyInDefaultStream copies inputs and outputs on the default CUDA
	// stream (default true); false uses separate streams.
	DoCopyInDefaultStream bool `yaml:"do_copy_in_default_stream"`
	// TensorRT puts onnxruntime's TensorRT execution provider in front of
	// CUDA (default false). It needs libonnxruntime_providers_tensorrt.so
	// and TensorRT's libraries on the host.
	TensorRT bool `yaml:"tensorrt"`
}

// NewCUDA returns the defaults of the cuda block.
func NewCUDA() CUDA {
	return CUDA{
		ArenaExtendStrategy:   ArenaNextPowerOfTwo,
		CUDNNConvAlgoSearch:   ConvAlgoExhaustive,
		DoCopyInDefaultStream: true,
	}
}

// UnmarshalYAML decodes the block key by key over the defaults already in
// c, so that an error names the field (cuda.tensorrt: ...) and an unknown key
// is refused.
func (c *CUDA) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: cuda: want a mapping of CUDA provider options", n.Line)
	}
	v := reflect.ValueOf(c).Elem()
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		fields[name] = v.Field(i)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		f, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("line %d: field %s not found in type CUDA", k.Line, showKey(k.Value))
		}
		if err := val.Decode(f.Addr().Interface()); err != nil {
			return fmt.Errorf("cuda.%s: %w", k.Value, err)
		}
	}
	return nil
}

// normalize spells the enumerations as onnxruntime does, whatever their
// case in the file.
func (c *CUDA) normalize() {
	switch strings.ToLower(c.ArenaExtendStrategy) {
	case "", strings.ToLower(ArenaNextPowerOfTwo):
		c.ArenaExtendStrategy = ArenaNextPowerOfTwo
	case strings.ToLower(ArenaSameAsRequested):
		c.ArenaExtendStrategy = ArenaSameAsRequested
	}
	if c.CUDNNConvAlgoSearch == "" {
		c.CUDNNConvAlgoSearch = ConvAlgoExhaustive
	}
	c.CUDNNConvAlgoSearch = strings.ToUpper(c.CUDNNConvAlgoSearch)
}

func (c CUDA) validate(bad func(field, format string, args ...any)) {
	if c.GPUMemLimit < 0 {
		bad("cuda.gpu_mem_limit", "must not be negative (0 means no limit), got %d", c.GPUMemLimit)
	}
	if c.GPUMemLimit > maxGPUMemBound {
		bad("cuda.gpu_mem_limit", "must be at most %s, got %s", maxGPUMemBound, c.GPUMemLimit)
	}
	// Empty means the default: a Model built in Go without NewModel.
	switch c.ArenaExtendStrategy {
	case "", ArenaNextPowerOfTwo, ArenaSameAsRequested:
	default:
		bad("cuda.arena_extend_strategy", "%q is not %s or %s", c.ArenaExtendStrategy, ArenaNextPowerOfTwo, ArenaSameAsRequested)
	}
	switch c.CUDNNConvAlgoSearch {
	case "", ConvAlgoExhaustive, ConvAlgoHeuristic, ConvAlgoDefault:
	default:
		bad("cuda.cudnn_conv_algo_search", "%q is not %s, %s or %s", c.CUDNNConvAlgoSearch, ConvAlgoExhaustive, ConvAlgoHeuristic, ConvAlgoDefault)
	}
}

// ByteSize is a size in bytes, written in YAML as a plain number of bytes
// or a number with a unit: 512MiB, 2GiB, 1.5GB (KiB, MiB, GiB, TiB powers of
// 1024; KB, MB, GB, TB powers of 1000).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize reads a ByteSize as written in the config.
func ParseByteSize(s string) (ByteSize, error) {
	v := strings.TrimSpace(s)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return ByteSize(n), nil
	}
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || f < 0 || f*u.mult > 1<<62 {
			break
		}
		return ByteSize(f * u.mult), nil
	}
	return 0, fmt.Errorf("%q is not a size: want bytes, or a number with a unit such as 512MiB or 2GiB", s)
}

// UnmarshalYAML reads a number of bytes or a size with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size such as 2GiB", n.Line)
	}
	v, err := ParseByteSize(n.Value)
	if err != nil { // not quoting the value: see decodeError
		return fmt.Errorf("line %d: not a size: want bytes, or a number with a unit such as 512MiB or 2GiB", n.Line)
	}
	*b = v
	return nil
}

// String writes b with the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.m == 0 {
			return strconv.FormatInt(int64(b)/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalYAML writes b as String does.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }
