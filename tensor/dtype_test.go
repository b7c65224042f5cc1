package tensor_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/tensor"
)

func TestDType(t *testing.T) {
	tests := []struct {
		d    tensor.DType
		name string
		size int
		onnx examples.DataType
	}{
		{tensor.BOOL, "BOOL", 1, examples.Bool},
		{tensor.UINT8, "UINT8", 1, examples.Uint8},
		{tensor.UINT16, "UINT16", 2, examples.Uint16},
		{tensor.UINT32, "UINT32", 4, examples.Uint32},
		{tensor.UINT64, "UINT64", 8, examples.Uint64},
		{tensor.INT8, "INT8", 1, examples.Int8},
		{tensor.INT16, "INT16", 2, examples.Int16},
		{tensor.INT32, "INT32", 4, examples.Int32},
		{tensor.INT64, "INT64", 8, examples.Int64},
		{tensor.FP16, "FP16", 2, examples.Float16},
		{tensor.FP32, "FP32", 4, examples.Float},
		{tensor.FP64, "FP64", 8, examples.Double},
		{tensor.BYTES, "BYTES", 0, examples.String},
	}
	for _, tt := range tests {
		if tt.d.String() != tt.name || tt.d.Size() != tt.size || tt.d.ONNX() != int32(tt.onnx) || !tt.d.Valid() {
			t.Errorf("%v: String %q Size %d ONNX %d; want %q %d %d", tt.d, tt.d.String(), tt.d.Size(), tt.d.ONNX(), tt.name, tt.size, tt.onnx)
		}
		if tt.d.Size() != tt.onnx.Size() {
			t.Errorf("%v: size %d, examples says %d", tt.d, tt.d.Size(), tt.onnx.Size())
		}
		if d, ok := tensor.DTypeFromONNX(int32(tt.onnx)); !ok || d != tt.d {
			t.Errorf("DTypeFromONNX(%d) = %v, %v", tt.onnx, d, ok)
		}
		for _, s := range []string{tt.name, "  " + tt.name + " "} {
			if d, err := tensor.ParseDType(s); err != nil || d != tt.d {
				t.Errorf("ParseDType(%q) = %v, %v", s, d, err)
			}
		}
		var d tensor.DType
		if b, err := tt.d.MarshalText(); err != nil || d.UnmarshalText(b) != nil || d != tt.d {
			t.Errorf("%v: text round trip gave %v (%v)", tt.d, d, err)
		}
	}
	if d, err := tensor.ParseDType("fp32"); err != nil || d != tensor.FP32 {
		t.Errorf("ParseDType is not case-insensitive: %v %v", d, err)
	}
	for _, s := range []string{"", "FLOAT", "BF16", "INVALID"} {
		if _, err := tensor.ParseDType(s); !errors.Is(err, tensor.ErrUnsupportedDType) {
			t.Errorf("ParseDType(%q) = %v, want ErrUnsupportedDType", s, err)
		}
	}
	for _, n := range []int32{0, 14, 15, 16, 17} { // UNDEFINED, COMPLEX64, COMPLEX128, BFLOAT16, FLOAT8
		if d, ok := tensor.DTypeFromONNX(n); ok {
			t.Errorf("DTypeFromONNX(%d) = %v, want not ok", n, d)
		}
	}
	if tensor.DTypeInvalid.Valid() {
		t.Error("DTypeInvalid is valid")
	}
}

func TestTensorValues(t *testing.T) {
	x := tensor.NewTensor("x", []int64{2, 2}, []float32{1, -2, 3.5, 0})
	if x.DType != tensor.FP32 || len(x.Data) != 16 || x.Validate() != nil || x.Rows() != 2 {
		t.Fatalf("NewTensor: %v %d bytes, %v", x, len(x.Data), x.Validate())
	}
	if want := []byte{0, 0, 0x80, 0x3f}; !bytes.Equal(x.Data[:4], want) {
		t.Fatalf("1.0 is % x, want little-endian % x", x.Data[:4], want)
	}
	v, err := tensor.Values[float32](x)
	if err != nil || len(v) != 4 || v[2] != 3.5 {
		t.Fatalf("Values = %v, %v", v, err)
	}
	if _, err := tensor.Values[int32](x); err == nil {
		t.Fatal("Values[int32] of FP32: no error")
	}
	b := tensor.NewTensor("b", []int64{3}, []bool{true, false, true})
	if b.DType != tensor.BOOL || !bytes.Equal(b.Data, []byte{1, 0, 1}) {
		t.Fatalf("bool tensor %v % x", b, b.Data)
	}
	x.Shape = []int64{2, 3}
	if err := x.Validate(); err == nil {
		t.Fatal("Validate accepted 16 bytes for FP32 [2,3]")
	}

	s := tensor.NewBytesTensor("s", []int64{3}, [][]byte{[]byte("ab"), nil, []byte("xyz")})
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := []byte{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 3, 0, 0, 0, 'x', 'y', 'z'}; !bytes.Equal(s.Data, want) {
		t.Fatalf("BYTES encoding % x, want % x", s.Data, want)
	}
	elems, err := tensor.BytesElements(s)
	if err != nil || len(elems) != 3 || string(elems[2]) != "xyz" || len(elems[1]) != 0 {
		t.Fatalf("BytesElements = %q, %v", elems, err)
	}
	for _, bad := range [][]byte{{1, 0}, {5, 0, 0, 0, 'a'}} {
		if _, err := tensor.BytesElements(tensor.Tensor{Name: "s", DType: tensor.BYTES, Shape: []int64{1}, Data: bad}); err == nil {
			t.Errorf("BytesElements(% x): no error", bad)
		}
	}
	s.Shape = []int64{2}
	if err := s.Validate(); err == nil {
		t.Fatal("Validate accepted 3 BYTES elements for [2]")
	}
	if got := tensor.FormatShape([]int64{-1, 16}); got != "[-1,16]" {
		t.Fatalf("FormatShape = %s", got)
	}
}
