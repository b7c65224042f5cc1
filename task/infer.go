package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/inferq/inferq/tensor"
)

// ParseInfer reads an Open Inference Protocol infer request body,
// {"id"?, "parameters"?, "inputs": [...], "outputs"?}, as a Task whose
// inputs are form 1 of Task.Inputs (errors name them "inputs", not
// "kwargs.inputs"). headerLen is the Inference-Header-Content-Length
// header of the binary tensor extension: "" for plain JSON, else the
// length of the JSON, the raw tensor data following it as in the binary
// form of a task. The Task's ID is the request's id (empty when absent),
// its Name is empty (the URL names the model), Outputs and BinaryOutputs
// come from "outputs" (binary_data or binary_data_output per output) and
// "parameters".binary_data_output, Priority from "parameters".priority.
//
// Errors: ErrUndecodable when the body is not a JSON object or the header
// length does not fit it, ErrTooLarge when it is over lim.MaxBodyBytes,
// ErrBadInput for a malformed member; the Task is nil with every error.
func ParseInfer(body []byte, headerLen string, lim Limits) (*Task, error) {
	lim = lim.withDefaults()
	if int64(len(body)) > lim.MaxBodyBytes {
		return nil, fmt.Errorf("%w: body of %d bytes, limit %d", ErrTooLarge, len(body), lim.MaxBodyBytes)
	}
	t := &Task{Attempt: 1, Size: len(body), maxElems: lim.MaxTensorElements, inputsPath: "inputs", infer: true}
	header := body
	if headerLen = strings.TrimSpace(headerLen); headerLen != "" {
		n, err := strconv.Atoi(headerLen)
		if err != nil || n < 0 || n > len(body) {
			return nil, fmt.Errorf("%w: %s %q does not fit a body of %d bytes", ErrUndecodable, HeaderInferenceLength, headerLen, len(body))
		}
		header, t.Binary, t.bin = body[:n], true, body[n:]
	}
	var req struct {
		ID         json.RawMessage `json:"id"`
		Inputs     json.RawMessage `json:"inputs"`
		Outputs    json.RawMessage `json:"outputs"`
		Parameters json.RawMessage `json:"parameters"`
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("%w: request body: %v", ErrUndecodable, err)
	}
	if off := dec.InputOffset(); len(bytes.TrimLeft(header[off:], " \t\r\n")) > 0 {
		return nil, fmt.Errorf("%w: request body: offset %d: data after the JSON object", ErrUndecodable, off)
	}
	if len(req.Inputs) == 0 || req.Inputs[0] != '[' {
		return nil, fmt.Errorf(`%w: request body: "inputs": want an array of tensors {"name","shape","datatype","data"}`, ErrBadInput)
	}
	if isJSONValue(req.ID) {
		if err := json.Unmarshal(req.ID, &t.ID); err != nil {
			return nil, fmt.Errorf(`%w: request body: "id": want a string`, ErrBadInput)
		}
	}
	if isJSONValue(req.Parameters) {
		var p struct {
			BinaryDataOutput bool            `json:"binary_data_output"`
			Priority         json.RawMessage `json:"priority"`
		}
		if err := json.Unmarshal(req.Parameters, &p); err != nil {
			return nil, fmt.Errorf(`%w: request body: "parameters": want an object with binary_data_output true or false: %v`, ErrBadInput, err)
		}
		t.BinaryOutputs = p.BinaryDataOutput
		if isJSONValue(p.Priority) {
			var n int32
			if err := json.Unmarshal(p.Priority, &n); err != nil {
				return nil, fmt.Errorf(`%w: request body: parameters.priority: want an integer, got %s`, ErrBadInput, clip(p.Priority))
			}
			t.Priority = int(n)
		}
	}
	if isJSONValue(req.Outputs) {
		var outs []struct {
			Name       string `json:"name"`
			Parameters struct {
				BinaryData       bool `json:"binary_data"`
				BinaryDataOutput bool `json:"binary_data_output"`
			} `json:"parameters"`
		}
		if err := json.Unmarshal(req.Outputs, &outs); err != nil {
			return nil, fmt.Errorf(`%w: request body: "outputs": want an array of {"name","parameters"}: %v`, ErrBadInput, err)
		}
		for _, o := range outs {
			if o.Name == "" {
				return nil, fmt.Errorf(`%w: request body: "outputs": an output without a name`, ErrBadInput)
			}
			t.Outputs = append(t.Outputs, OutputRequest{Name: o.Name, Binary: o.Parameters.BinaryData || o.Parameters.BinaryDataOutput})
		}
	}
	wire, _, err := readTensorList(req.Inputs, 0, t.maxElems)
	if err != nil {
		return nil, fmt.Errorf("%w: request body: \"inputs\": %v", ErrUndecodable, err)
	}
	if wire == nil {
		wire = []wireTensor{}
	}
	t.wire = wire
	return t, nil
}

// isJSONValue reports a member that is present and not null.
func isJSONValue(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// RawTensor is one input of an infer request whose tensor data arrived
// outside JSON (the Open Inference Protocol over gRPC): the datatype and
// shape as the request gives them, and the raw little-endian row-major
// data of the binary form (BYTES: per element a 4-byte little-endian
// length and the bytes).
type RawTensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Data     []byte
}

// NewInfer returns the Task of an infer request that arrived as tensors,
// for Task.Inputs to check against a model exactly as it checks the binary
// form's tensors (datatype, shape, element limit, size). id is the
// request's id ("" for none); outputs and binaryOutputs are as ParseInfer
// sets them; size is the request's size in bytes. The Task aliases the
// inputs' data.
func NewInfer(id string, inputs []RawTensor, outputs []OutputRequest, binaryOutputs bool, size int, lim Limits) *Task {
	lim = lim.withDefaults()
	t := &Task{ID: id, Attempt: 1, Size: size, Outputs: outputs, BinaryOutputs: binaryOutputs,
		maxElems: lim.MaxTensorElements, inputsPath: "inputs", infer: true, wire: make([]wireTensor, len(inputs))}
	for i, in := range inputs {
		t.wire[i] = wireTensor{name: in.Name, dtName: in.Datatype, shape: in.Shape, hasShape: true, binSize: -1, raw: in.Data, hasRaw: true}
	}
	return t
}

// NewInferRequest returns an Open Inference Protocol infer request body
// for inputs, the form ParseInfer reads: JSON data, or with binary the
// binary tensor extension (the JSON, then the raw data; headerLen is the
// JSON's length, for the Inference-Header-Content-Length header, and
// len(body) otherwise). binaryOutputs asks for the outputs in the binary
// form. An invalid tensor is an error naming it.
func NewInferRequest(inputs []tensor.Tensor, binary, binaryOutputs bool) (body []byte, headerLen int, err error) {
	b := append(make([]byte, 0, 256), `{"inputs":[`...)
	var bin []byte
	for i, t := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendTensor(b, t, binary, quotedNonFinite, &bin); err != nil {
			return nil, 0, errTensor("input", t, err)
		}
	}
	b = append(b, ']')
	if binaryOutputs {
		b = append(b, `,"parameters":{"binary_data_output":true}`...)
	}
	b = append(b, '}')
	return append(b, bin...), len(b), nil
}
