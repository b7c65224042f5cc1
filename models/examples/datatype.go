package examples

import "strconv"

// DataType is an ONNX tensor element type; its values are those of
// onnx.TensorProto.DataType, which are also onnxruntime's
// ONNXTensorElementDataType values, so a DataType converts to
// onnxruntime_go's TensorElementDataType by a plain conversion.
type DataType int32

// The element types inferq supports, with their ONNX enum values.
const (
	Float   DataType = 1  // float32
	Uint8   DataType = 2  // uint8
	Int8    DataType = 3  // int8
	Uint16  DataType = 4  // uint16
	Int16   DataType = 5  // int16
	Int32   DataType = 6  // int32
	Int64   DataType = 7  // int64
	String  DataType = 8  // UTF-8 string (BYTES in the Open Inference Protocol)
	Bool    DataType = 9  // one byte per element, 0 or 1
	Float16 DataType = 10 // IEEE 754 half precision, carried as its uint16 bits
	Double  DataType = 11 // float64
	Uint32  DataType = 12 // uint32
	Uint64  DataType = 13 // uint64
)

// DataTypes returns every DataType inferq supports, numeric ones first and
// String last. The slice is new on each call.
func DataTypes() []DataType {
	return []DataType{Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32,
		Int64, Float16, Float, Double, String}
}

// String returns the ONNX name of t ("FLOAT", "INT64", ...), or
// "DataType(n)" for a value this package does not know.
func (t DataType) String() string {
	switch t {
	case Float:
		return "FLOAT"
	case Uint8:
		return "UINT8"
	case Int8:
		return "INT8"
	case Uint16:
		return "UINT16"
	case Int16:
		return "INT16"
	case Int32:
		return "INT32"
	case Int64:
		return "INT64"
	case String:
		return "STRING"
	case Bool:
		return "BOOL"
	case Float16:
		return "FLOAT16"
	case Double:
		return "DOUBLE"
	case Uint32:
		return "UINT32"
	case Uint64:
		return "UINT64"
	}
	return "DataType(" + strconv.Itoa(int(t)) + ")"
}

// Size returns the bytes one element of t takes in a tensor's raw
// little-endian data: 0 for String (variable length) and for unknown types.
func (t DataType) Size() int {
	switch t {
	case Bool, Uint8, Int8:
		return 1
	case Uint16, Int16, Float16:
		return 2
	case Int32, Uint32, Float:
		return 4
	case Int64, Uint64, Double:
		return 8
	}
	return 0
}

// Valid reports whether t is one of the types DataTypes returns.
func (t DataType) Valid() bool {
	return t == String || t.Size() > 0
}
