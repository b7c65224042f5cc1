package examples

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file is a minimal writer of the ONNX protobuf messages (onnx/onnx.proto)
// built on protowire. Every message knows its encoded size before it is
// written, so a model is encoded into one exactly sized buffer, and large
// initializers can generate their data straight into that buffer instead of
// holding a second copy of the weights.
//
// Repeated scalar fields (dims, ints, floats) are written unpacked, as
// onnx.proto (proto2, no [packed=true] on them) declares them.

// Field numbers from onnx/onnx.proto.
const (
	// ModelProto
	fModelIRVersion    protowire.Number = 1
	fModelProducerName protowire.Number = 2
	fModelGraph        protowire.Number = 7
	fModelOpsetImport  protowire.Number = 8
	// OperatorSetIdProto
	fOpsetVersion protowire.Number = 2
	// GraphProto
	fGraphNode        protowire.Number = 1
	fGraphName        protowire.Number = 2
	fGraphInitializer protowire.Number = 5
	fGraphInput       protowire.Number = 11
	fGraphOutput      protowire.Number = 12
	// NodeProto
	fNodeInput     protowire.Number = 1
	fNodeOutput    protowire.Number = 2
	fNodeName      protowire.Number = 3
	fNodeOpType    protowire.Number = 4
	fNodeAttribute protowire.Number = 5
	// AttributeProto
	fAttrName   protowire.Number = 1
	fAttrF      protowire.Number = 2
	fAttrI      protowire.Number = 3
	fAttrS      protowire.Number = 4
	fAttrT      protowire.Number = 5
	fAttrFloats protowire.Number = 7
	fAttrInts   protowire.Number = 8
	fAttrType   protowire.Number = 20
	// TensorProto
	fTensorDims       protowire.Number = 1
	fTensorDataType   protowire.Number = 2
	fTensorStringData protowire.Number = 6
	fTensorName       protowire.Number = 8
	fTensorRawData    protowire.Number = 9
	// ValueInfoProto
	fValueInfoName protowire.Number = 1
	fValueInfoType protowire.Number = 2
	// TypeProto, TypeProto.Tensor, TensorShapeProto, TensorShapeProto.Dimension
	fTypeTensorType protowire.Number = 1
	fTensorElemType protowire.Number = 1
	fTensorShape    protowire.Number = 2
	fShapeDim       protowire.Number = 1
	fDimValue       protowire.Number = 1
	fDimParam       protowire.Number = 2
)

// AttributeProto.AttributeType values.
const (
	attrTypeFloat  int64 = 1
	attrTypeInt    int64 = 2
	attrTypeString int64 = 3
	attrTypeTensor int64 = 4
	attrTypeFloats int64 = 6
	attrTypeInts   int64 = 7
)

const (
	onnxIRVersion    int64 = 9  // IR of ONNX 1.14+, loaded by onnxruntime 1.30 in the tests
	onnxOpsetVersion int64 = 17 // of the default ("ai.onnx") domain
	producerName           = "inferq-examples"
)

// message is one protobuf message of the writer: size is the exact length of
// what appendTo appends.
type message interface {
	size() int
	appendTo(b []byte) []byte
}

func sizeMsg(num protowire.Number, m message) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(m.size())
}

func appendMsg(b []byte, num protowire.Number, m message) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(m.size()))
	return m.appendTo(b)
}

func sizeStr(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func sizeInt(num protowire.Number, v int64) int {
	return protowire.SizeTag(num) + protowire.SizeVarint(uint64(v))
}

func appendInt(b []byte, num protowire.Number, v int64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func sizeMsgs[M message](num protowire.Number, ms []M) int {
	n := 0
	for _, m := range ms {
		n += sizeMsg(num, m)
	}
	return n
}

func appendMsgs[M message](b []byte, num protowire.Number, ms []M) []byte {
	for _, m := range ms {
		b = appendMsg(b, num, m)
	}
	return b
}

// marshal encodes m into a buffer of exactly its size.
func marshal(m message) []byte {
	n := m.size()
	b := m.appendTo(make([]byte, 0, n))
	if len(b) != n {
		// A size/appendTo mismatch is a bug in this file, never an input error.
		panic(fmt.Sprintf("examples: encoded %d bytes, expected %d", len(b), n))
	}
	return b
}

// model is an ONNX ModelProto with one opset import of the default domain.
type model struct {
	graph *graph
}

func (m *model) size() int {
	return sizeInt(fModelIRVersion, onnxIRVersion) +
		sizeStr(fModelProducerName, producerName) +
		sizeMsg(fModelGraph, m.graph) +
		sizeMsg(fModelOpsetImport, opsetImport{})
}

func (m *model) appendTo(b []byte) []byte {
	b = appendInt(b, fModelIRVersion, onnxIRVersion)
	b = appendStr(b, fModelProducerName, producerName)
	b = appendMsg(b, fModelGraph, m.graph)
	return appendMsg(b, fModelOpsetImport, opsetImport{})
}

// opsetImport is the OperatorSetIdProto of the default domain ("" = ai.onnx).
type opsetImport struct{}

func (opsetImport) size() int { return sizeInt(fOpsetVersion, onnxOpsetVersion) }

func (opsetImport) appendTo(b []byte) []byte {
	return appendInt(b, fOpsetVersion, onnxOpsetVersion)
}

// graph is a GraphProto. Nodes must be in topological order.
type graph struct {
	name    string
	nodes   []*node
	inits   []*tensor
	inputs  []*valueInfo
	outputs []*valueInfo
}

func (g *graph) size() int {
	return sizeMsgs(fGraphNode, g.nodes) +
		sizeStr(fGraphName, g.name) +
		sizeMsgs(fGraphInitializer, g.inits) +
		sizeMsgs(fGraphInput, g.inputs) +
		sizeMsgs(fGraphOutput, g.outputs)
}

func (g *graph) appendTo(b []byte) []byte {
	b = appendMsgs(b, fGraphNode, g.nodes)
	b = appendStr(b, fGraphName, g.name)
	b = appendMsgs(b, fGraphInitializer, g.inits)
	b = appendMsgs(b, fGraphInput, g.inputs)
	return appendMsgs(b, fGraphOutput, g.outputs)
}

// add appends a node and returns it.
func (g *graph) add(n *node) *node {
	g.nodes = append(g.nodes, n)
	return n
}

// init appends an initializer and returns its name.
func (g *graph) init(t *tensor) string {
	g.inits = append(g.inits, t)
	return t.name
}

// node is a NodeProto of the default domain.
type node struct {
	name    string
	op      string
	inputs  []string
	outputs []string
	attrs   []*attribute
}

func (n *node) size() int {
	s := 0
	for _, in := range n.inputs {
		s += protowire.SizeTag(fNodeInput) + protowire.SizeBytes(len(in))
	}
	for _, out := range n.outputs {
		s += protowire.SizeTag(fNodeOutput) + protowire.SizeBytes(len(out))
	}
	return s + sizeStr(fNodeName, n.name) + sizeStr(fNodeOpType, n.op) +
		sizeMsgs(fNodeAttribute, n.attrs)
}

func (n *node) appendTo(b []byte) []byte {
	// Inputs are written even when empty: "" marks an omitted optional input.
	for _, in := range n.inputs {
		b = protowire.AppendTag(b, fNodeInput, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	for _, out := range n.outputs {
		b = protowire.AppendTag(b, fNodeOutput, protowire.BytesType)
		b = protowire.AppendString(b, out)
	}
	b = appendStr(b, fNodeName, n.name)
	b = appendStr(b, fNodeOpType, n.op)
	return appendMsgs(b, fNodeAttribute, n.attrs)
}

// attribute is an AttributeProto holding exactly one of its value fields,
// the one its typ names.
type attribute struct {
	name   string
	typ    int64
	f      float32
	i      int64
	s      string
	t      *tensor
	floats []float32
	ints   []int64
}

func attrFloat(name string, v float32) *attribute {
	return &attribute{name: name, typ: attrTypeFloat, f: v}
}

func attrInt(name string, v int64) *attribute {
	return &attribute{name: name, typ: attrTypeInt, i: v}
}

func attrString(name, v string) *attribute {
	return &attribute{name: name, typ: attrTypeString, s: v}
}

func attrTensor(name string, t *tensor) *attribute {
	return &attribute{name: name, typ: attrTypeTensor, t: t}
}

func attrFloats(name string, v ...float32) *attribute {
	return &attribute{name: name, typ: attrTypeFloats, floats: v}
}

func attrInts(name string, v ...int64) *attribute {
	return &attribute{name: name, typ: attrTypeInts, ints: v}
}

func (a *attribute) size() int {
	s := sizeStr(fAttrName, a.name) + sizeInt(fAttrType, a.typ)
	switch a.typ {
	case attrTypeFloat:
		s += protowire.SizeTag(fAttrF) + protowire.SizeFixed32()
	case attrTypeInt:
		s += sizeInt(fAttrI, a.i)
	case attrTypeString:
		s += protowire.SizeTag(fAttrS) + protowire.SizeBytes(len(a.s))
	case attrTypeTensor:
		s += sizeMsg(fAttrT, a.t)
	case attrTypeFloats:
		s += len(a.floats) * (protowire.SizeTag(fAttrFloats) + protowire.SizeFixed32())
	case attrTypeInts:
		for _, v := range a.ints {
			s += sizeInt(fAttrInts, v)
		}
	}
	return s
}

func (a *attribute) appendTo(b []byte) []byte {
	b = appendStr(b, fAttrName, a.name)
	switch a.typ {
	case attrTypeFloat:
		b = protowire.AppendTag(b, fAttrF, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.f))
	case attrTypeInt:
		b = appendInt(b, fAttrI, a.i)
	case attrTypeString:
		b = protowire.AppendTag(b, fAttrS, protowire.BytesType)
		b = protowire.AppendString(b, a.s)
	case attrTypeTensor:
		b = appendMsg(b, fAttrT, a.t)
	case attrTypeFloats:
		for _, v := range a.floats {
			b = protowire.AppendTag(b, fAttrFloats, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, math.Float32bits(v))
		}
	case attrTypeInts:
		for _, v := range a.ints {
			b = appendInt(b, fAttrInts, v)
		}
	}
	return appendInt(b, fAttrType, a.typ)
}

// tensor is a TensorProto. Numeric data goes in raw_data (little-endian), taken
// from raw, or, when fill is set, generated by fill directly into the output
// buffer (len(dst) is the element count times the element size). STRING data
// goes in string_data.
type tensor struct {
	name    string
	dtype   DataType
	dims    []int64
	raw     []byte
	fill    func(dst []byte)
	strings []string
}

func (t *tensor) rawLen() int {
	if t.fill == nil {
		return len(t.raw)
	}
	n := int64(t.dtype.Size())
	for _, d := range t.dims {
		n *= d
	}
	return int(n)
}

func (t *tensor) size() int {
	s := sizeInt(fTensorDataType, int64(t.dtype)) + sizeStr(fTensorName, t.name)
	for _, d := range t.dims {
		s += sizeInt(fTensorDims, d)
	}
	if t.dtype == String {
		for _, str := range t.strings {
			s += protowire.SizeTag(fTensorStringData) + protowire.SizeBytes(len(str))
		}
		return s
	}
	return s + protowire.SizeTag(fTensorRawData) + protowire.SizeBytes(t.rawLen())
}

func (t *tensor) appendTo(b []byte) []byte {
	for _, d := range t.dims {
		b = appendInt(b, fTensorDims, d)
	}
	b = appendInt(b, fTensorDataType, int64(t.dtype))
	b = appendStr(b, fTensorName, t.name)
	if t.dtype == String {
		for _, str := range t.strings {
			b = protowire.AppendTag(b, fTensorStringData, protowire.BytesType)
			b = protowire.AppendString(b, str)
		}
		return b
	}
	b = protowire.AppendTag(b, fTensorRawData, protowire.BytesType)
	if t.fill == nil {
		return protowire.AppendBytes(b, t.raw)
	}
	n := t.rawLen()
	b = protowire.AppendVarint(b, uint64(n))
	start := len(b)
	if cap(b)-start < n {
		// Only reached when the caller did not size the buffer; marshal does.
		b = append(b, make([]byte, n)...)
	} else {
		b = b[:start+n]
	}
	t.fill(b[start : start+n])
	return b
}

// dim is one TensorShapeProto.Dimension: a fixed value, or a symbolic name
// when param is set.
type dim struct {
	value int64
	param string
}

func (d dim) size() int {
	if d.param != "" {
		return sizeStr(fDimParam, d.param)
	}
	return sizeInt(fDimValue, d.value)
}

func (d dim) appendTo(b []byte) []byte {
	if d.param != "" {
		return appendStr(b, fDimParam, d.param)
	}
	return appendInt(b, fDimValue, d.value)
}

// batchDim is the symbolic batch dimension every example model uses.
const batchDim = "N"

// batched returns the shape [N, perItem...].
func batched(perItem ...int64) []dim {
	ds := make([]dim, 0, len(perItem)+1)
	ds = append(ds, dim{param: batchDim})
	for _, v := range perItem {
		ds = append(ds, dim{value: v})
	}
	return ds
}

// valueInfo is a ValueInfoProto of a tensor type:
// ValueInfoProto{name, type: TypeProto{tensor_type: {elem_type, shape{dim...}}}}.
type valueInfo struct {
	name  string
	dtype DataType
	shape []dim
}

type shapeMsg []dim

func (s shapeMsg) size() int                { return sizeMsgs(fShapeDim, s) }
func (s shapeMsg) appendTo(b []byte) []byte { return appendMsgs(b, fShapeDim, s) }

type tensorTypeMsg struct {
	dtype DataType
	shape shapeMsg
}

func (t tensorTypeMsg) size() int {
	return sizeInt(fTensorElemType, int64(t.dtype)) + sizeMsg(fTensorShape, t.shape)
}

func (t tensorTypeMsg) appendTo(b []byte) []byte {
	b = appendInt(b, fTensorElemType, int64(t.dtype))
	return appendMsg(b, fTensorShape, t.shape)
}

type typeMsg struct{ tensorTypeMsg }

func (t typeMsg) size() int { return sizeMsg(fTypeTensorType, t.tensorTypeMsg) }

func (t typeMsg) appendTo(b []byte) []byte {
	return appendMsg(b, fTypeTensorType, t.tensorTypeMsg)
}

func (v *valueInfo) typ() typeMsg {
	return typeMsg{tensorTypeMsg{dtype: v.dtype, shape: v.shape}}
}

func (v *valueInfo) size() int {
	return sizeStr(fValueInfoName, v.name) + sizeMsg(fValueInfoType, v.typ())
}

func (v *valueInfo) appendTo(b []byte) []byte {
	b = appendStr(b, fValueInfoName, v.name)
	return appendMsg(b, fValueInfoType, v.typ())
}
