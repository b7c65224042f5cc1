package oip_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
)

// Triton's gRPC server writes every output into raw_output_contents,
// whatever form the inputs came in (its response allocator adds one per
// output); a Triton client indexes it. So does inferq's, for typed inputs
// too (issue 25 item 10: typed inputs got typed outputs and a Triton client
// library panicked).
func TestGRPCOutputsAlwaysRaw(t *testing.T) {
	bs := bareServer(t, bareOpts{})
	c := serveGRPC(t, bs.srv, oip.GRPCConfig{Metrics: bs.met, Gatherer: bs.reg})()
	typed := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}}
	resp, err := c.ModelInfer(callCtx(t), typed)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 || resp.Outputs[0].Contents != nil {
		t.Fatalf("typed inputs: %d outputs, %d raw_output_contents, contents %v; want the output raw only",
			len(resp.Outputs), len(resp.RawOutputContents), resp.Outputs[0].GetContents())
	}
	raw := resp.RawOutputContents[0]
	for i, want := range []float32{2, 4, 6, 8} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			t.Fatalf("raw output %v, want y = 2x", raw)
		}
	}
}
