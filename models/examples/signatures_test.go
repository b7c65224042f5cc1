package examples

import (
	"testing"

	wire "github.com/inferq/inferq/tensor"
	ort "github.com/yalue/onnxruntime_go"
)

// The built-in signatures are those of the generated models, batch dim 1.
func TestInputsMatchModels(t *testing.T) {
	needORT(t)
	if got := Names(); len(got) != 3 || got[0] != MLPName || got[1] != MultiTypeName || got[2] != ResNet18Name {
		t.Errorf("Names() = %q", got)
	}
	for name, model := range map[string]func() []byte{MLPName: MLP, MultiTypeName: MultiType, ResNet18Name: ResNet18} {
		want, ok := Inputs(name)
		if !ok {
			t.Fatalf("no signature for %s", name)
		}
		ins, _, err := ort.GetInputOutputInfoWithONNXData(model())
		if err != nil {
			t.Fatal(err)
		}
		if len(ins) != len(want) {
			t.Fatalf("%s: %d inputs, want %d", name, len(ins), len(want))
		}
		for i, in := range ins {
			dt, _ := wire.DTypeFromONNX(int32(in.DataType))
			dims := append([]int64{1}, in.Dimensions[1:]...)
			w := want[i]
			if in.Name != w.Name || dt != w.DType || wire.FormatShape(dims) != wire.FormatShape(w.Dims) {
				t.Errorf("%s input %d: %s %s %v, want %s", name, i, in.Name, dt, dims, w)
			}
		}
	}
	if _, ok := Inputs("bert"); ok {
		t.Error("bert has a signature")
	}
}
