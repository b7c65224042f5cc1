package tensor

import (
	"strings"
	"testing"
)

// WriteTable lists inputs, then outputs, in aligned columns, with -1 for
// a dynamic dim and onnxruntime's name for a type inferq does not carry.
func TestModelInfoWriteTable(t *testing.T) {
	m := ModelInfo{
		Inputs:  []TensorInfo{{Name: "x", DType: FP32, Dims: []int64{-1, 16}}, {Name: "seq", ONNXType: "SEQUENCE"}},
		Outputs: []TensorInfo{{Name: "probs", DType: FP32, Dims: []int64{-1, 4}}},
	}
	var b strings.Builder
	if err := m.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := "KIND    NAME   DATATYPE  SHAPE\n" +
		"input   x      FP32      [-1,16]\n" +
		"input   seq    SEQUENCE  []\n" +
		"output  probs  FP32      [-1,4]\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
