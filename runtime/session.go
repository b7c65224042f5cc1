package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
	ort "github.com/yalue/onnxruntime_go"
)

// ErrProviderUnavailable is wrapped by NewSession's error when the execution
// provider a device needs (CUDA) cannot be loaded or configured.
var ErrProviderUnavailable = errors.New("runtime: execution provider unavailable")

// DeviceKind is where a session runs.
type DeviceKind uint8

// Device kinds.
const (
	// KindCPU runs on onnxruntime's CPU execution provider.
	KindCPU DeviceKind = iota
	// KindCUDA runs on one GPU through the CUDA execution provider.
	KindCUDA
)

// Device is one concrete device: the CPU, or CUDA GPU Index. The zero value
// is the CPU.
type Device struct {
	Kind  DeviceKind
	Index int // GPU index for KindCUDA
}

// CPU returns the CPU device.
func CPU() Device { return Device{Kind: KindCPU} }

// CUDA returns CUDA GPU i.
func CUDA(i int) Device { return Device{Kind: KindCUDA, Index: i} }

// String returns "cpu" or "cuda:N".
func (d Device) String() string {
	if d.Kind == KindCUDA {
		return "cuda:" + strconv.Itoa(d.Index)
	}
	return "cpu"
}

// ParseDevice reads "cpu", "cuda" (GPU 0) or "cuda:N".
func ParseDevice(s string) (Device, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch {
	case v == "cpu":
		return CPU(), nil
	case v == "cuda":
		return CUDA(0), nil
	case strings.HasPrefix(v, "cuda:"):
		i, err := strconv.Atoi(v[len("cuda:"):])
		if err == nil && i >= 0 {
			return CUDA(i), nil
		}
	}
	return Device{}, fmt.Errorf("runtime: %q is not a device: want cpu, cuda or cuda:N", s)
}

// SessionConfig configures one session: one model on one device. The zero
// value of every optional field picks the default.
type SessionConfig struct {
	// Name names the model in errors and logs; default: the file name
	// without its extension.
	Name string
	// Path is the .onnx file. Model holds the model instead when Path is
	// empty.
	Path  string
	Model []byte
	// Device is the CPU (zero value) or a CUDA GPU.
	Device Device

	// CPUs is the number of cores the process may use; default
	// runtime.NumCPU().
	CPUs int
	// ConcurrentSessions is the number of sessions that run at the same
	// time in this process and share CPUs; default 1.
	ConcurrentSessions int
	// IntraOpThreads is onnxruntime's intra-op thread count; default
	// CPUs / ConcurrentSessions, at least 1.
	IntraOpThreads int
	// NoSpin stops onnxruntime's worker threads from spinning while they
	// wait for work (session.intra_op.allow_spinning=0): less CPU burnt
	// when sessions share cores, a little more latency per run.
	NoSpin bool

	// GPUMemLimit caps the CUDA arena in bytes (gpu_mem_limit); 0: none.
	GPUMemLimit int64
	// CUDNNConvAlgoSearch is EXHAUSTIVE, HEURISTIC or DEFAULT
	// (cudnn_conv_algo_search); empty: onnxruntime's default, EXHAUSTIVE.
	CUDNNConvAlgoSearch string
	// ArenaExtendStrategy is kNextPowerOfTwo or kSameAsRequested
	// (arena_extend_strategy); empty: onnxruntime's default,
	// kNextPowerOfTwo.
	ArenaExtendStrategy string
	// DoCopyInDefaultStream sets do_copy_in_default_stream; nil:
	// onnxruntime's default, true.
	DoCopyInDefaultStream *bool
	// TensorRT puts the TensorRT execution provider in front of CUDA on
	// the same GPU; nodes TensorRT cannot take fall back to CUDA. It needs
	// libonnxruntime_providers_tensorrt.so and TensorRT's libraries.
	TensorRT bool

	// Logger receives session events; default: the Env's logger.
	Logger *slog.Logger
}

func (c *SessionConfig) setDefaults(envLogger *slog.Logger) {
	if c.Name == "" && c.Path != "" {
		base := filepath.Base(c.Path)
		c.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if c.Name == "" {
		c.Name = "model"
	}
	if c.CPUs <= 0 {
		c.CPUs = goruntime.NumCPU()
	}
	if c.ConcurrentSessions <= 0 {
		c.ConcurrentSessions = 1
	}
	if c.IntraOpThreads <= 0 {
		c.IntraOpThreads = max(1, c.CPUs/c.ConcurrentSessions)
	}
	if c.Logger == nil {
		c.Logger = envLogger
	}
}

// Validate reports the first field that cannot work.
func (c SessionConfig) Validate() error {
	if c.Path == "" && len(c.Model) == 0 {
		return fmt.Errorf("runtime: model %q: neither a path nor model bytes", c.Name)
	}
	switch c.Device.Kind {
	case KindCPU:
	case KindCUDA:
		if c.Device.Index < 0 {
			return fmt.Errorf("runtime: model %q: negative GPU index %d", c.Name, c.Device.Index)
		}
	default:
		return fmt.Errorf("runtime: model %q: unknown device kind %d", c.Name, c.Device.Kind)
	}
	if c.GPUMemLimit < 0 {
		return fmt.Errorf("runtime: model %q: negative gpu_mem_limit %d", c.Name, c.GPUMemLimit)
	}
	switch strings.ToUpper(c.CUDNNConvAlgoSearch) {
	case "", "EXHAUSTIVE", "HEURISTIC", "DEFAULT":
	default:
		return fmt.Errorf("runtime: model %q: cudnn_conv_algo_search %q: want EXHAUSTIVE, HEURISTIC or DEFAULT", c.Name, c.CUDNNConvAlgoSearch)
	}
	switch strings.ToLower(c.ArenaExtendStrategy) {
	case "", "knextpoweroftwo", "ksameasrequested":
	default:
		return fmt.Errorf("runtime: model %q: arena_extend_strategy %q: want kNextPowerOfTwo or kSameAsRequested", c.Name, c.ArenaExtendStrategy)
	}
	if c.TensorRT && c.Device.Kind != KindCUDA {
		return fmt.Errorf("runtime: model %q: tensorrt needs a CUDA device, not %s", c.Name, c.Device)
	}
	return nil
}

func modelInfoFrom(in, out []ort.InputOutputInfo) tensor.ModelInfo {
	conv := func(l []ort.InputOutputInfo) []tensor.TensorInfo {
		r := make([]tensor.TensorInfo, len(l))
		for i, v := range l {
			ti := tensor.TensorInfo{Name: v.Name, Dims: append([]int64{}, v.Dimensions...)}
			if v.OrtValueType == ort.ONNXTypeTensor {
				ti.ONNXType = onnxTypeName(v.DataType)
				ti.DType, _ = tensor.DTypeFromONNX(int32(v.DataType))
			} else {
				ti.ONNXType = strings.TrimPrefix(v.OrtValueType.String(), "ONNX_TYPE_")
				ti.Dims = nil
			}
			for j, d := range ti.Dims {
				if d < 0 {
					ti.Dims[j] = -1
				}
			}
			r[i] = ti
		}
		return r
	}
	return tensor.ModelInfo{Inputs: conv(in), Outputs: conv(out)}
}

// Session is one onnxruntime session: one model on one device.
//
// Run, RunBatch and Warmup are safe for concurrent use (onnxruntime's Run
// is); each call runs on the caller's goroutine and blocks until
// onnxruntime returns. A run cannot be cancelled once started, so the
// context is checked before each onnxruntime run. Close waits for runs in
// flight.
type Session struct {
	name    string
	device  Device
	threads int
	info    tensor.ModelInfo
	logger  *slog.Logger
	env     *Env

	sess       *ort.DynamicAdvancedSession
	inputIdx   map[string]int
	outputIdx  map[string]int
	allOutputs []int
	// batchable: every input has a dynamic dim 0, so items can be
	// concatenated along it.
	batchable bool
	// noPrealloc is set when a model's output with a dynamic dim 0 turned
	// out not to follow the batch (pre-allocating it failed), so outputs
	// are left to onnxruntime from then on.
	noPrealloc atomic.Bool
	// noBatching is set when an output's dim 0 turned out not to follow
	// the batch, so items are run one by one from then on.
	noBatching atomic.Bool
	scratch    sync.Pool // of *scratch

	mu     sync.RWMutex // read-held by runs, write-held by Close
	closed bool
}

// NewSession opens cfg's model on cfg.Device. The session holds a
// reference on the environment until Close. Asking for CUDA where the CUDA
// execution provider cannot load returns an error that wraps
// ErrProviderUnavailable and names the model and onnxruntime's message.
func NewSession(env *Env, cfg SessionConfig) (*Session, error) {
	if env == nil {
		return nil, errors.New("runtime: NewSession: nil Env")
	}
	cfg.setDefaults(env.logger)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := env.acquire(); err != nil {
		return nil, fmt.Errorf("runtime: model %q: %w", cfg.Name, err)
	}
	s, err := newSession(env, cfg)
	if err != nil {
		_ = releaseORT(env.logger)
		return nil, err
	}
	return s, nil
}

func newSession(env *Env, cfg SessionConfig) (*Session, error) {
	var info tensor.ModelInfo
	var err error
	if cfg.Path != "" {
		info, err = env.inspect(cfg.Path, nil)
	} else {
		info, err = env.inspect("", cfg.Model)
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: model %q: %w", cfg.Name, err)
	}
	if err := checkServable(info); err != nil {
		return nil, fmt.Errorf("runtime: model %q: %w", cfg.Name, err)
	}

	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("runtime: model %q: session options: %w", cfg.Name, err)
	}
	defer func() { _ = opts.Destroy() }()
	if err := configureCPU(opts, cfg); err != nil {
		return nil, fmt.Errorf("runtime: model %q: session options: %w", cfg.Name, err)
	}

	s := &Session{
		name:      cfg.Name,
		device:    cfg.Device,
		threads:   cfg.IntraOpThreads,
		info:      info,
		logger:    cfg.Logger,
		env:       env,
		inputIdx:  make(map[string]int, len(info.Inputs)),
		outputIdx: make(map[string]int, len(info.Outputs)),
		batchable: true,
	}
	inNames := make([]string, len(info.Inputs))
	for i, in := range info.Inputs {
		inNames[i] = in.Name
		s.inputIdx[in.Name] = i
		if len(in.Dims) == 0 || in.Dims[0] != -1 {
			s.batchable = false
		}
	}
	outNames := make([]string, len(info.Outputs))
	for i, out := range info.Outputs {
		outNames[i] = out.Name
		s.outputIdx[out.Name] = i
		s.allOutputs = append(s.allOutputs, i)
	}

	create := func() error {
		var err error
		if cfg.Path != "" {
			s.sess, err = ort.NewDynamicAdvancedSession(cfg.Path, inNames, outNames, opts)
		} else {
			s.sess, err = ort.NewDynamicAdvancedSessionWithONNXData(cfg.Model, inNames, outNames, opts)
		}
		return err
	}
	if cfg.Device.Kind == KindCUDA {
		err = withSignalHandlersKept(s.logger, func() error {
			if err := appendCUDA(opts, cfg, filepath.Dir(env.LibraryPath())); err != nil {
				return fmt.Errorf("%w: model %q: CUDA execution provider for %s: %w", ErrProviderUnavailable, cfg.Name, cfg.Device, err)
			}
			if err := create(); err != nil {
				// The model loaded on the CPU for inspection, so what fails
				// here is the provider (no device, driver, CUDA libraries).
				return fmt.Errorf("%w: model %q: create session on %s: %w", ErrProviderUnavailable, cfg.Name, cfg.Device, err)
			}
			return nil
		})
	} else if err = create(); err != nil {
		err = fmt.Errorf("runtime: model %q: create session: %w", cfg.Name, err)
	}
	if err != nil {
		return nil, err
	}
	s.logger.Info("session created", "model", s.name, "device", s.device.String(),
		"intra_op_threads", s.threads, "inputs", len(info.Inputs), "outputs", len(info.Outputs), "batchable", s.batchable)
	return s, nil
}

// checkServable refuses models whose inputs or outputs cannot travel as
// Tensors.
func checkServable(info tensor.ModelInfo) error {
	if len(info.Inputs) == 0 || len(info.Outputs) == 0 {
		return fmt.Errorf("the model has %d inputs and %d outputs; it needs at least one of each", len(info.Inputs), len(info.Outputs))
	}
	for _, in := range info.Inputs {
		if !in.DType.Valid() {
			return fmt.Errorf("%w: input %q is %s", tensor.ErrUnsupportedDType, in.Name, in.ONNXType)
		}
		if len(in.Dims) == 0 {
			// onnxruntime_go builds raw-byte tensors through Shape.Validate,
			// which refuses rank 0.
			return fmt.Errorf("input %q is a scalar; only tensors of rank >= 1 can be passed", in.Name)
		}
	}
	for _, out := range info.Outputs {
		if !out.DType.Valid() {
			return fmt.Errorf("%w: output %q is %s", tensor.ErrUnsupportedDType, out.Name, out.ONNXType)
		}
		if out.DType == tensor.FP16 && !preallocatable(out.Dims) {
			// onnxruntime_go v1.35.0 copies an onnxruntime-allocated
			// FLOAT16 output with one byte per element
			// (createTensorFromOrtValue), so building the Go tensor fails:
			// FP16 outputs must be pre-allocated, which needs their shape.
			return fmt.Errorf("%w: output %q is FP16 %s; onnxruntime_go v1.35.0 can only return FP16 outputs whose dims are static apart from dim 0",
				tensor.ErrUnsupportedDType, out.Name, tensor.FormatShape(out.Dims))
		}
	}
	return nil
}

// preallocatable reports whether an output's shape is known before a run
// once its row count is: rank >= 1, every dim static except maybe dim 0.
func preallocatable(dims []int64) bool {
	if len(dims) == 0 {
		return false
	}
	for _, d := range dims[1:] {
		if d < 0 {
			return false
		}
	}
	return true
}

func configureCPU(opts *ort.SessionOptions, cfg SessionConfig) error {
	if err := opts.SetExecutionMode(ort.ExecutionModeSequential); err != nil {
		return fmt.Errorf("execution mode: %w", err)
	}
	if err := opts.SetIntraOpNumThreads(cfg.IntraOpThreads); err != nil {
		return fmt.Errorf("intra-op threads: %w", err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return fmt.Errorf("inter-op threads: %w", err)
	}
	// Every failure is returned to the caller; onnxruntime printing it to
	// stderr as well would log it twice.
	if err := opts.SetLogSeverityLevel(ort.LoggingLevelFatal); err != nil {
		return fmt.Errorf("log severity: %w", err)
	}
	if cfg.NoSpin {
		if err := opts.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"); err != nil {
			return fmt.Errorf("allow_spinning: %w", err)
		}
	}
	return nil
}

// appendCUDA appends the TensorRT provider when asked, then the CUDA
// provider, both on cfg.Device: onnxruntime gives each node to the first
// provider that takes it. A library built with CUDA takes them directly; one
// built without (onnxruntime-unity's, which `make setup-gpu` installs) loads
// them as provider libraries from libDir (see appendPluginEPs).
func appendCUDA(opts *ort.SessionOptions, cfg SessionConfig, libDir string) error {
	err := appendCompiledInEPs(opts, cfg)
	if err != nil && strings.Contains(err.Error(), "not enabled in this build") {
		return appendPluginEPs(opts, cfg, libDir)
	}
	return err
}

// appendCompiledInEPs appends the providers of a library built with CUDA.
func appendCompiledInEPs(opts *ort.SessionOptions, cfg SessionConfig) error {
	if cfg.TensorRT {
		trt, err := ort.NewTensorRTProviderOptions()
		if err != nil {
			return fmt.Errorf("TensorRT: %w", err)
		}
		defer func() { _ = trt.Destroy() }()
		if err := trt.Update(map[string]string{"device_id": strconv.Itoa(cfg.Device.Index)}); err != nil {
			return fmt.Errorf("TensorRT: %w", err)
		}
		if err := opts.AppendExecutionProviderTensorRT(trt); err != nil {
			return fmt.Errorf("TensorRT: %w", err)
		}
	}
	cuda, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return err
	}
	defer func() { _ = cuda.Destroy() }()
	if err := cuda.Update(cudaOptions(cfg)); err != nil {
		return err
	}
	return opts.AppendExecutionProviderCUDA(cuda)
}

// cudaOptions returns the CUDA provider options of cfg, as onnxruntime
// names them; options left empty keep onnxruntime's defaults.
func cudaOptions(cfg SessionConfig) map[string]string {
	o := map[string]string{"device_id": strconv.Itoa(cfg.Device.Index)}
	if cfg.GPUMemLimit > 0 {
		o["gpu_mem_limit"] = strconv.FormatInt(cfg.GPUMemLimit, 10)
	}
	if cfg.CUDNNConvAlgoSearch != "" {
		o["cudnn_conv_algo_search"] = strings.ToUpper(cfg.CUDNNConvAlgoSearch)
	}
	switch strings.ToLower(cfg.ArenaExtendStrategy) {
	case "knextpoweroftwo":
		o["arena_extend_strategy"] = "kNextPowerOfTwo"
	case "ksameasrequested":
		o["arena_extend_strategy"] = "kSameAsRequested"
	}
	if cfg.DoCopyInDefaultStream != nil {
		o["do_copy_in_default_stream"] = strconv.Itoa(btoi(*cfg.DoCopyInDefaultStream))
	}
	return o
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Name returns the model name given in the config.
func (s *Session) Name() string { return s.name }

// Device returns the device the session runs on.
func (s *Session) Device() Device { return s.device }

// Info returns the model's inputs and outputs. The caller must not modify
// the returned slices.
func (s *Session) Info() tensor.ModelInfo { return s.info }

// IntraOpThreads returns the thread count onnxruntime was given.
func (s *Session) IntraOpThreads() int { return s.threads }

// LogValue describes the session in logs.
func (s *Session) LogValue() slog.Value {
	return slog.GroupValue(slog.String("model", s.name), slog.String("device", s.device.String()))
}

// Close waits for runs in flight, releases the onnxruntime session and
// drops its reference on the environment. Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.sess.Destroy()
	if rerr := releaseORT(s.logger); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("runtime: model %q: close: %w", s.name, err)
	}
	return nil
}

// Run runs one item: inputs by name, and the outputs to return (all when
// none are named). A request error is a *batch.InputError.
func (s *Session) Run(ctx context.Context, inputs []tensor.Tensor, outputs ...string) ([]tensor.Tensor, error) {
	r := s.RunBatch(ctx, []batch.Item{{Inputs: inputs, Outputs: outputs}})
	return r[0].Outputs, r[0].Err
}

// Warmup runs one synthetic item of batch rows (zeros; empty strings for
// BYTES), with every dynamic dim other than dim 0 taken as 1, so that
// onnxruntime allocates its arenas and picks its kernels before real
// traffic arrives.
func (s *Session) Warmup(ctx context.Context, batch int) error {
	if batch < 1 {
		batch = 1
	}
	in := make([]tensor.Tensor, len(s.info.Inputs))
	for i, mi := range s.info.Inputs {
		shape := make([]int64, len(mi.Dims))
		for j, d := range mi.Dims {
			switch {
			case d >= 0:
				shape[j] = d
			case j == 0:
				shape[j] = int64(batch)
			default:
				shape[j] = 1
			}
		}
		n := tensor.NumElements(shape)
		size := int64(mi.DType.Size())
		if mi.DType == tensor.BYTES {
			size = 4 // a zero length per element
		}
		in[i] = tensor.Tensor{Name: mi.Name, DType: mi.DType, Shape: shape, Data: make([]byte, n*size)}
	}
	if _, err := s.Run(ctx, in); err != nil {
		return fmt.Errorf("runtime: model %q: warm-up with batch %d: %w", s.name, batch, err)
	}
	s.logger.Debug("session warmed up", "model", s.name, "device", s.device.String(), "batch", batch)
	return nil
}
