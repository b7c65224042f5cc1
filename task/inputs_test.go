package task

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inferq/inferq/tensor"
)

func body(kwargs, args string) string {
	if args == "" {
		args = "[]"
	}
	return `{"task_id":"t","task_name":"m","args":` + args + `,"kwargs":` + kwargs + `,"created_at":"2026-06-01T12:00:00.000000+00:00"}`
}

// inputCases are JSON tasks read against a model; the fuzz corpus is
// seeded from them.
var inputCases = []struct {
	name  string
	body  string
	model tensor.ModelInfo
	lim   Limits
	want  []tensor.Tensor // nil when an error is expected
	err   error
	msg   []string
}{
	// Form 1: kwargs.inputs.
	{name: "oip flat", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":`+seq(16, 0.5)+`}]}`, ""),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 0.5)}}},
	{name: "oip nested", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[2,16],"datatype":"FP32","data":[`+seq(16, 0)+`,`+seq(16, 16)+`]}]}`, ""),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{2, 16}, Data: seqFloats(32, 0)}}},
	{name: "oip one row adds batch dim", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[16],"datatype":"fp32","data":`+seq(16, 0)+`}]}`, ""),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 0)}}},
	{name: "oip shape from nesting", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","datatype":"FP32","data":[`+seq(16, 0)+`]}]}`, ""),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 0)}}},
	{name: "oip wins over args", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":`+seq(16, 0)+`}]}`, `[[1]]`),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 0)}}},
	{name: "oip dtype mismatch", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"INT64","data":`+seq(16, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": expected FP32 [-1,16], got INT64 [1,16]`}},
	{name: "oip dim mismatch", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,15],"datatype":"FP32","data":`+seq(15, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": expected FP32 [-1,16], got FP32 [1,15]`}},
	{name: "oip rank mismatch", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,1,16],"datatype":"FP32","data":`+seq(16, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": expected FP32 [-1,16], got FP32 [1,1,16]`}},
	{name: "oip fixed batch dim", model: fixedModel,
		body: body(`{"inputs":[{"name":"x","shape":[2,3],"datatype":"FP32","data":`+seq(6, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": expected FP32 [1,3], got FP32 [2,3]`}},
	{name: "oip unknown input", model: mlpModel,
		body: body(`{"inputs":[{"name":"z","shape":[1,16],"datatype":"FP32","data":`+seq(16, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "z": not an input of the model (inputs: x FP32 [-1,16])`}},
	{name: "oip twice", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[16],"datatype":"FP32","data":`+seq(16, 0)+`},{"name":"x","shape":[16],"datatype":"FP32","data":`+seq(16, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": given twice`}},
	{name: "oip missing input", model: multiModel,
		body: body(`{"inputs":[{"name":"ids","shape":[1,4],"datatype":"INT64","data":[1,2,3,4]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "mask": missing`}},
	{name: "oip empty list", model: mlpModel, body: body(`{"inputs":[]}`, `[[1]]`),
		err: ErrBadInput, msg: []string{`input "x": missing`}},
	{name: "oip unknown datatype", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FLOAT","data":`+seq(16, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": datatype:`, `"FLOAT"`}},
	{name: "oip no name", model: mlpModel,
		body: body(`{"inputs":[{"shape":[1,16],"datatype":"FP32","data":[]}]}`, ""),
		err:  ErrBadInput, msg: []string{`kwargs.inputs[0]: no name`}},
	{name: "oip not an object", model: mlpModel, body: body(`{"inputs":[5]}`, ""),
		err: ErrBadInput, msg: []string{`kwargs.inputs[0]: want a tensor object`}},
	{name: "oip bad shape", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,-16],"datatype":"FP32","data":[]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": shape: dim -16 is not a non-negative integer`}},
	{name: "oip no data", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32"}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": no data`}},
	{name: "oip flat count short", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":`+seq(15, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": data has shape [15], the tensor says [1,16]`}},
	{name: "oip flat count long", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":`+seq(17, 0)+`}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": data holds more than the 16 elements of shape [1,16]`}},
	{name: "oip nesting disagrees", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[2,16],"datatype":"FP32","data":[`+seq(32, 0)+`]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": data has shape [1,32], the tensor says [2,16]`}},
	{name: "oip huge shape small body", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1000000000,16],"datatype":"FP32","data":[1]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": shape [1000000000,16] has 16000000000 elements, data holds 2 at most`}},
	{name: "oip over limit", model: mlpModel, lim: Limits{MaxTensorElements: 20},
		body: body(`{"inputs":[{"name":"x","shape":[2,16],"datatype":"FP32","data":`+seq(32, 0)+`}]}`, ""),
		err:  ErrTooLarge, msg: []string{`input "x"`, `more than 20 elements`}},
	{name: "oip binary size in JSON form", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":64}}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": binary_data_size needs the binary form`}},
	{name: "oip fp16 json", model: multiModel,
		body: body(`{"inputs":[{"name":"half","shape":[1,2],"datatype":"FP16","data":[1,2]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "half": FP16 data needs the binary form`}},
	{name: "oip uint8 range", model: multiModel,
		body: body(`{"inputs":[{"name":"pix","shape":[1,2],"datatype":"UINT8","data":[1,300]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "pix": element 1: 300 is out of range for UINT8`}},
	{name: "oip int64 fraction", model: multiModel,
		body: body(`{"inputs":[{"name":"ids","shape":[1,4],"datatype":"INT64","data":[1,2,1.5,4]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "ids": element 2: 1.5 is not an integer (INT64)`}},
	{name: "oip bool from number", model: multiModel,
		body: body(`{"inputs":[{"name":"mask","shape":[1,4],"datatype":"BOOL","data":[true,false,1,0]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "mask": element 2: BOOL elements are true or false`}},
	{name: "oip bytes from number", model: multiModel,
		body: body(`{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a",2]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "text": element 1: BYTES elements are JSON strings`}},
	{name: "oip ragged", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","datatype":"FP32","data":[`+seq(16, 0)+`,[1]]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": ragged nested array: dim 1 has 1 elements here and 16 before`}},
	{name: "oip ragged depth", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","datatype":"FP32","data":[`+seq(16, 0)+`,1]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": ragged nested array: a scalar at depth 1`}},
	{name: "oip string in FP32", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","datatype":"FP32","data":["1"]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": element 0: invalid JSON`}},
	{name: "oip FP32 overflow", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","datatype":"FP32","data":[1e39]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": element 0: 1e39 is out of range for FP32`}},
	{name: "oip FP32 overflow names the element", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":[0,1,2,1e999,4,5,6,7,8,9,10,11,12,13,14,15]}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": element 3: 1e999 is out of range for FP32`}},
	{name: "oip FP32 overflow, data before datatype", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","data":[0,1,2,-1e999,4,5,6,7,8,9,10,11,12,13,14,15],"shape":[1,16],"datatype":"FP32"}]}`, ""),
		err:  ErrBadInput, msg: []string{`input "x": element 3: -1e999 is out of range for FP32`}},
	{name: "oip non-finite kept", model: mlpModel,
		body: body(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":[NaN,Infinity,-Infinity,"NaN","Infinity","-Infinity",6,7,8,9,10,11,12,13,14,15]}]}`, ""),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: append(
			floats(float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))),
			seqFloats(10, 6)...)}}},
	{name: "oip all multi", model: multiModel,
		body: body(`{"inputs":[
			{"name":"mask","shape":[1,4],"datatype":"BOOL","data":[true,false,true,true]},
			{"name":"ids","shape":[1,4],"datatype":"INT64","data":[[-1,0,9007199254740993,4]]},
			{"name":"text","shape":[2],"datatype":"BYTES","data":["héllo","a\"\u00e9\n"]},
			{"name":"pix","shape":[2],"datatype":"UINT8","data":[0,255]},
			{"name":"half","shape":[1,2],"datatype":"FP16","data":null,"parameters":{"binary_data_size":4}}]}`, ""),
		err: ErrBadInput, msg: []string{`input "half": binary_data_size needs the binary form`}},
	{name: "oip types", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{
		info("mask", tensor.BOOL, -1, 4), info("ids", tensor.INT64, -1, 4), info("text", tensor.BYTES, -1), info("pix", tensor.UINT8, -1, 2)}},
		body: body(`{"inputs":[
			{"name":"mask","shape":[1,4],"datatype":"BOOL","data":[true,false,true,true]},
			{"name":"ids","shape":[1,4],"datatype":"INT64","data":[[-1,0,9007199254740993,4]]},
			{"name":"text","shape":[2],"datatype":"BYTES","data":["héllo","a\"\u00e9\n"]},
			{"name":"pix","shape":[2],"datatype":"UINT8","data":[0,255]}]}`, ""),
		want: []tensor.Tensor{
			tensor.NewTensor("mask", []int64{1, 4}, []bool{true, false, true, true}),
			tensor.NewTensor("ids", []int64{1, 4}, []int64{-1, 0, 9007199254740993, 4}),
			tensor.NewBytesTensor("text", []int64{2}, [][]byte{[]byte("héllo"), []byte("a\"é\n")}),
			tensor.NewTensor("pix", []int64{1, 2}, []uint8{0, 255}),
		}},
	// Form 2: kwargs by input name.
	{name: "named", model: mlpModel, body: body(`{"x":[`+seq(16, 1)+`],"priority":2}`, ""),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 1)}}},
	{name: "named one row", model: mlpModel, body: body(`{"x":`+seq(16, 1)+`}`, `[[9]]`),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 1)}}},
	{name: "named unknown", model: mlpModel, body: body(`{"x":`+seq(16, 1)+`,"y":[1]}`, ""),
		err: ErrBadInput, msg: []string{`input "y": not an input of the model`}},
	{name: "named mismatch", model: mlpModel, body: body(`{"x":`+seq(15, 1)+`}`, ""),
		err: ErrBadInput, msg: []string{`input "x": expected FP32 [-1,16], got FP32 [15]`}},
	{name: "named missing", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("a", tensor.INT32, -1), info("b", tensor.INT32, -1)}},
		body: body(`{"a":[1,2]}`, ""), err: ErrBadInput, msg: []string{`input "b": missing`}},
	{name: "named two", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("a", tensor.INT32, -1), info("b", tensor.FP64, -1, 2)}},
		body: body(`{"b":[[1.5,2],[3,4e300]],"a":[7,8]}`, ""),
		want: []tensor.Tensor{
			tensor.NewTensor("a", []int64{2}, []int32{7, 8}),
			tensor.NewTensor("b", []int64{2, 2}, []float64{1.5, 2, 3, 4e300}),
		}},
	{name: "named FP64 overflow", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("b", tensor.FP64, -1, 2)}},
		body: body(`{"b":[[1.5,2],[3,4e400]]}`, ""), err: ErrBadInput, msg: []string{`input "b": element 3: 4e400 is out of range for FP64`}},
	{name: "named INT8 overflow", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("n", tensor.INT8, -1, 2)}},
		body: body(`{"n":[[1,-128],[127,128]]}`, ""), err: ErrBadInput, msg: []string{`input "n": element 3: 128 is out of range for INT8`}},
	{name: "named fp16", model: multiModel, body: body(`{"half":[1,2]}`, ""),
		err: ErrBadInput, msg: []string{`input "half": FP16 data needs the binary form`}},
	// Form 3: args[0].
	{name: "args", model: mlpModel, body: body(`{}`, `[[`+seq(16, 2)+`]]`),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 2)}}},
	{name: "args one row", model: mlpModel, body: body(`{"outputs":["y"]}`, `[`+seq(16, 2)+`]`),
		want: []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{1, 16}, Data: seqFloats(16, 2)}}},
	{name: "args scalar", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("n", tensor.INT64, -1)}}, body: body(`{}`, `[5]`),
		want: []tensor.Tensor{tensor.NewTensor("n", []int64{1}, []int64{5})}},
	{name: "args bytes", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("text", tensor.BYTES, -1)}}, body: body(`{}`, `["great product"]`),
		want: []tensor.Tensor{tensor.NewBytesTensor("text", []int64{1}, [][]byte{[]byte("great product")})}},
	{name: "args two", model: mlpModel, body: body(`{}`, `[`+seq(16, 2)+`, 5]`),
		err: ErrBadInput, msg: []string{`args: want one argument, the input's data, got 2`}},
	{name: "args multi-input model", model: multiModel, body: body(`{}`, `[[1,2,3,4]]`),
		err: ErrBadInput, msg: []string{`args: the model has 5 inputs`}},
	{name: "args FP32 overflow", model: mlpModel, body: body(`{}`, `[[0,1,2,1e999,4,5,6,7,8,9,10,11,12,13,14,15]]`),
		err: ErrBadInput, msg: []string{`input "x": element 3: 1e999 is out of range for FP32`}},
	{name: "args mismatch", model: mlpModel, body: body(`{}`, `[[[[1,2]]]]`),
		err: ErrBadInput, msg: []string{`input "x": expected FP32 [-1,16], got FP32 [1,1,2]`}},
	{name: "args over limit", model: mlpModel, lim: Limits{MaxTensorElements: 16}, body: body(`{}`, `[[`+seq(16, 2)+`,`+seq(16, 2)+`]]`),
		err: ErrTooLarge, msg: []string{`input "x"`, `more than 16 elements`}},
	{name: "args empty array", model: mlpModel, body: body(`{}`, `[[]]`),
		err: ErrBadInput, msg: []string{`input "x": expected FP32 [-1,16], got FP32 [0]`}},
	{name: "no inputs", model: mlpModel, body: body(`{"outputs":["y"]}`, `[]`),
		err: ErrBadInput, msg: []string{`no inputs`}},
	{name: "model type not carried", model: tensor.ModelInfo{Inputs: []tensor.TensorInfo{{Name: "q", Dims: []int64{-1}, ONNXType: "BFLOAT16"}}},
		body: body(`{}`, `[[1]]`), err: ErrBadInput, msg: []string{`input "q": the model's type BFLOAT16 cannot be carried`}},
}

func TestInputs(t *testing.T) {
	for _, c := range inputCases {
		t.Run(c.name, func(t *testing.T) {
			tk, err := Parse([]byte(c.body), nil, c.lim)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := tk.Inputs(c.model, c.lim)
			if c.want == nil {
				wantErr(t, err, c.err, c.msg...)
				if c.err == ErrTooLarge {
					wantErr(t, err, ErrBadInput)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkTensors(t, got, c.want)
		})
	}
}

func checkTensors(t *testing.T, got, want []tensor.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %d = %v % x, want %v % x", i, g, head(g.Data), w, head(w.Data))
		}
		if err := g.Validate(); err != nil {
			t.Errorf("tensor %d: %v", i, err)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 32)] }

// binaryBody assembles a binary-form task by hand.
func binaryBody(header string, data ...[]byte) ([]byte, map[string]string) {
	b := []byte(header)
	for _, d := range data {
		b = append(b, d...)
	}
	return b, map[string]string{TagContentType: ContentTypeBinary, TagHeaderLength: strconv.Itoa(len(header))}
}

func binHeader(tensors ...string) string {
	return body(`{"inputs":[`+strings.Join(tensors, ",")+`]}`, "")
}

func binTensor(name, dt, shape string, size int) string {
	return fmt.Sprintf(`{"name":%q,"shape":%s,"datatype":%q,"parameters":{"binary_data_size":%d}}`, name, shape, dt, size)
}

func TestBinaryInputs(t *testing.T) {
	ids := tensor.NewTensor("ids", []int64{1, 4}, []int64{1, -2, 3, 1 << 40})
	mask := tensor.NewTensor("mask", []int64{1, 4}, []bool{true, false, false, true})
	text := tensor.NewBytesTensor("text", []int64{3}, [][]byte{[]byte("a"), {0, 0xff}, nil})
	pix := tensor.NewTensor("pix", []int64{1, 2}, []uint8{7, 250})
	half := tensor.Tensor{Name: "half", DType: tensor.FP16, Shape: []int64{1, 2}, Data: []byte{0x00, 0x3c, 0x00, 0xc0}} // 1, -2
	header := binHeader(
		binTensor("half", "FP16", "[2]", 4),
		binTensor("ids", "INT64", "[1,4]", 32),
		`{"name":"mask","shape":[1,4],"datatype":"BOOL","data":[true,false,false,true]}`, // JSON among binary
		binTensor("text", "BYTES", "[3]", len(text.Data)),
		binTensor("pix", "UINT8", "[1,2]", 2))
	b, tags := binaryBody(header, half.Data, ids.Data, text.Data, pix.Data)
	tk, err := Parse(b, tags, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Inputs(multiModel, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, got, []tensor.Tensor{ids, mask, text, pix, half})
	for _, i := range []int{0, 2, 3, 4} {
		if !within(got[i].Data, b) {
			t.Errorf("input %s was copied, want a slice of the body", got[i].Name)
		}
		if cap(got[i].Data) != len(got[i].Data) {
			t.Errorf("input %s: capacity %d beyond its length %d", got[i].Name, cap(got[i].Data), len(got[i].Data))
		}
	}
	if !tk.Binary {
		t.Error("Binary not set")
	}
}

var binaryCases = []struct {
	name   string
	header string
	data   []byte
	msg    string
}{
	{"size too small", binHeader(binTensor("x", "FP32", "[1,16]", 60)), make([]byte, 60),
		`input "x": binary_data_size is 60 bytes, FP32 [1,16] needs 64`},
	{"size too large", binHeader(binTensor("x", "FP32", "[1,16]", 68)), make([]byte, 68),
		`input "x": binary_data_size is 68 bytes, FP32 [1,16] needs 64`},
	{"overrun", binHeader(binTensor("x", "FP32", "[1,16]", 64)), make([]byte, 63),
		`input "x": binary_data_size 64 overruns the binary data (63 bytes left of 63)`},
	{"trailing bytes", binHeader(binTensor("x", "FP32", "[1,16]", 64)), make([]byte, 65),
		`binary_data_size values add up to 64 bytes, the body carries 65 after the header`},
	{"no shape", binHeader(`{"name":"x","datatype":"FP32","parameters":{"binary_data_size":64}}`), make([]byte, 64),
		`input "x": binary data needs a shape`},
	{"data and size", binHeader(`{"name":"x","shape":[1,16],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":64}}`), make([]byte, 64),
		`input "x": both data and binary_data_size`},
	{"bad size", binHeader(`{"name":"x","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":-64}}`), make([]byte, 64),
		`input "x": parameters.binary_data_size: -64 is not a byte count`},
	{"shape mismatch", binHeader(binTensor("x", "FP32", "[1,15]", 60)), make([]byte, 60),
		`input "x": expected FP32 [-1,16], got FP32 [1,15]`},
	{"huge shape", binHeader(binTensor("x", "FP32", "[4611686018427387904,16]", 64)), make([]byte, 64),
		`input "x": shape [4611686018427387904,16] overflows`},
	{"over limit", binHeader(binTensor("x", "FP32", "[100000000,16]", 64)), make([]byte, 64),
		`more than 67108864 elements`},
	{"unused binary data", body(`{"x":`+seq(16, 0)+`}`, ""), make([]byte, 8),
		`add up to 0 bytes, the body carries 8 after the header`},
}

func TestBinaryErrors(t *testing.T) {
	for _, c := range binaryCases {
		t.Run(c.name, func(t *testing.T) {
			b, tags := binaryBody(c.header, c.data)
			tk, err := Parse(b, tags, Limits{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			_, err = tk.Inputs(mlpModel, Limits{})
			wantErr(t, err, ErrBadInput, c.msg)
		})
	}
	// BYTES data whose encoding does not hold the shape's elements.
	bad := []byte{5, 0, 0, 0, 'a'}
	b, tags := binaryBody(binHeader(binTensor("text", "BYTES", "[1]", len(bad))), bad)
	tk, err := Parse(b, tags, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tk.Inputs(tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("text", tensor.BYTES, -1)}}, Limits{})
	wantErr(t, err, ErrBadInput, `input "text"`, "overruns")
	two := binary.LittleEndian.AppendUint32(nil, 0)
	two = binary.LittleEndian.AppendUint32(two, 0)
	b, tags = binaryBody(binHeader(binTensor("text", "BYTES", "[1]", 8)), two)
	tk, _ = Parse(b, tags, Limits{})
	_, err = tk.Inputs(tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("text", tensor.BYTES, -1)}}, Limits{})
	wantErr(t, err, ErrBadInput, `input "text"`, "needs 1 elements, data holds 2")
}

// A shape error names the input, the model's dims and the shape the client
// sent, as sent: data one dim short of the model's is read as one row, but
// the row's added dim 1 never shows in the error (issue 25 item 2: [1,3,320]
// sent to a [-1,3,-1,-1] model was reported as [1,1,3,320]). Every form
// that carries a shape: JSON with "shape", shape from the nesting, named
// kwargs, args[0], the binary form and raw tensors (gRPC).
func TestShapeErrorShowsShapeAsSent(t *testing.T) {
	model := tensor.ModelInfo{Inputs: []tensor.TensorInfo{info("images", tensor.FP32, -1, 3, -1, -1)}}
	const want = `input "images": expected FP32 [-1,3,-1,-1], got FP32 [1,3,2]`
	nested := "[[" + seq(2, 0) + "," + seq(2, 2) + "," + seq(2, 4) + "]]" // [1,3,2]
	for _, tc := range []struct {
		name string
		body string
		tags map[string]string
	}{
		{"shape", body(`{"inputs":[{"name":"images","shape":[1,3,2],"datatype":"FP32","data":`+seq(6, 0)+`}]}`, ""), nil},
		{"data before shape", body(`{"inputs":[{"name":"images","data":`+seq(6, 0)+`,"datatype":"FP32","shape":[1,3,2]}]}`, ""), nil},
		{"nesting", body(`{"inputs":[{"name":"images","datatype":"FP32","data":`+nested+`}]}`, ""), nil},
		{"named", body(`{"images":`+nested+`}`, ""), nil},
		{"args", body(`{}`, `[`+nested+`]`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, err := Parse([]byte(tc.body), tc.tags, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tk.Inputs(model, Limits{})
			wantErr(t, err, ErrBadInput, want)
		})
	}
	t.Run("binary", func(t *testing.T) {
		b, tags := binaryBody(binHeader(binTensor("images", "FP32", "[1,3,2]", 24)), make([]byte, 24))
		tk, err := Parse(b, tags, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tk.Inputs(model, Limits{})
		wantErr(t, err, ErrBadInput, want)
	})
	t.Run("raw", func(t *testing.T) {
		tk := NewInfer("", []RawTensor{{Name: "images", Datatype: "FP32", Shape: []int64{1, 3, 2}, Data: make([]byte, 24)}}, nil, false, 100, Limits{})
		_, err := tk.Inputs(model, Limits{})
		wantErr(t, err, ErrBadInput, want)
	})
}
