package runtime_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

// libPath finds the onnxruntime library the way the tests are told to:
// INFERQ_ORT_LIB, else ../lib.
func libPath() (string, error) {
	return runtime.LocateLibrary(runtime.LibrarySearch{Env: os.Getenv("INFERQ_ORT_LIB"), WorkDir: ".."})
}

// newEnv returns an Env closed at cleanup, or skips t when the library is
// absent.
func newEnv(t testing.TB) *runtime.Env {
	t.Helper()
	p, err := libPath()
	if err != nil {
		t.Skipf("onnxruntime library not available (set INFERQ_ORT_LIB or run `make setup`): %v", err)
	}
	env, err := runtime.NewEnv(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	})
	return env
}

// newSession opens model on the CPU with one intra-op thread (the CPUs are
// shared), closed at cleanup.
func newSession(t testing.TB, env *runtime.Env, name string, model []byte) *runtime.Session {
	t.Helper()
	s, err := runtime.NewSession(env, runtime.SessionConfig{Name: name, Model: model, IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// resnet18 is generated once per test binary: it takes seconds.
var resnet18 = sync.OnceValue(examples.ResNet18)

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func mlpItem(r *rand.Rand, rows int) batch.Item {
	return batch.Item{Inputs: []tensor.Tensor{
		tensor.NewTensor("x", []int64{int64(rows), examples.MLPInputs}, randFloats(r, rows*examples.MLPInputs)),
	}}
}

func multiTypeItem(r *rand.Rand, rows int) batch.Item {
	ids := make([]int64, rows*examples.MultiTypeIDs)
	for i := range ids {
		ids[i] = r.Int64N(1000) - 500
	}
	return batch.Item{Inputs: []tensor.Tensor{
		// Not in model order, on purpose.
		tensor.NewTensor("x", []int64{int64(rows), examples.MultiTypeX}, randFloats(r, rows*examples.MultiTypeX)),
		tensor.NewTensor("ids", []int64{int64(rows), examples.MultiTypeIDs}, ids),
	}}
}

// sameTensors fails t at the first difference between got and want.
func sameTensors(t testing.TB, what string, got, want []tensor.Tensor) {
	t.Helper()
	if err := diffTensors(got, want); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// diffTensors returns the first difference between got and want: names,
// dtypes and shapes exactly, floating point data within a relative
// tolerance (batched kernels may sum in another order), the rest exactly.
func diffTensors(got, want []tensor.Tensor) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.DType != w.DType || tensor.FormatShape(g.Shape) != tensor.FormatShape(w.Shape) {
			return fmt.Errorf("output %d is %s, want %s", i, g, w)
		}
		if g.DType != tensor.FP32 {
			if !bytes.Equal(g.Data, w.Data) {
				return fmt.Errorf("%s data differs:\n got %v\nwant %v", g.Name, g.Data, w.Data)
			}
			continue
		}
		gv, _ := tensor.Values[float32](g)
		wv, _ := tensor.Values[float32](w)
		if len(gv) != len(wv) {
			return fmt.Errorf("%s: %d values, want %d", g.Name, len(gv), len(wv))
		}
		for j := range gv {
			if d := math.Abs(float64(gv[j] - wv[j])); d > 1e-4*math.Max(1, math.Abs(float64(wv[j]))) {
				return fmt.Errorf("%s[%d] = %v, want %v", g.Name, j, gv[j], wv[j])
			}
		}
	}
	return nil
}
