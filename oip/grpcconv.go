package oip

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// The conversion between the Open Inference Protocol's gRPC messages and
// what admission reads: a ModelInferRequest becomes a task.Task built
// from raw tensors (task.NewInfer), which Task.Inputs checks against the
// model as it checks the HTTP binary form's tensors, so both transports
// share the datatype, shape, size and element rules and their error texts.
//
// Request tensors carry their data either all in raw_input_contents (the
// binary form's little-endian bytes; BYTES elements each a 4-byte
// little-endian length and the bytes, as Triton writes them) or each in
// its typed contents field: bool_contents for BOOL, int_contents for INT8,
// INT16 and INT32 (range-checked), int64_contents, uint_contents for
// UINT8, UINT16 and UINT32 (range-checked), uint64_contents,
// fp32_contents, fp64_contents, bytes_contents. FP16 has no typed field:
// it travels raw only.
//
// Request parameters read: timeout (int64, microseconds, Triton's: the
// request is not run after it), priority (int64 or uint64, as Triton
// reads it). Others are ignored, as Triton ignores parameters it does not
// know; binary_data_output and binary_data are the HTTP extension's and
// change nothing here: outputs always come back in raw_output_contents,
// as Triton's do (grpcOutputs).

// grpcRequest is a ModelInferRequest read for admission.
type grpcRequest struct {
	task *task.Task
}

// readGRPCInfer converts req for admission within lim (the model's
// element limit applies in Task.Inputs; here it bounds nothing the
// message did not already hold). size is the message's size in bytes.
// Errors wrap task.ErrBadInput.
func readGRPCInfer(req *pb.ModelInferRequest, size int, lim task.Limits) (grpcRequest, error) {
	var r grpcRequest
	ins, err := rawInputs(req)
	if err != nil {
		return r, err
	}
	var outs []task.OutputRequest
	for i, o := range req.Outputs {
		if o.GetName() == "" {
			return r, fmt.Errorf("%w: outputs[%d]: an output without a name", task.ErrBadInput, i)
		}
		outs = append(outs, task.OutputRequest{Name: o.Name})
	}
	r.task = task.NewInfer(req.Id, ins, outs, false, size, lim)
	if r.task.Timeout, err = timeoutParam(req.Parameters); err != nil {
		return r, err
	}
	p, err := priorityParam(req.Parameters)
	if err != nil {
		return r, err
	}
	r.task.Priority = p
	return r, nil
}

// priorityParam reads the priority parameter as Triton does: an
// int64_param or a uint64_param (Triton's Python and Go clients send the
// latter); 0 when absent. Values beyond int32 are clamped to it:
// admission refuses them against batching.priority_levels anyway.
func priorityParam(ps map[string]*pb.InferParameter) (int, error) {
	p, ok := ps["priority"]
	if !ok {
		return 0, nil
	}
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_Int64Param:
		return int(min(max(v.Int64Param, math.MinInt32), math.MaxInt32)), nil
	case *pb.InferParameter_Uint64Param:
		return int(min(v.Uint64Param, math.MaxInt32)), nil
	}
	return 0, fmt.Errorf("%w: parameters.priority: want an int64_param or a uint64_param", task.ErrBadInput)
}

// rawInputs returns req's input tensors with their data in the raw form.
func rawInputs(req *pb.ModelInferRequest) ([]task.RawTensor, error) {
	raw := req.RawInputContents
	if len(raw) > 0 && len(raw) != len(req.Inputs) {
		return nil, fmt.Errorf("%w: raw_input_contents holds %d tensors for %d inputs; want one per input, in order", task.ErrBadInput, len(raw), len(req.Inputs))
	}
	out := make([]task.RawTensor, len(req.Inputs))
	for i, in := range req.Inputs {
		if in == nil {
			return nil, fmt.Errorf("%w: inputs[%d]: empty", task.ErrBadInput, i)
		}
		t := task.RawTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
		switch {
		case len(raw) > 0 && in.Contents != nil:
			return nil, fmt.Errorf("%w: input %q: both contents and raw_input_contents; use one", task.ErrBadInput, in.Name)
		case len(raw) > 0:
			t.Data = raw[i]
			if t.Data == nil {
				t.Data = []byte{} // present and empty: a zero-element tensor
			}
		default:
			data, err := typedData(in)
			if err != nil {
				return nil, fmt.Errorf("%w: input %q: %w", task.ErrBadInput, in.Name, err)
			}
			t.Data = data
		}
		out[i] = t
	}
	return out, nil
}

// contentFields are InferTensorContents' fields: their names and lengths.
func contentFields(c *pb.InferTensorContents) [8]struct {
	name string
	n    int
} {
	return [8]struct {
		name string
		n    int
	}{
		{"bool_contents", len(c.GetBoolContents())}, {"int_contents", len(c.GetIntContents())},
		{"int64_contents", len(c.GetInt64Contents())}, {"uint_contents", len(c.GetUintContents())},
		{"uint64_contents", len(c.GetUint64Contents())}, {"fp32_contents", len(c.GetFp32Contents())},
		{"fp64_contents", len(c.GetFp64Contents())}, {"bytes_contents", len(c.GetBytesContents())},
	}
}

// typedField is the contents field that carries each datatype.
var typedField = map[tensor.DType]string{
	tensor.BOOL: "bool_contents", tensor.INT8: "int_contents", tensor.INT16: "int_contents", tensor.INT32: "int_contents",
	tensor.INT64: "int64_contents", tensor.UINT8: "uint_contents", tensor.UINT16: "uint_contents", tensor.UINT32: "uint_contents",
	tensor.UINT64: "uint64_contents", tensor.FP32: "fp32_contents", tensor.FP64: "fp64_contents", tensor.BYTES: "bytes_contents",
}

// typedData returns the raw form of a tensor's typed contents.
func typedData(in *pb.ModelInferRequest_InferInputTensor) ([]byte, error) {
	dt, err := tensor.ParseDType(in.Datatype)
	if err != nil {
		return nil, fmt.Errorf("datatype: %w", err)
	}
	if in.Contents == nil {
		return nil, fmt.Errorf("no data: want contents or raw_input_contents")
	}
	field, ok := typedField[dt]
	if !ok {
		return nil, fmt.Errorf("%s has no typed contents field; send it in raw_input_contents", dt)
	}
	for _, f := range contentFields(in.Contents) {
		if f.n > 0 && f.name != field {
			return nil, fmt.Errorf("%s data goes in contents.%s; got %d values in contents.%s", dt, field, f.n, f.name)
		}
	}
	c := in.Contents
	switch dt {
	case tensor.BOOL:
		b := make([]byte, len(c.BoolContents))
		for i, v := range c.BoolContents {
			if v {
				b[i] = 1
			}
		}
		return b, nil
	case tensor.INT8:
		return narrow(c.IntContents, math.MinInt8, math.MaxInt8, dt, func(b []byte, v int32) []byte { return append(b, byte(int8(v))) })
	case tensor.INT16:
		return narrow(c.IntContents, math.MinInt16, math.MaxInt16, dt, func(b []byte, v int32) []byte {
			return binary.LittleEndian.AppendUint16(b, uint16(int16(v)))
		})
	case tensor.INT32:
		return slices.Clone(tensor.AsBytes(c.IntContents)), nil
	case tensor.INT64:
		return slices.Clone(tensor.AsBytes(c.Int64Contents)), nil
	case tensor.UINT8:
		return narrow(c.UintContents, 0, math.MaxUint8, dt, func(b []byte, v uint32) []byte { return append(b, byte(v)) })
	case tensor.UINT16:
		return narrow(c.UintContents, 0, math.MaxUint16, dt, func(b []byte, v uint32) []byte {
			return binary.LittleEndian.AppendUint16(b, uint16(v))
		})
	case tensor.UINT32:
		return slices.Clone(tensor.AsBytes(c.UintContents)), nil
	case tensor.UINT64:
		return slices.Clone(tensor.AsBytes(c.Uint64Contents)), nil
	case tensor.FP32:
		return slices.Clone(tensor.AsBytes(c.Fp32Contents)), nil
	case tensor.FP64:
		return slices.Clone(tensor.AsBytes(c.Fp64Contents)), nil
	}
	n := 0
	for _, e := range c.BytesContents {
		n += 4 + len(e)
	}
	b := make([]byte, 0, n)
	for _, e := range c.BytesContents {
		if uint64(len(e)) > math.MaxUint32 {
			return nil, fmt.Errorf("a BYTES element of %d bytes is over the 4 GiB the raw form can carry", len(e))
		}
		b = tensor.AppendBytesElement(b, e)
	}
	return b, nil
}

// narrow packs values into a smaller integer type, refusing one out of
// [lo, hi].
func narrow[T int32 | uint32](vs []T, lo, hi int64, dt tensor.DType, put func([]byte, T) []byte) ([]byte, error) {
	b := make([]byte, 0, len(vs)*dt.Size())
	for i, v := range vs {
		if int64(v) < lo || int64(v) > hi {
			return nil, fmt.Errorf("value %d at [%d] is out of range for %s", v, i, dt)
		}
		b = put(b, v)
	}
	return b, nil
}

// intParam reads an int64 request parameter (0 when absent).
func intParam(ps map[string]*pb.InferParameter, name string) (int64, error) {
	p, ok := ps[name]
	if !ok {
		return 0, nil
	}
	v, ok := p.GetParameterChoice().(*pb.InferParameter_Int64Param)
	if !ok {
		return 0, fmt.Errorf("%w: parameters.%s: want an int64_param", task.ErrBadInput, name)
	}
	return v.Int64Param, nil
}

// timeoutParam reads Triton's timeout parameter: microseconds, 0 none.
func timeoutParam(ps map[string]*pb.InferParameter) (time.Duration, error) {
	us, err := intParam(ps, "timeout")
	switch {
	case err != nil:
		return 0, err
	case us < 0:
		return 0, fmt.Errorf("%w: parameters.timeout is %d; want microseconds, 0 or more", task.ErrBadInput, us)
	case us > math.MaxInt64/int64(time.Microsecond):
		return 0, fmt.Errorf("%w: parameters.timeout of %d microseconds overflows", task.ErrBadInput, us)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// grpcOutputs writes outputs into resp, each in raw_output_contents as
// Triton's gRPC server always writes them (whatever form the inputs came
// in: its response allocator adds one raw_output_contents per output, and
// Triton's clients index it); no typed contents.
func grpcOutputs(resp *pb.ModelInferResponse, outputs []tensor.Tensor) {
	resp.Outputs = make([]*pb.ModelInferResponse_InferOutputTensor, len(outputs))
	resp.RawOutputContents = make([][]byte, len(outputs))
	for i, o := range outputs {
		resp.Outputs[i] = &pb.ModelInferResponse_InferOutputTensor{Name: o.Name, Datatype: o.DType.String(), Shape: o.Shape}
		resp.RawOutputContents[i] = o.Data
	}
}
