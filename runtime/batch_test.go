package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

func rngFor(t testing.TB) *rand.Rand {
	var h uint64
	for _, c := range t.Name() {
		h = h*31 + uint64(c)
	}
	return rand.New(rand.NewPCG(h, 7))
}

// checkBatchedEqualsUnbatched runs items one by one and then all together,
// and compares item by item.
func checkBatchedEqualsUnbatched(t *testing.T, s *runtime.Session, items []batch.Item) {
	t.Helper()
	ctx := context.Background()
	want := make([][]tensor.Tensor, len(items))
	for i, it := range items {
		out, err := s.Run(ctx, it.Inputs, it.Outputs...)
		if err != nil {
			t.Fatalf("item %d alone: %v", i, err)
		}
		want[i] = out
	}
	res := s.RunBatch(ctx, items)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("item %d in batch: %v", i, r.Err)
		}
		sameTensors(t, fmt.Sprintf("item %d", i), r.Outputs, want[i])
		if got, want := r.Outputs[0].Rows(), items[i].Inputs[0].Rows(); got != want {
			t.Fatalf("item %d: %d output rows for %d input rows", i, got, want)
		}
	}
}

func TestBatchedEqualsUnbatched(t *testing.T) {
	env := newEnv(t)
	t.Run("mlp", func(t *testing.T) {
		s := newSession(t, env, "mlp", examples.MLP())
		r := rngFor(t)
		var items []batch.Item
		for _, rows := range []int{1, 3, 1, 2, 5, 1, 1, 4} {
			items = append(items, mlpItem(r, rows))
		}
		checkBatchedEqualsUnbatched(t, s, items)
	})
	t.Run("multitype", func(t *testing.T) {
		s := newSession(t, env, "multitype", examples.MultiType())
		r := rngFor(t)
		var items []batch.Item
		for i, rows := range []int{2, 1, 3, 1} {
			it := multiTypeItem(r, rows)
			switch i {
			case 1:
				it.Outputs = []string{"y"}
			case 2:
				it.Outputs = []string{"y", "ids_sum"}
			}
			items = append(items, it)
		}
		checkBatchedEqualsUnbatched(t, s, items)
		// The sums are what the model says they are.
		out, err := s.Run(context.Background(), items[0].Inputs, "ids_sum")
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := tensor.Values[int64](items[0].Inputs[1])
		sums, _ := tensor.Values[int64](out[0])
		for row := range 2 {
			var want int64
			for _, v := range ids[row*8 : row*8+8] {
				want += v
			}
			if sums[row] != want {
				t.Fatalf("ids_sum[%d] = %d, want %d", row, sums[row], want)
			}
		}
	})
	t.Run("resnet18", func(t *testing.T) {
		s := newSession(t, env, "resnet18", resnet18())
		r := rngFor(t)
		var items []batch.Item
		for _, rows := range []int{1, 2, 1} {
			items = append(items, batch.Item{Inputs: []tensor.Tensor{
				tensor.NewTensor("input", []int64{int64(rows), 3, 224, 224}, randFloats(r, rows*3*224*224)),
			}})
		}
		checkBatchedEqualsUnbatched(t, s, items)
	})
}

// identityValues returns n elements of dtype as raw bytes, varied enough
// to catch a misplaced byte.
func identityData(r *rand.Rand, dtype tensor.DType, shape []int64) tensor.Tensor {
	n := int(tensor.NumElements(shape))
	if dtype == tensor.BYTES {
		elems := make([][]byte, n)
		for i := range elems {
			elems[i] = fmt.Appendf(nil, "s%d-%x", i, r.Uint32()>>(r.IntN(32)))
			if i%5 == 3 {
				elems[i] = nil // empty strings travel too
			}
		}
		return tensor.NewBytesTensor("in", shape, elems)
	}
	data := make([]byte, n*dtype.Size())
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if dtype == tensor.BOOL {
		for i := range data {
			data[i] &= 1
		}
	}
	if dtype == tensor.FP16 {
		for i := 1; i < len(data); i += 2 {
			data[i] &= 0x7b // finite halves: no NaN payloads to canonicalise
		}
	}
	return tensor.Tensor{Name: "in", DType: dtype, Shape: shape, Data: data}
}

// TestDTypeRoundTrip sends every supported datatype through identity
// models, alone and batched, with static per-item dims (outputs
// pre-allocated) and dynamic ones (outputs allocated by onnxruntime, items
// grouped by their per-item dims).
func TestDTypeRoundTrip(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	for _, dt := range examples.DataTypes() {
		dtype, ok := tensor.DTypeFromONNX(int32(dt))
		if !ok {
			t.Fatalf("examples type %v has no DType", dt)
		}
		t.Run(dtype.String(), func(t *testing.T) {
			r := rngFor(t)
			type tcase struct {
				s      *runtime.Session
				shapes [][]int64
			}
			cases := []tcase{{
				newSession(t, env, "static", examples.Identity("static", dt, []int64{3, 2})),
				[][]int64{{1, 3, 2}, {2, 3, 2}, {1, 3, 2}},
			}}
			dynModel := examples.Identity("dynamic", dt, []int64{-1, 2})
			if dtype == tensor.FP16 {
				// onnxruntime_go v1.35.0 cannot hand over an FP16 output that
				// onnxruntime allocated; NewSession says so up front.
				_, err := runtime.NewSession(env, runtime.SessionConfig{Name: "dynamic", Model: dynModel})
				if !errors.Is(err, tensor.ErrUnsupportedDType) || !strings.Contains(err.Error(), `output "out" is FP16 [-1,-1,2]`) {
					t.Fatalf("FP16 output with dynamic dims: %v", err)
				}
			} else {
				// Three groups: per-item dims [1,2], [4,2] and [3,2],
				// interleaved.
				cases = append(cases, tcase{
					newSession(t, env, "dynamic", dynModel),
					[][]int64{{1, 1, 2}, {1, 1, 2}, {2, 4, 2}, {3, 1, 2}, {2, 3, 2}, {1, 4, 2}, {1, 1, 2}},
				})
			}
			for _, tc := range cases {
				items := make([]batch.Item, len(tc.shapes))
				for i, sh := range tc.shapes {
					items[i] = batch.Item{Inputs: []tensor.Tensor{identityData(r, dtype, sh)}}
				}
				for i, res := range tc.s.RunBatch(ctx, items) {
					if res.Err != nil {
						t.Fatalf("%s item %d: %v", tc.s.Name(), i, res.Err)
					}
					in, out := items[i].Inputs[0], res.Outputs[0]
					want := tensor.Tensor{Name: "out", DType: in.DType, Shape: in.Shape, Data: in.Data}
					sameTensors(t, fmt.Sprintf("%s item %d", tc.s.Name(), i), []tensor.Tensor{out}, []tensor.Tensor{want})
				}
				checkBatchedEqualsUnbatched(t, tc.s, items)
			}
		})
	}
}

// TestBytesNUL shows the limit of BYTES through onnxruntime_go: an element
// with a NUL byte is refused (per item) rather than cut short.
func TestBytesNUL(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "bytes", examples.Identity("bytes", examples.String, []int64{2}))
	good := tensor.NewBytesTensor("in", []int64{1, 2}, [][]byte{[]byte("héllo"), []byte("")})
	bad := tensor.NewBytesTensor("in", []int64{1, 2}, [][]byte{[]byte("a\x00b"), []byte("c")})
	res := s.RunBatch(context.Background(), []batch.Item{{Inputs: []tensor.Tensor{good}}, {Inputs: []tensor.Tensor{bad}}})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if elems, _ := tensor.BytesElements(res[0].Outputs[0]); len(elems) != 2 || string(elems[0]) != "héllo" {
		t.Fatalf("round trip gave %q", elems)
	}
	if !errors.Is(res[1].Err, batch.ErrInvalidInput) || !strings.Contains(res[1].Err.Error(), "NUL") {
		t.Fatalf("NUL element: %v", res[1].Err)
	}
}

// TestInputErrors sends one bad item between two good ones: the bad one
// gets an error naming the input, the expected and the received datatype
// and shape; the good ones run.
func TestInputErrors(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "multitype", examples.MultiType())
	r := rngFor(t)
	ids := func(shape ...int64) tensor.Tensor {
		return tensor.NewTensor("ids", shape, make([]int64, tensor.NumElements(shape)))
	}
	x := func(shape ...int64) tensor.Tensor {
		return tensor.NewTensor("x", shape, make([]float32, tensor.NumElements(shape)))
	}
	tests := []struct {
		name    string
		item    batch.Item
		wantErr string
	}{
		{"wrong dtype", batch.Item{Inputs: []tensor.Tensor{ids(1, 8), tensor.NewTensor("x", []int64{1, 4}, make([]float64, 4))}},
			`input "x": expected FP32 [-1,4], got FP64 [1,4]`},
		{"wrong rank", batch.Item{Inputs: []tensor.Tensor{ids(1, 8), x(4)}},
			`input "x": expected FP32 [-1,4], got FP32 [4]`},
		{"wrong dims", batch.Item{Inputs: []tensor.Tensor{ids(1, 7), x(1, 4)}},
			`input "ids": expected INT64 [-1,8], got INT64 [1,7]`},
		{"zero rows", batch.Item{Inputs: []tensor.Tensor{ids(0, 8), x(0, 4)}},
			`input "ids": expected INT64 [-1,8], got INT64 [0,8]: every dim must be at least 1`},
		{"short data", batch.Item{Inputs: []tensor.Tensor{ids(1, 8), {Name: "x", DType: tensor.FP32, Shape: []int64{2, 4}, Data: make([]byte, 16)}}},
			`input "x": expected FP32 [-1,4], got FP32 [2,4]: data is 16 bytes, the shape needs 32`},
		{"missing input", batch.Item{Inputs: []tensor.Tensor{ids(1, 8)}},
			`input "x": missing, expected FP32 [-1,4]`},
		{"unknown input", batch.Item{Inputs: []tensor.Tensor{ids(1, 8), x(1, 4), tensor.NewTensor("z", []int64{1}, []float32{1})}},
			`input "z": unknown; the model takes ids INT64 [-1,8], x FP32 [-1,4]`},
		{"input twice", batch.Item{Inputs: []tensor.Tensor{ids(1, 8), x(1, 4), x(1, 4)}},
			`input "x": given twice`},
		{"rows differ between inputs", batch.Item{Inputs: []tensor.Tensor{ids(2, 8), x(1, 4)}},
			`input "x": expected FP32 [-1,4], got FP32 [1,4]: dim 0 (rows) is 1 but input "ids" has 2`},
		{"unknown output", batch.Item{Inputs: []tensor.Tensor{ids(1, 8), x(1, 4)}, Outputs: []string{"y", "logits"}},
			`output "logits": unknown; the model outputs ids_sum INT64 [-1,1], y FP32 [-1,4]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good1, good2 := multiTypeItem(r, 1), multiTypeItem(r, 2)
			res := s.RunBatch(context.Background(), []batch.Item{good1, tt.item, good2})
			if res[0].Err != nil || res[2].Err != nil {
				t.Fatalf("good items failed: %v / %v", res[0].Err, res[2].Err)
			}
			if res[0].Outputs[1].Rows() != 1 || res[2].Outputs[1].Rows() != 2 {
				t.Fatalf("good items got %v and %v", res[0].Outputs, res[2].Outputs)
			}
			err := res[1].Err
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("error\n got %v\nwant %s", err, tt.wantErr)
			}
			var ie *batch.InputError
			if !errors.Is(err, batch.ErrInvalidInput) || !errors.As(err, &ie) {
				t.Fatalf("%v is not an *InputError wrapping ErrInvalidInput", err)
			}
		})
	}
}

func TestCancelledContext(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "mlp", examples.MLP())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := rngFor(t)
	for i, res := range s.RunBatch(ctx, []batch.Item{mlpItem(r, 1), mlpItem(r, 2)}) {
		if !errors.Is(res.Err, context.Canceled) {
			t.Fatalf("item %d: %v, want context.Canceled", i, res.Err)
		}
	}
	if res := s.RunBatch(ctx, nil); len(res) != 0 {
		t.Fatalf("empty batch gave %d results", len(res))
	}
}

// TestConcurrentRuns runs one session from 16 goroutines with mixed batch
// sizes and compares with the results of sequential single-item runs. Run
// it with -race.
func TestConcurrentRuns(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "mlp", examples.MLP())
	r := rngFor(t)
	const goroutines, batchesEach = 16, 6
	type job struct {
		items []batch.Item
		want  [][]tensor.Tensor
	}
	jobs := make([][]job, goroutines)
	for g := range jobs {
		for b := range batchesEach {
			var j job
			for range 1 + (g+b)%7 {
				it := mlpItem(r, 1+r.IntN(3))
				out, err := s.Run(context.Background(), it.Inputs)
				if err != nil {
					t.Fatal(err)
				}
				j.items = append(j.items, it)
				j.want = append(j.want, out)
			}
			jobs[g] = append(jobs[g], j)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range jobs {
		wg.Go(func() {
			for b, j := range jobs[g] {
				for i, res := range s.RunBatch(context.Background(), j.items) {
					if res.Err != nil {
						errs <- fmt.Errorf("goroutine %d batch %d item %d: %w", g, b, i, res.Err)
						return
					}
					if err := diffTensors(res.Outputs, j.want[i]); err != nil {
						errs <- fmt.Errorf("goroutine %d batch %d item %d: %w", g, b, i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
