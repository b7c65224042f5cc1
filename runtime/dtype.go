package runtime

import (
	"strings"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferq/inferq/tensor"
)

func ortType(d tensor.DType) ort.TensorElementDataType {
	return ort.TensorElementDataType(d.ONNX())
}

// onnxTypeName names an ONNX element type for messages about types inferq
// does not carry.
func onnxTypeName(t ort.TensorElementDataType) string {
	return strings.TrimPrefix(t.String(), "ONNX_TENSOR_ELEMENT_DATA_TYPE_")
}
