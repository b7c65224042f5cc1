package oip

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"google.golang.org/protobuf/proto"
)

// fuzzInfo is a model with inputs of several forms for the fuzz target.
var fuzzInfo = tensor.ModelInfo{Inputs: []tensor.TensorInfo{
	{Name: "a", DType: tensor.FP32, Dims: []int64{-1, 2}},
	{Name: "b", DType: tensor.BYTES, Dims: []int64{-1}},
	{Name: "c", DType: tensor.INT8, Dims: []int64{-1, 3}},
	{Name: "d", DType: tensor.FP16, Dims: []int64{-1, 1}},
}}

// FuzzGRPCInferRequest feeds arbitrary ModelInferRequest messages through
// the conversion and Task.Inputs, as admission does: no panic, every error
// wraps task.ErrBadInput, and the tensors of an accepted request are valid,
// within the element limit, and survive the typed form both ways.
func FuzzGRPCInferRequest(f *testing.F) {
	seeds := []*pb.ModelInferRequest{
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "a", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2}}},
			{Name: "b", Datatype: "BYTES", Shape: []int64{2}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x"), nil}}},
			{Name: "c", Datatype: "INT8", Shape: []int64{1, 3}, Contents: &pb.InferTensorContents{IntContents: []int32{-128, 0, 127}}},
			{Name: "d", Datatype: "FP16", Shape: []int64{1, 1}, Contents: &pb.InferTensorContents{}},
		}},
		{ModelName: "m", Id: "r1", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "a", Datatype: "FP32", Shape: []int64{2}},
			{Name: "b", Datatype: "BYTES", Shape: []int64{1}},
			{Name: "c", Datatype: "INT8", Shape: []int64{3}},
			{Name: "d", Datatype: "FP16", Shape: []int64{1, 1}},
		}, RawInputContents: [][]byte{make([]byte, 8), {1, 0, 0, 0, 'z'}, {1, 2, 3}, {0, 0x3c}},
			Parameters: map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 5}},
				"priority": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y", Parameters: map[string]*pb.InferParameter{"binary_data": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	lim := task.Limits{MaxTensorElements: 1 << 12}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.ModelInferRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		r, err := readGRPCInfer(&req, len(data), lim)
		if err != nil {
			if !errors.Is(err, task.ErrBadInput) {
				t.Fatalf("conversion error %v does not wrap ErrBadInput", err)
			}
			return
		}
		ins, err := r.task.Inputs(fuzzInfo, lim)
		if err != nil {
			if !errors.Is(err, task.ErrBadInput) {
				t.Fatalf("Inputs error %v does not wrap ErrBadInput", err)
			}
			return
		}
		var elems int64
		for _, in := range ins {
			if err := in.Validate(); err != nil {
				t.Fatalf("accepted an invalid tensor: %v", err)
			}
			elems += tensor.NumElements(in.Shape)
			if in.DType == tensor.FP16 {
				continue
			}
			c, err := typedContents(in)
			if err != nil {
				t.Fatalf("typed contents of %s: %v", in, err)
			}
			back, err := typedData(&pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.DType.String(), Shape: in.Shape, Contents: c})
			if err != nil || !bytes.Equal(back, in.Data) {
				t.Fatalf("%s through typed contents: %v, %x != %x", in, err, back, in.Data)
			}
		}
		if elems > lim.MaxTensorElements {
			t.Fatalf("accepted %d elements over the limit %d", elems, lim.MaxTensorElements)
		}
	})
}

// The priority parameter is read as Triton reads it: an int64_param or a
// uint64_param (Triton's Python and Go clients send the latter; issue 25
// item 10 found it refused); anything else is refused naming both.
func TestGRPCPriorityParam(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *pb.InferParameter
		want int
		err  string
	}{
		{"int64", &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 2}}, 2, ""},
		{"uint64", &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 3}}, 3, ""},
		{"uint64 beyond int32", &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1 << 63}}, math.MaxInt32, ""},
		{"string", &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "1"}}, 0, "parameters.priority: want an int64_param or a uint64_param"},
		{"bool", &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}, 0, "parameters.priority: want an int64_param or a uint64_param"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &pb.ModelInferRequest{ModelName: "m", Parameters: map[string]*pb.InferParameter{"priority": tc.p}}
			r, err := readGRPCInfer(req, 10, task.Limits{})
			if tc.err != "" {
				if err == nil || !errors.Is(err, task.ErrBadInput) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want bad input saying %q", err, tc.err)
				}
				return
			}
			if err != nil || r.task.Priority != tc.want {
				t.Fatalf("priority %v, error %v; want %d", r.task, err, tc.want)
			}
		})
	}
}
