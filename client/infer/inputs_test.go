package infer

import (
	"strings"
	"testing"
)

// TestShapeSpec: the spec grammar is tensor.ParseSpec's (tested there);
// infer names --shape in its errors and builds random inputs from the specs
// or the example models' signatures.
func TestShapeSpec(t *testing.T) {
	if _, err := parseShapeSpec("x:FP32:1,banana", "x", "FP32"); err == nil || !strings.Contains(err.Error(), `--shape "x:FP32:1,banana"`) {
		t.Errorf("bad spec: %v, want an error naming --shape", err)
	}
	if _, err := RandomInputs("m", []string{"x:BYTES:1,2"}, "FP32"); err == nil {
		t.Error("random BYTES built")
	}
	ins, err := RandomInputs("multitype", nil, "FP32")
	if err != nil || len(ins) != 2 || ins[0].String() == "" || ins[1].Validate() != nil {
		t.Errorf("multitype: %v %v", ins, err)
	}
}
