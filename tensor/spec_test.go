package tensor

import (
	"math/rand/v2"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for spec, want := range map[string]string{
		"1,16":                 "x FP32 [1,16]",
		"ids:INT64:1x8":        "ids INT64 [1,8]",
		"input:1,3,224,224":    "input FP32 [1,3,224,224]",
		"x:fp16:2,4":           "x FP16 [2,4]",
		"x:FP32:1,0":           "error",
		"a:b:c:d":              "error",
		"x:FP32:":              "error",
		"x:FP32:1,banana":      "error",
		":FP32:1":              "error",
		"x:BYTES:1,2":          "x BYTES [1,2]",
		"multi:UINT8:1 , 2, 3": "multi UINT8 [1,2,3]",
	} {
		ti, err := ParseSpec(spec, "x", "FP32")
		got := ti.String()
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("%q: %s (%v), want %s", spec, got, err, want)
		}
	}
}

func TestRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []DType{BOOL, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, FP16, FP32, FP64} {
		x, err := Random(TensorInfo{Name: "x", DType: dt, Dims: []int64{2, 3}}, r)
		if err != nil || x.Validate() != nil || x.DType != dt || FormatShape(x.Shape) != "[2,3]" {
			t.Errorf("%s: %v %v", dt, x, err)
		}
	}
	if _, err := Random(TensorInfo{Name: "s", DType: BYTES, Dims: []int64{1}}, r); err == nil {
		t.Error("random BYTES built")
	}
	if _, err := Random(TensorInfo{Name: "big", DType: FP32, Dims: []int64{1 << 20, 1 << 20}}, r); err == nil {
		t.Error("huge tensor built")
	}
}

func TestFormatValues(t *testing.T) {
	for _, tt := range []struct {
		t    Tensor
		want string
	}{
		{NewTensor("p", []int64{1, 3}, []float32{0.5, 0.25, 1}), "[0.5 0.25 1]"},
		{NewTensor("i", []int64{5}, []int64{1, 2, 3, 4, 5}), "[1 2 3 ... (5 values)]"},
		{NewTensor("b", []int64{2}, []bool{true, false}), "[true false]"},
		{NewBytesTensor("s", []int64{1}, [][]byte{[]byte("hi")}), `["hi"]`},
		{Tensor{Name: "h", DType: FP16, Shape: []int64{1}, Data: []byte{0x00, 0x3c}}, "[1]"},
		{Tensor{Name: "bad", DType: FP32, Shape: []int64{1}, Data: []byte{1}}, `(tensor "bad": 1 bytes is not a whole number of FP32 elements)`},
	} {
		if got := FormatValues(tt.t, 3); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.t.Name, got, tt.want)
		}
	}
}
