// Package tensor holds the wire's tensor types: the Open Inference Protocol
// datatypes (DType), a named tensor as raw little-endian bytes (Tensor),
// model input/output descriptions (TensorInfo, ModelInfo), shape arithmetic
// and IEEE 754 half-precision conversion.
//
// It is a leaf: no cgo and nothing of the project, so producers (task,
// client) build with CGO_ENABLED=0. runtime converts these types to and from
// onnxruntime's.
package tensor
