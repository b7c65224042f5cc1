package tensor

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// MaxRandomElements bounds the tensors Random builds (2^28 elements).
const MaxRandomElements = 1 << 28

// Random returns a tensor of ti's name, datatype and shape filled from r:
// floats in [0, 1), integers in [0, 100), booleans. BYTES and shapes with
// more than MaxRandomElements elements are refused. r is used by this call
// only; a *rand.Rand is not safe for concurrent use, so concurrent callers
// pass their own.
func Random(ti TensorInfo, r *rand.Rand) (Tensor, error) {
	n := NumElements(ti.Dims)
	if n < 0 || n > MaxRandomElements {
		return Tensor{}, fmt.Errorf("input %s: shape %s too large", ti.Name, FormatShape(ti.Dims))
	}
	shape := slices.Clone(ti.Dims)
	intn := func(k int) int { return r.IntN(k) }
	switch ti.DType {
	case FP32:
		return NewTensor(ti.Name, shape, fill(n, r.Float32)), nil
	case FP64:
		return NewTensor(ti.Name, shape, fill(n, r.Float64)), nil
	case FP16:
		data := make([]byte, 2*n)
		for i := range n {
			// halves in [0, 1): exponent 0..14 (biased), any mantissa
			h := uint16(intn(15))<<10 | uint16(intn(1024))
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
		}
		return Tensor{Name: ti.Name, DType: FP16, Shape: shape, Data: data}, nil
	case BOOL:
		return NewTensor(ti.Name, shape, fill(n, func() bool { return intn(2) == 1 })), nil
	case INT8:
		return NewTensor(ti.Name, shape, fill(n, func() int8 { return int8(intn(100)) })), nil
	case INT16:
		return NewTensor(ti.Name, shape, fill(n, func() int16 { return int16(intn(100)) })), nil
	case INT32:
		return NewTensor(ti.Name, shape, fill(n, func() int32 { return int32(intn(100)) })), nil
	case INT64:
		return NewTensor(ti.Name, shape, fill(n, func() int64 { return int64(intn(100)) })), nil
	case UINT8:
		return NewTensor(ti.Name, shape, fill(n, func() uint8 { return uint8(intn(100)) })), nil
	case UINT16:
		return NewTensor(ti.Name, shape, fill(n, func() uint16 { return uint16(intn(100)) })), nil
	case UINT32:
		return NewTensor(ti.Name, shape, fill(n, func() uint32 { return uint32(intn(100)) })), nil
	case UINT64:
		return NewTensor(ti.Name, shape, fill(n, func() uint64 { return uint64(intn(100)) })), nil
	}
	return Tensor{}, fmt.Errorf("input %s: cannot make random %s data", ti.Name, ti.DType)
}

func fill[T any](n int64, f func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f()
	}
	return out
}
