package runtime

import (
	"fmt"
	"os"
	"testing"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/tensor"
)

// BenchmarkAssembleSplit measures what batching adds around a run, per
// item: validation, grouping, the concatenated input tensor (one buffer, one
// onnxruntime value) and the split of the outputs into per-item tensors.
// ns/item is the figure to read.
func BenchmarkAssembleSplit(b *testing.B) {
	lib, err := LocateLibrary(LibrarySearch{Env: os.Getenv("INFERQ_ORT_LIB"), WorkDir: ".."})
	if err != nil {
		b.Skipf("onnxruntime library not available: %v", err)
	}
	env, err := NewEnv(lib, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Close() }()
	s, err := NewSession(env, SessionConfig{Name: "mlp", Model: examples.MLP(), IntraOpThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()

	for _, n := range []int{1, 8, 64} {
		items := make([]batch.Item, n)
		for i := range items {
			items[i] = batch.Item{Inputs: []tensor.Tensor{tensor.NewTensor("x", []int64{1, examples.MLPInputs}, make([]float32, examples.MLPInputs))}}
		}
		res := make([]batch.ItemResult, n)
		b.Run(fmt.Sprintf("step=assemble/batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				sc := s.getScratch(n)
				preps, groups := s.prepareAll(items, res, sc)
				v, err := s.assembleInput(0, preps, groups[0], int64(n))
				if err != nil {
					b.Fatal(err)
				}
				_ = v.Destroy()
				s.putScratch(sc)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/item")
		})
		preps, groups := s.prepareAll(items, res, s.getScratch(n))
		outs := []tensor.Tensor{{Name: "probs", DType: tensor.FP32, Shape: []int64{int64(n), examples.MLPClasses}, Data: make([]byte, n*examples.MLPClasses*4)}}
		b.Run(fmt.Sprintf("step=split/batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := s.split(outs, preps, groups[0], res); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/item")
		})
	}
}
