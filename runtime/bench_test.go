package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

// The benchmarks compare a batch of N one-row items through
// Session.RunBatch (validation, concatenation, run, split) with the same
// batch run through onnxruntime_go directly, the input already
// concatenated: per run one input tensor over the data, one output tensor,
// Run, Destroy. Both use one intra-op thread and sequential execution.
// impl=inferq-1item sends the batch as one item of N rows, which shows the
// Session's own cost apart from concatenation and split.
//
//	go test -run '^$' -bench 'MLP|ResNet18' -benchtime 200x -count 6 ./runtime/ | tee new.txt
//	benchstat -col /impl new.txt

func BenchmarkMLP(b *testing.B) {
	benchModel(b, "mlp", examples.MLP(), "x", "probs", []int64{examples.MLPInputs}, []int64{examples.MLPClasses},
		[]int{1, 2, 4, 8, 16, 32, 64})
}

func BenchmarkResNet18(b *testing.B) {
	benchModel(b, "resnet18", resnet18(), "input", "logits", []int64{3, 224, 224}, []int64{examples.ResNetClasses},
		[]int{1, 2, 4, 8, 16})
}

func benchModel(b *testing.B, name string, model []byte, in, out string, inDims, outDims []int64, batches []int) {
	env := newEnv(b)
	s, err := runtime.NewSession(env, runtime.SessionConfig{Name: name, Model: model, IntraOpThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	raw := newRawSession(b, model, in, out)
	perItem := int(tensor.NumElements(inDims))
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()

	for _, n := range batches {
		data := randFloats(r, n*perItem)
		items := make([]batch.Item, n)
		for i := range items {
			items[i] = batch.Item{Inputs: []tensor.Tensor{
				tensor.NewTensor(in, append([]int64{1}, inDims...), data[i*perItem:(i+1)*perItem]),
			}}
		}
		inShape := append(ort.Shape{int64(n)}, inDims...)
		outShape := append(ort.Shape{int64(n)}, outDims...)
		if err := s.Warmup(ctx, n); err != nil {
			b.Fatal(err)
		}

		b.Run(fmt.Sprintf("impl=inferq/batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				res := s.RunBatch(ctx, items)
				if res[0].Err != nil {
					b.Fatal(res[0].Err)
				}
			}
		})
		// One item of n rows: the Session without concatenation or split.
		one := []batch.Item{{Inputs: []tensor.Tensor{tensor.NewTensor(in, append([]int64{int64(n)}, inDims...), data)}}}
		b.Run(fmt.Sprintf("impl=inferq-1item/batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				res := s.RunBatch(ctx, one)
				if res[0].Err != nil {
					b.Fatal(res[0].Err)
				}
			}
		})
		b.Run(fmt.Sprintf("impl=raw/batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				x, err := ort.NewTensor(inShape, data)
				if err != nil {
					b.Fatal(err)
				}
				y, err := ort.NewEmptyTensor[float32](outShape)
				if err != nil {
					b.Fatal(err)
				}
				if err := raw.Run([]ort.Value{x}, []ort.Value{y}); err != nil {
					b.Fatal(err)
				}
				_ = x.Destroy()
				_ = y.Destroy()
			}
		})
	}
}

// newRawSession opens model through onnxruntime_go with the options a
// Session uses.
func newRawSession(b *testing.B, model []byte, in, out string) *ort.DynamicAdvancedSession {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = opts.Destroy() }()
	for _, err := range []error{
		opts.SetExecutionMode(ort.ExecutionModeSequential),
		opts.SetIntraOpNumThreads(1),
		opts.SetInterOpNumThreads(1),
	} {
		if err != nil {
			b.Fatal(err)
		}
	}
	raw, err := ort.NewDynamicAdvancedSessionWithONNXData(model, []string{in}, []string{out}, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Destroy() })
	return raw
}
