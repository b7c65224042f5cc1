package examples

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

// errNoORT is set by TestMain when the onnxruntime library could not be
// loaded; tests that run models skip with it. ORT's environment is
// process-global, so it is initialised once per test binary.
var errNoORT error

func TestMain(m *testing.M) {
	lib := os.Getenv("INFERQ_ORT_LIB")
	if lib == "" {
		lib = filepath.Join("..", "..", "lib", "libonnxruntime.so.1")
	}
	if _, err := os.Stat(lib); err != nil {
		errNoORT = fmt.Errorf("onnxruntime library not found (set INFERQ_ORT_LIB): %w", err)
	} else {
		ort.SetSharedLibraryPath(lib)
		if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
			errNoORT = fmt.Errorf("initialise onnxruntime from %s: %w", lib, err)
		}
	}
	code := m.Run()
	if errNoORT == nil {
		if err := ort.DestroyEnvironment(); err != nil {
			fmt.Fprintln(os.Stderr, "destroy onnxruntime environment:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needORT skips t when onnxruntime is not available.
func needORT(t testing.TB) {
	t.Helper()
	if errNoORT != nil {
		t.Skip(errNoORT)
	}
}

// newSession opens model with one intra-op thread (CPU is shared in CI).
func newSession(t testing.TB, model []byte, inputs, outputs []string) *ort.DynamicAdvancedSession {
	t.Helper()
	opts, err := ort.NewSessionOptions()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = opts.Destroy() }()
	if err := opts.SetIntraOpNumThreads(1); err != nil {
		t.Fatal(err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		t.Fatal(err)
	}
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(model, inputs, outputs, opts)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// run runs s on inputs and returns its nOut outputs, allocated by ORT and
// destroyed at cleanup.
func run(t testing.TB, s *ort.DynamicAdvancedSession, nOut int, inputs ...ort.Value) []ort.Value {
	t.Helper()
	return runInto(t, s, inputs, make([]ort.Value, nOut))
}

// runInto runs s with the given outputs; ORT allocates the nil entries, which
// are destroyed at cleanup.
func runInto(t testing.TB, s *ort.DynamicAdvancedSession, inputs, outputs []ort.Value) []ort.Value {
	t.Helper()
	allocated := make([]bool, len(outputs))
	for i, v := range outputs {
		allocated[i] = v == nil
	}
	if err := s.Run(inputs, outputs); err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() {
		for i, v := range outputs {
			if allocated[i] && v != nil {
				_ = v.Destroy()
			}
		}
	})
	return outputs
}

// destroyLater destroys v at cleanup.
func destroyLater[V interface{ Destroy() error }](t testing.TB, v V, err error) V {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return v
}
