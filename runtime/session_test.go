package runtime_test

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

// TestEnvLifecycle opens and closes several Envs and sessions in every
// order: the environment lives until the last user is done, and can be
// loaded again after.
func TestEnvLifecycle(t *testing.T) {
	p, err := libPath()
	if err != nil {
		t.Skipf("onnxruntime library not available (set INFERQ_ORT_LIB or run `make setup`): %v", err)
	}
	for round := range 3 {
		a, err := runtime.NewEnv(p, nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		b, err := runtime.NewEnv(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.Version() == "" || a.Version() != b.Version() {
			t.Fatalf("versions %q %q", a.Version(), b.Version())
		}
		s, err := runtime.NewSession(a, runtime.SessionConfig{Name: "mlp", Model: examples.MLP(), IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		// The session outlives both Envs.
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil { // idempotent
			t.Fatal(err)
		}
		if _, err := runtime.NewSession(a, runtime.SessionConfig{Model: examples.MLP()}); !errors.Is(err, runtime.ErrClosed) {
			t.Fatalf("NewSession on a closed Env: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		r := rngFor(t)
		if _, err := s.Run(context.Background(), mlpItem(r, 2).Inputs); err != nil {
			t.Fatalf("run after the Envs closed: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(context.Background(), mlpItem(r, 1).Inputs); !errors.Is(err, runtime.ErrClosed) {
			t.Fatalf("run on a closed session: %v", err)
		}
	}

	// While one Env is open, another library cannot be loaded.
	env := newEnv(t)
	link := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	if err := os.Symlink(env.LibraryPath(), link); err != nil {
		t.Fatal(err)
	}
	if e2, err := runtime.NewEnv(link, nil); err == nil {
		_ = e2.Close()
		t.Fatal("a second library path was accepted")
	} else if !strings.Contains(err.Error(), "already loaded") {
		t.Fatalf("second library: %v", err)
	}
}

func TestSessionInfo(t *testing.T) {
	env := newEnv(t)
	dir := t.TempDir()
	paths, err := examples.Write(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]tensor.ModelInfo{
		"mlp": {
			Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 16}, ONNXType: "FLOAT"}},
			Outputs: []tensor.TensorInfo{{Name: "probs", DType: tensor.FP32, Dims: []int64{-1, 4}, ONNXType: "FLOAT"}},
		},
		"multitype": {
			Inputs: []tensor.TensorInfo{
				{Name: "ids", DType: tensor.INT64, Dims: []int64{-1, 8}, ONNXType: "INT64"},
				{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 4}, ONNXType: "FLOAT"},
			},
			Outputs: []tensor.TensorInfo{
				{Name: "ids_sum", DType: tensor.INT64, Dims: []int64{-1, 1}, ONNXType: "INT64"},
				{Name: "y", DType: tensor.FP32, Dims: []int64{-1, 4}, ONNXType: "FLOAT"},
			},
		},
	}
	for _, p := range paths {
		inspected, err := env.Inspect(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := runtime.NewSession(env, runtime.SessionConfig{Path: p, ConcurrentSessions: 2, CPUs: 4})
		if err != nil {
			t.Fatal(err)
		}
		name := s.Name() // from the file name
		w, ok := want[name]
		if !ok {
			t.Fatalf("session name %q from %s", name, p)
		}
		for _, got := range []tensor.ModelInfo{inspected, s.Info()} {
			if describe(got) != describe(w) {
				t.Errorf("%s: info\n got %s\nwant %s", name, describe(got), describe(w))
			}
		}
		if s.IntraOpThreads() != 2 || s.Device() != runtime.CPU() {
			t.Errorf("%s: threads %d device %v; want 4 CPUs / 2 sessions on cpu", name, s.IntraOpThreads(), s.Device())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Inspect(filepath.Join(dir, "missing.onnx")); err == nil {
		t.Fatal("Inspect of a missing file: no error")
	}
	if _, err := runtime.NewSession(env, runtime.SessionConfig{Name: "junk", Model: []byte("not onnx")}); err == nil || !strings.Contains(err.Error(), `model "junk"`) {
		t.Fatalf("junk model: %v", err)
	}
	info, err := env.InspectData(examples.Identity("id", examples.String, []int64{-1, 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Inputs[0].String(); got != "in BYTES [-1,-1,2]" {
		t.Fatalf("identity input %s", got)
	}
}

func describe(m tensor.ModelInfo) string {
	var b strings.Builder
	for _, l := range [][]tensor.TensorInfo{m.Inputs, m.Outputs} {
		for _, ti := range l {
			b.WriteString(ti.String() + "(" + ti.ONNXType + ") ")
		}
		b.WriteString("| ")
	}
	return b.String()
}

// TestCUDAUnavailable asks for CUDA from the CPU-only library: a clear
// error naming the model and onnxruntime's reason, no panic, and Go's
// signal handling intact afterwards.
func TestCUDAUnavailable(t *testing.T) {
	env := newEnv(t)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	defer signal.Stop(sigs)

	s, err := runtime.NewSession(env, runtime.SessionConfig{
		Name: "mlp", Model: examples.MLP(), Device: runtime.CUDA(0),
		GPUMemLimit: 1 << 30, CUDNNConvAlgoSearch: "heuristic",
	})
	if err == nil {
		_ = s.Close()
		t.Skip("this onnxruntime library has a working CUDA provider")
	}
	t.Log(err)
	if !errors.Is(err, runtime.ErrProviderUnavailable) {
		t.Fatalf("error does not wrap ErrProviderUnavailable: %v", err)
	}
	for _, want := range []string{`model "mlp"`, "CUDA", "cuda:0", "onnxruntime_providers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sigs:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGUSR1 not delivered to Go after the CUDA attempt")
	}

	// Config errors come before onnxruntime is asked.
	if _, err := runtime.NewSession(env, runtime.SessionConfig{Model: examples.MLP(), Device: runtime.CUDA(0), CUDNNConvAlgoSearch: "fast"}); err == nil || !strings.Contains(err.Error(), "cudnn_conv_algo_search") {
		t.Fatalf("bad cudnn_conv_algo_search: %v", err)
	}
}

func TestParseDevice(t *testing.T) {
	for in, want := range map[string]runtime.Device{"cpu": runtime.CPU(), "CUDA": runtime.CUDA(0), "cuda:3": runtime.CUDA(3)} {
		if d, err := runtime.ParseDevice(in); err != nil || d != want {
			t.Errorf("ParseDevice(%q) = %v, %v", in, d, err)
		}
		if d, _ := runtime.ParseDevice(want.String()); d != want {
			t.Errorf("%v does not round-trip", want)
		}
	}
	for _, in := range []string{"", "gpu", "cuda:-1", "cuda:x"} {
		if _, err := runtime.ParseDevice(in); err == nil {
			t.Errorf("ParseDevice(%q): no error", in)
		}
	}
}

func TestWarmup(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	models := map[string][]byte{
		"mlp":       examples.MLP(),
		"multitype": examples.MultiType(),
		"fp16":      examples.Identity("fp16", examples.Float16, []int64{2, 3}),
		"dyn_uint8": examples.Identity("dyn_uint8", examples.Uint8, []int64{-1, 3}),
		"dyn_bytes": examples.Identity("dyn_bytes", examples.String, []int64{2, -1}),
	}
	for name, m := range models {
		s := newSession(t, env, name, m)
		for _, batch := range []int{0, 1, 8} {
			if err := s.Warmup(ctx, batch); err != nil {
				t.Errorf("%s: Warmup(%d): %v", name, batch, err)
			}
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	s := newSession(t, env, "mlp", examples.MLP())
	if err := s.Warmup(cancelled, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("Warmup with a cancelled context: %v", err)
	}
}
