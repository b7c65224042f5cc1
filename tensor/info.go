package tensor

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// TensorInfo describes one model input or output.
type TensorInfo struct {
	Name string
	// DType is DTypeInvalid when the element type is one inferq does not
	// carry (see ONNXType).
	DType DType
	// Dims has -1 for each dynamic (symbolic or unknown) dim.
	Dims []int64
	// ONNXType is onnxruntime's name for the element type (FLOAT, INT64,
	// STRING, BFLOAT16...), or the value kind for non-tensors (SEQUENCE,
	// MAP...).
	ONNXType string
}

// Datatype is the Open Inference Protocol name of the element type (FP32,
// INT64...), or onnxruntime's name for a type inferq does not carry.
func (t TensorInfo) Datatype() string {
	if !t.DType.Valid() {
		return t.ONNXType
	}
	return t.DType.String()
}

// String returns `x FP32 [-1,16]`.
func (t TensorInfo) String() string {
	return fmt.Sprintf("%s %s %s", t.Name, t.Datatype(), FormatShape(t.Dims))
}

// ModelInfo lists a model's inputs and outputs in the model's order.
type ModelInfo struct {
	Inputs  []TensorInfo
	Outputs []TensorInfo
}

// WriteTable writes m as a table, one row per input, then per output:
// KIND, NAME, DATATYPE and SHAPE (-1 for each dynamic dim).
func (m ModelInfo) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tDATATYPE\tSHAPE")
	for _, row := range []struct {
		kind string
		ts   []TensorInfo
	}{{"input", m.Inputs}, {"output", m.Outputs}} {
		for _, t := range row.ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.kind, t.Name, t.Datatype(), FormatShape(t.Dims))
		}
	}
	return tw.Flush()
}
