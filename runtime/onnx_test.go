package runtime_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
)

// A few ONNX models that package examples has no reason to carry: ones
// that fail at run time for some items, and ones whose output does not
// follow the batch. Encoded by hand (ModelProto, IR 9, opset 17).

type pb []byte

func (b pb) bytes(num protowire.Number, v []byte) pb {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func (b pb) str(num protowire.Number, s string) pb { return b.bytes(num, []byte(s)) }

func (b pb) int(num protowire.Number, v int64) pb {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// valueInfo encodes a tensor ValueInfoProto; a negative dim is symbolic.
func valueInfo(name string, elemType int64, dims ...int64) pb {
	var shape pb
	for i, d := range dims {
		var dim pb
		if d < 0 {
			dim = dim.str(2, name+string(rune('0'+i))) // symbols differ between tensors
		} else {
			dim = dim.int(1, d)
		}
		shape = shape.bytes(1, dim)
	}
	tensorType := pb{}.int(1, elemType).bytes(2, shape)
	return pb{}.str(1, name).bytes(2, pb{}.bytes(1, tensorType))
}

func node(op string, inputs, outputs []string, attrs ...pb) pb {
	var n pb
	for _, in := range inputs {
		n = n.str(1, in)
	}
	for _, out := range outputs {
		n = n.str(2, out)
	}
	n = n.str(3, op).str(4, op)
	for _, a := range attrs {
		n = n.bytes(5, a)
	}
	return n
}

func initializer(name string, elemType int64, raw []byte, dims ...int64) pb {
	var t pb
	for _, d := range dims {
		t = t.int(1, d)
	}
	return t.int(2, elemType).str(8, name).bytes(9, raw)
}

func model(nodes, inits, inputs, outputs []pb) []byte {
	g := pb{}
	for _, n := range nodes {
		g = g.bytes(1, n)
	}
	g = g.str(2, "test")
	for _, i := range inits {
		g = g.bytes(5, i)
	}
	for _, i := range inputs {
		g = g.bytes(11, i)
	}
	for _, o := range outputs {
		g = g.bytes(12, o)
	}
	return pb{}.int(1, 9).bytes(7, g).bytes(8, pb{}.str(1, "").int(2, 17))
}

const (
	onnxFloat = 1
	onnxInt64 = 7
)

// gatherModel: out FP32 [N,1] = table[idx], table = {10,20,30,40}; an index
// out of range fails the run.
func gatherModel() []byte {
	table := make([]byte, 0, 16)
	for _, v := range []float32{10, 20, 30, 40} {
		table = binary.LittleEndian.AppendUint32(table, math.Float32bits(v))
	}
	return model(
		[]pb{node("Gather", []string{"table", "idx"}, []string{"out"}, pb{}.str(1, "axis").int(3, 0).int(20, 2))},
		[]pb{initializer("table", onnxFloat, table, 4)},
		[]pb{valueInfo("idx", onnxInt64, -1, 1)},
		[]pb{valueInfo("out", onnxFloat, -1, 1)},
	)
}

// concatModel: out FP32 [M,4] = x stacked on itself along dim 0, so M is
// 2N: an output whose dim 0 does not follow the batch, which shape
// inference cannot tell.
func concatModel() []byte {
	return model(
		[]pb{node("Concat", []string{"x", "x"}, []string{"out"}, pb{}.str(1, "axis").int(3, 0).int(20, 2))},
		nil,
		[]pb{valueInfo("x", onnxFloat, -1, 4)},
		[]pb{valueInfo("out", onnxFloat, -1, 4)},
	)
}

// TestRunFailureIsolated: a batch whose run fails is halved until the
// failing items are found; only they fail.
func TestRunFailureIsolated(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "gather", gatherModel())
	idx := func(v ...int64) batch.Item {
		return batch.Item{Inputs: []tensor.Tensor{tensor.NewTensor("idx", []int64{int64(len(v)), 1}, v)}}
	}
	items := []batch.Item{idx(1), idx(9), idx(2, 3), idx(0), idx(3, -7, 1), idx(3)}
	want := map[int][]float32{0: {20}, 2: {30, 40}, 3: {10}, 5: {40}}
	for i, r := range s.RunBatch(context.Background(), items) {
		w, ok := want[i]
		if !ok {
			if r.Err == nil || !strings.Contains(r.Err.Error(), `model "gather"`) {
				t.Errorf("item %d: error %v, want a run error", i, r.Err)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
		got, _ := tensor.Values[float32](r.Outputs[0])
		if len(got) != len(w) || got[0] != w[0] || got[len(got)-1] != w[len(w)-1] {
			t.Errorf("item %d: %v, want %v", i, got, w)
		}
	}
}

// TestOutputNotFollowingBatch: an output declared [-1,4] that is really
// [2N,4] defeats pre-allocation and splitting; the session falls back to
// onnxruntime-allocated outputs and one run per item, and stays correct.
func TestOutputNotFollowingBatch(t *testing.T) {
	env := newEnv(t)
	s := newSession(t, env, "concat", concatModel())
	if got := s.Info().Outputs[0].String(); got != "out FP32 [-1,4]" {
		t.Fatalf("output declared %s", got)
	}
	r := rngFor(t)
	for round := range 2 { // the second round starts with the fallbacks on
		items := []batch.Item{mlpLike(r, 2), mlpLike(r, 3), mlpLike(r, 1)}
		for i, res := range s.RunBatch(context.Background(), items) {
			if res.Err != nil {
				t.Fatalf("round %d item %d: %v", round, i, res.Err)
			}
			in := items[i].Inputs[0]
			want := tensor.Tensor{Name: "out", DType: tensor.FP32, Shape: []int64{2 * in.Rows(), 4}, Data: append(append([]byte{}, in.Data...), in.Data...)}
			sameTensors(t, fmt.Sprintf("round %d item %d", round, i), res.Outputs, []tensor.Tensor{want})
		}
	}
}

func mlpLike(r *rand.Rand, rows int) batch.Item {
	return batch.Item{Inputs: []tensor.Tensor{tensor.NewTensor("x", []int64{int64(rows), 4}, randFloats(r, rows*4))}}
}
