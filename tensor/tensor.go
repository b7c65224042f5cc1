package tensor

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// Tensor is one named tensor: a datatype, a shape and the elements as raw
// row-major bytes in little-endian order (the host order on every platform
// onnxruntime ships for; the package reinterprets memory rather than
// converting it). For BYTES the data is the binary tensor extension's
// encoding: per element a 4-byte little-endian length and the bytes.
//
// Tensors returned by a Session own their Data (it is never onnxruntime's
// memory), but the Data of the items of one batch may be adjacent slices of
// one buffer: each is capped, so appending to one never writes into another.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Element is the set of Go types that NewTensor and Values convert. FP16
// and BYTES have no Go element type here: build those tensors from raw
// bytes (see NewBytesTensor for BYTES).
type Element interface {
	bool | uint8 | uint16 | uint32 | uint64 | int8 | int16 | int32 | int64 | float32 | float64
}

// NumElements returns the product of the shape's dims (1 for a scalar), or
// -1 if a dim is negative or the product overflows.
func NumElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > (1<<62)/d {
			return -1
		}
		n *= d
	}
	return n
}

// Rows returns dim 0 of the shape, the item's row count (1 for a scalar).
func (t Tensor) Rows() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[0]
}

// Validate checks that the datatype is known, no dim is negative and the
// data length fits the shape (for BYTES: that the data holds exactly as many
// well-formed elements as the shape says).
func (t Tensor) Validate() error {
	if !t.DType.Valid() {
		return fmt.Errorf("tensor %q: %w: %s", t.Name, ErrUnsupportedDType, t.DType)
	}
	n := NumElements(t.Shape)
	if n < 0 {
		return fmt.Errorf("tensor %q: invalid shape %s", t.Name, FormatShape(t.Shape))
	}
	if t.DType == BYTES {
		got, err := countBytesElements(t.Data)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if got != n {
			return fmt.Errorf("tensor %q: BYTES %s needs %d elements, data holds %d", t.Name, FormatShape(t.Shape), n, got)
		}
		return nil
	}
	if want := n * int64(t.DType.Size()); int64(len(t.Data)) != want {
		return fmt.Errorf("tensor %q: %s %s needs %d bytes, got %d", t.Name, t.DType, FormatShape(t.Shape), want, len(t.Data))
	}
	return nil
}

// String describes the tensor without its data: `x FP32 [2,16]`.
func (t Tensor) String() string {
	return t.Name + " " + t.DType.String() + " " + FormatShape(t.Shape)
}

// FormatShape writes a shape the way error messages show it: [-1,16].
func FormatShape(shape []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// dtypeOf returns the DType for the Go element type T.
func dtypeOf[T Element]() DType {
	var v T
	switch any(v).(type) {
	case bool:
		return BOOL
	case uint8:
		return UINT8
	case uint16:
		return UINT16
	case uint32:
		return UINT32
	case uint64:
		return UINT64
	case int8:
		return INT8
	case int16:
		return INT16
	case int32:
		return INT32
	case int64:
		return INT64
	case float32:
		return FP32
	case float64:
		return FP64
	}
	return DTypeInvalid
}

// NewTensor returns a tensor holding a copy of values, with the DType that
// matches T.
func NewTensor[T Element](name string, shape []int64, values []T) Tensor {
	var zero T
	size := int(unsafe.Sizeof(zero))
	data := make([]byte, len(values)*size)
	if len(values) > 0 {
		copy(data, unsafe.Slice((*byte)(unsafe.Pointer(&values[0])), len(data)))
	}
	return Tensor{Name: name, DType: dtypeOf[T](), Shape: append([]int64(nil), shape...), Data: data}
}

// Values returns a copy of the tensor's elements as []T; T must match the
// tensor's DType.
func Values[T Element](t Tensor) ([]T, error) {
	if want := dtypeOf[T](); t.DType != want {
		return nil, fmt.Errorf("tensor %q is %s, not %s", t.Name, t.DType, want)
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(t.Data)%size != 0 {
		return nil, fmt.Errorf("tensor %q: %d bytes is not a whole number of %s elements", t.Name, len(t.Data), t.DType)
	}
	out := make([]T, len(t.Data)/size)
	if len(out) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(t.Data)), t.Data)
	}
	return out, nil
}

// NewBytesTensor returns a BYTES tensor holding elems in the
// length-prefixed encoding.
func NewBytesTensor(name string, shape []int64, elems [][]byte) Tensor {
	n := 0
	for _, e := range elems {
		n += 4 + len(e)
	}
	data := make([]byte, 0, n)
	for _, e := range elems {
		data = AppendBytesElement(data, e)
	}
	return Tensor{Name: name, DType: BYTES, Shape: append([]int64(nil), shape...), Data: data}
}

// BytesElements decodes a BYTES tensor's elements; they alias t.Data.
func BytesElements(t Tensor) ([][]byte, error) {
	if t.DType != BYTES {
		return nil, fmt.Errorf("tensor %q is %s, not BYTES", t.Name, t.DType)
	}
	var out [][]byte
	for b := t.Data; len(b) > 0; {
		e, rest, err := NextBytesElement(b)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		out = append(out, e)
		b = rest
	}
	return out, nil
}

// AppendBytesElement appends one BYTES element (4-byte little-endian length,
// then the bytes) to b.
func AppendBytesElement[S []byte | string](b []byte, e S) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
	return append(b, e...)
}

// NextBytesElement splits the first BYTES element off b; elem aliases b.
func NextBytesElement(b []byte) (elem, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("BYTES data: %d trailing bytes, want a 4-byte length", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, fmt.Errorf("BYTES data: element of %d bytes overruns the %d left", n, len(b)-4)
	}
	return b[4 : 4+n : 4+n], b[4+n:], nil
}

func countBytesElements(b []byte) (int64, error) {
	var n int64
	for len(b) > 0 {
		_, rest, err := NextBytesElement(b)
		if err != nil {
			return 0, err
		}
		b = rest
		n++
	}
	return n, nil
}

// AsBytes views a slice of fixed-size elements as its bytes, without a copy.
func AsBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}
