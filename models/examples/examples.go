// Package examples generates the ONNX example models that inferq's tests and
// `make run` use, so no model file is ever committed. Models are encoded
// directly as ONNX ModelProto protobuf (IR version 9, default-domain opset 17)
// and are byte-for-byte identical on every call: weights come from
// math/rand/v2's PCG with constant seeds.
//
// Every model has a symbolic batch dimension named "N" as dim 0 of each input
// and output. All functions are safe for concurrent use; the package holds no
// state.
package examples

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Names of the example models. A model's file name is its name plus ".onnx".
const (
	MLPName       = "mlp"
	MultiTypeName = "multitype"
	ResNet18Name  = "resnet18"
	// ChannelMeanName is a model with dynamic dims beyond the batch dim
	// (ChannelMean); Write does not write it.
	ChannelMeanName = "channelmean"
)

// Shapes of the example models, per item (the batch dim N excluded).
const (
	MLPInputs     = 16 // mlp input "x" is FLOAT [N,16]
	MLPHidden     = 32
	MLPClasses    = 4 // mlp output "probs" is FLOAT [N,4]
	MultiTypeIDs  = 8 // multitype input "ids" is INT64 [N,8]
	MultiTypeX    = 4 // multitype input "x" and output "y" are FLOAT [N,4]
	ResNetClasses = 1000
)

// seed is the PCG seed of every generated weight; each tensor family uses its
// own stream so that adding a model does not change another's weights.
const seed = 0x696e6665727100 // "inferq\x00"

const (
	streamMLP uint64 = iota + 1
	streamResNet
	// streamMLPVariant is the base of MLPVariant's streams, far from the
	// streams above.
	streamMLPVariant uint64 = 1 << 32
)

func newRand(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// mlpWeights holds the mlp parameters, row-major: w1 [16,32], b1 [32],
// w2 [32,4], b2 [4].
type mlpWeights struct {
	w1, b1, w2, b2 []float32
}

// newMLPWeights draws the mlp parameters, uniform in ±1/sqrt(fan_in) for the
// weights and ±0.5 for the biases, so that some hidden units are cut by Relu
// and the softmax is neither flat nor one-hot.
func newMLPWeights() mlpWeights { return newMLPWeightsFrom(newRand(streamMLP)) }

func newMLPWeightsFrom(r *rand.Rand) mlpWeights {
	uniform := func(n int, limit float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * limit)
		}
		return v
	}
	return mlpWeights{
		w1: uniform(MLPInputs*MLPHidden, 1/math.Sqrt(MLPInputs)),
		b1: uniform(MLPHidden, 0.5),
		w2: uniform(MLPHidden*MLPClasses, 2/math.Sqrt(MLPHidden)),
		b2: uniform(MLPClasses, 0.5),
	}
}

// MLP returns the "mlp" model: input "x" FLOAT [N,16] -> Gemm(16x32) -> Relu ->
// Gemm(32x4) -> Softmax(axis=-1) -> output "probs" FLOAT [N,4]. Each row of
// probs sums to 1.
func MLP() []byte { return mlp(newMLPWeights()) }

// MLPVariant returns an "mlp" model with the same signature as MLP but
// other weights, drawn from variant's own stream: variant 0 is MLP itself,
// every other variant gives other outputs for the same input (the model
// repository's reload tests serve two versions of mlp with it).
func MLPVariant(variant uint64) []byte {
	if variant == 0 {
		return MLP()
	}
	return mlp(newMLPWeightsFrom(rand.New(rand.NewPCG(seed, streamMLPVariant+variant))))
}

func mlp(w mlpWeights) []byte {
	g := &graph{name: MLPName}
	g.inputs = []*valueInfo{{name: "x", dtype: Float, shape: batched(MLPInputs)}}
	g.outputs = []*valueInfo{{name: "probs", dtype: Float, shape: batched(MLPClasses)}}
	w1 := g.init(floatTensor("fc1.weight", w.w1, MLPInputs, MLPHidden))
	b1 := g.init(floatTensor("fc1.bias", w.b1, MLPHidden))
	w2 := g.init(floatTensor("fc2.weight", w.w2, MLPHidden, MLPClasses))
	b2 := g.init(floatTensor("fc2.bias", w.b2, MLPClasses))
	g.add(&node{name: "fc1", op: "Gemm", inputs: []string{"x", w1, b1}, outputs: []string{"h"}})
	g.add(&node{name: "relu", op: "Relu", inputs: []string{"h"}, outputs: []string{"a"}})
	g.add(&node{name: "fc2", op: "Gemm", inputs: []string{"a", w2, b2}, outputs: []string{"logits"}})
	g.add(&node{name: "softmax", op: "Softmax", inputs: []string{"logits"}, outputs: []string{"probs"},
		attrs: []*attribute{attrInt("axis", -1)}})
	return marshal(&model{graph: g})
}

// MultiType returns the "multitype" model, with inputs of two element types:
// inputs "ids" INT64 [N,8] and "x" FLOAT [N,4]; outputs "ids_sum" INT64 [N,1]
// (the sum of each row of ids) and "y" FLOAT [N,4] (x*2+1).
func MultiType() []byte {
	g := &graph{name: MultiTypeName}
	g.inputs = []*valueInfo{
		{name: "ids", dtype: Int64, shape: batched(MultiTypeIDs)},
		{name: "x", dtype: Float, shape: batched(MultiTypeX)},
	}
	g.outputs = []*valueInfo{
		{name: "ids_sum", dtype: Int64, shape: batched(1)},
		{name: "y", dtype: Float, shape: batched(MultiTypeX)},
	}
	axes := g.init(&tensor{name: "axes", dtype: Int64, dims: []int64{1}, raw: binary.LittleEndian.AppendUint64(nil, 1)})
	two := g.init(floatTensor("two", []float32{2}))
	one := g.init(floatTensor("one", []float32{1}))
	// Since opset 13 ReduceSum takes its axes as an input.
	g.add(&node{name: "sum", op: "ReduceSum", inputs: []string{"ids", axes}, outputs: []string{"ids_sum"},
		attrs: []*attribute{attrInt("keepdims", 1)}})
	g.add(&node{name: "mul", op: "Mul", inputs: []string{"x", two}, outputs: []string{"x2"}})
	g.add(&node{name: "add", op: "Add", inputs: []string{"x2", one}, outputs: []string{"y"}})
	return marshal(&model{graph: g})
}

// Identity returns a model named name that copies input "in" to output "out",
// both of type dtype and shape [N, perItemDims...]. It serves the datatype
// round-trip tests; dtype must be one of DataTypes (Identity panics
// otherwise, as for any programming error).
func Identity(name string, dtype DataType, perItemDims []int64) []byte {
	if !dtype.Valid() {
		panic(fmt.Sprintf("examples: Identity of unsupported %v", dtype))
	}
	g := &graph{name: name}
	g.inputs = []*valueInfo{{name: "in", dtype: dtype, shape: batched(perItemDims...)}}
	g.outputs = []*valueInfo{{name: "out", dtype: dtype, shape: batched(perItemDims...)}}
	g.add(&node{name: "identity", op: "Identity", inputs: []string{"in"}, outputs: []string{"out"}})
	return marshal(&model{graph: g})
}

// ChannelMean returns the "channelmean" model, whose input has dynamic
// dims beyond the batch: input "image" FLOAT [N,3,H,W] (H and W symbolic)
// -> GlobalAveragePool -> Flatten -> output "mean" FLOAT [N,3], the mean of
// each channel. It runs at any H and W, as an image model that takes any
// size does; the bench's tests measure it with --shape.
func ChannelMean() []byte {
	g := &graph{name: ChannelMeanName}
	g.inputs = []*valueInfo{{name: "image", dtype: Float, shape: []dim{{param: batchDim}, {value: 3}, {param: "H"}, {param: "W"}}}}
	g.outputs = []*valueInfo{{name: "mean", dtype: Float, shape: batched(3)}}
	g.add(&node{name: "pool", op: "GlobalAveragePool", inputs: []string{"image"}, outputs: []string{"pooled"}})
	g.add(&node{name: "flatten", op: "Flatten", inputs: []string{"pooled"}, outputs: []string{"mean"},
		attrs: []*attribute{attrInt("axis", 1)}})
	return marshal(&model{graph: g})
}

// Write writes mlp.onnx and multitype.onnx into dir, and resnet18.onnx too
// when heavy is set (about 47 MB), creating dir if needed. It returns the
// paths written, in that order. Each file is written to a temporary name and
// renamed, so a concurrent reader never sees a partial model.
func Write(dir string, heavy bool) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("examples: create model dir: %w", err)
	}
	type generator struct {
		name  string
		model func() []byte
	}
	gens := []generator{{MLPName, MLP}, {MultiTypeName, MultiType}}
	if heavy {
		gens = append(gens, generator{ResNet18Name, ResNet18})
	}
	paths := make([]string, 0, len(gens))
	for _, m := range gens {
		p := filepath.Join(dir, m.name+".onnx")
		if err := writeFile(p, m.model()); err != nil {
			return paths, fmt.Errorf("examples: write %s: %w", m.name, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(0o644), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// floatTensor returns a FLOAT initializer holding v.
func floatTensor(name string, v []float32, dims ...int64) *tensor {
	raw := make([]byte, 0, 4*len(v))
	for _, f := range v {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
	}
	return &tensor{name: name, dtype: Float, dims: dims, raw: raw}
}
