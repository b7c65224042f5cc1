package examples

import (
	"maps"
	"slices"

	wire "github.com/inferq/inferq/tensor"
)

// Inputs returns the input signature of the example model name with a
// batch of one row (the models' symbolic dim 0 set to 1), and whether name
// is an example model. Producers use it for random inputs: they have no
// model file to read the signature from, and reading one needs onnxruntime
// (cgo). TestInputsMatchModels checks it against the generated models.
func Inputs(name string) ([]wire.TensorInfo, bool) {
	sig, ok := inputs()[name]
	return sig, ok
}

// Names returns the names of the example models, sorted.
func Names() []string { return slices.Sorted(maps.Keys(inputs())) }

// inputs is built per call: the package holds no state.
func inputs() map[string][]wire.TensorInfo {
	return map[string][]wire.TensorInfo{
		MLPName:       {{Name: "x", DType: wire.FP32, Dims: []int64{1, 16}}},
		MultiTypeName: {{Name: "ids", DType: wire.INT64, Dims: []int64{1, 8}}, {Name: "x", DType: wire.FP32, Dims: []int64{1, 4}}},
		ResNet18Name:  {{Name: "input", DType: wire.FP32, Dims: []int64{1, 3, 224, 224}}},
	}
}
