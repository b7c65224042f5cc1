package tensor

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupportedDType is wrapped by errors about a datatype that inferq does
// not carry (an unknown name, or an ONNX element type such as BFLOAT16 that
// the Open Inference Protocol has no name for).
var ErrUnsupportedDType = errors.New("tensor: unsupported datatype")

// DType is a tensor element type, named as in the Open Inference Protocol
// (KServe v2 / Triton): BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64,
// BYTES. The zero value is DTypeInvalid.
type DType uint8

// The datatypes inferq carries.
const (
	DTypeInvalid DType = iota
	BOOL
	UINT8
	UINT16
	UINT32
	UINT64
	INT8
	INT16
	INT32
	INT64
	FP16
	FP32
	FP64
	// BYTES is a tensor of variable-length byte strings (ONNX STRING). Its
	// raw form is the binary tensor extension's: each element is a 4-byte
	// little-endian length followed by that many bytes.
	BYTES
	numDTypes
)

var dtypeNames = [numDTypes]string{
	DTypeInvalid: "INVALID",
	BOOL:         "BOOL",
	UINT8:        "UINT8",
	UINT16:       "UINT16",
	UINT32:       "UINT32",
	UINT64:       "UINT64",
	INT8:         "INT8",
	INT16:        "INT16",
	INT32:        "INT32",
	INT64:        "INT64",
	FP16:         "FP16",
	FP32:         "FP32",
	FP64:         "FP64",
	BYTES:        "BYTES",
}

var dtypeSizes = [numDTypes]int{
	BOOL: 1, UINT8: 1, UINT16: 2, UINT32: 4, UINT64: 8,
	INT8: 1, INT16: 2, INT32: 4, INT64: 8,
	FP16: 2, FP32: 4, FP64: 8,
}

// ONNX TensorProto.DataType numbers; onnxruntime's
// ONNXTensorElementDataType uses the same values.
var dtypeONNX = [numDTypes]int32{
	FP32: 1, UINT8: 2, INT8: 3, UINT16: 4, INT16: 5, INT32: 6, INT64: 7,
	BYTES: 8, BOOL: 9, FP16: 10, FP64: 11, UINT32: 12, UINT64: 13,
}

// ParseDType returns the DType named s (case-insensitive), or an error
// wrapping ErrUnsupportedDType.
func ParseDType(s string) (DType, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for d := BOOL; d < numDTypes; d++ {
		if dtypeNames[d] == u {
			return d, nil
		}
	}
	return DTypeInvalid, fmt.Errorf("%w: %q (want one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES)", ErrUnsupportedDType, s)
}

// DTypeFromONNX returns the DType for an ONNX TensorProto.DataType number
// (which onnxruntime's element type enum shares), and false for element
// types inferq does not carry.
func DTypeFromONNX(t int32) (DType, bool) {
	for d := BOOL; d < numDTypes; d++ {
		if dtypeONNX[d] == t {
			return d, true
		}
	}
	return DTypeInvalid, false
}

// String returns the Open Inference Protocol name.
func (d DType) String() string {
	if d >= numDTypes {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// Valid reports whether d is one of the datatypes above.
func (d DType) Valid() bool { return d > DTypeInvalid && d < numDTypes }

// Size returns the size of one element in bytes; 0 for BYTES (variable) and
// for invalid values.
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypeSizes[d]
}

// ONNX returns the ONNX TensorProto.DataType number (0, UNDEFINED, for an
// invalid DType).
func (d DType) ONNX() int32 {
	if d >= numDTypes {
		return 0
	}
	return dtypeONNX[d]
}

// MarshalText writes the Open Inference Protocol name.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("%w: %s", ErrUnsupportedDType, d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads an Open Inference Protocol name.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
