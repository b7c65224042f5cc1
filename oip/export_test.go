package oip

import (
	"encoding/binary"
	"fmt"

	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/tensor"
)

// The gRPC endpoint's tensor conversions, for clients in tests: the
// server reads typed contents (typedData) but writes raw outputs only, as
// Triton does, so typedContents, the other way, is a client's.
var (
	TypedContents = typedContents
	TypedData     = typedData
)

// typedContents returns t's data in its typed contents field.
func typedContents(t tensor.Tensor) (*pb.InferTensorContents, error) {
	c := &pb.InferTensorContents{}
	var err error
	switch t.DType {
	case tensor.BOOL:
		c.BoolContents = make([]bool, len(t.Data))
		for i, b := range t.Data {
			c.BoolContents[i] = b != 0
		}
	case tensor.INT8:
		c.IntContents = widen(t.Data, 1, func(b []byte) int32 { return int32(int8(b[0])) })
	case tensor.INT16:
		c.IntContents = widen(t.Data, 2, func(b []byte) int32 { return int32(int16(binary.LittleEndian.Uint16(b))) })
	case tensor.INT32:
		c.IntContents, err = tensor.Values[int32](t)
	case tensor.INT64:
		c.Int64Contents, err = tensor.Values[int64](t)
	case tensor.UINT8:
		c.UintContents = widen(t.Data, 1, func(b []byte) uint32 { return uint32(b[0]) })
	case tensor.UINT16:
		c.UintContents = widen(t.Data, 2, func(b []byte) uint32 { return uint32(binary.LittleEndian.Uint16(b)) })
	case tensor.UINT32:
		c.UintContents, err = tensor.Values[uint32](t)
	case tensor.UINT64:
		c.Uint64Contents, err = tensor.Values[uint64](t)
	case tensor.FP32:
		c.Fp32Contents, err = tensor.Values[float32](t)
	case tensor.FP64:
		c.Fp64Contents, err = tensor.Values[float64](t)
	case tensor.BYTES:
		c.BytesContents, err = tensor.BytesElements(t)
	default:
		err = fmt.Errorf("datatype %s has no typed contents field", t.DType)
	}
	return c, err
}

// widen unpacks size-byte little-endian integers.
func widen[T int32 | uint32](data []byte, size int, get func([]byte) T) []T {
	out := make([]T, len(data)/size)
	for i := range out {
		out[i] = get(data[i*size:])
	}
	return out
}
