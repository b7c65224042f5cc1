package oip_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/tensor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rowsJSON is an HTTP infer body with n rows of the fake model's x.
func rowsJSON(n int) []byte {
	data := strings.TrimSuffix(strings.Repeat("0,1,0,0,", n), ",")
	return fmt.Appendf(nil, `{"inputs":[{"name":"x","shape":[%d,4],"datatype":"FP32","data":[%s]}]}`, n, data)
}

// A request of more rows than batching.max_batch_size is refused over HTTP
// (400) and gRPC (INVALID_ARGUMENT), naming the field, before it reaches
// the batcher, and ModelConfig advertises that number (issue 25 item 8:
// 65 rows on a model of 64 ran as one run of 65).
func TestOIPMaxBatchSize(t *testing.T) {
	f := consumertest.NewFakeBatcher()
	bs := bareServer(t, bareOpts{batcher: f, model: func(m *models.Model) { m.Batching.MaxBatchSize = 4 }})
	h := oip.Handler(bs.srv, oip.HTTPConfig{Gatherer: bs.reg, Metrics: bs.met})
	c := serveGRPC(t, bs.srv, oip.GRPCConfig{Metrics: bs.met, Gatherer: bs.reg})()
	for _, rows := range []int{4, 5} {
		rec := serveHTTP(h, "POST", "/v2/models/m/infer", rowsJSON(rows), nil)
		x := make([]float32, 4*rows)
		_, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "x", Datatype: "FP32", Shape: []int64{int64(rows), 4}, Contents: &pb.InferTensorContents{Fp32Contents: x}}}})
		if rows <= 4 {
			if rec.Code != 200 || err != nil {
				t.Fatalf("%d rows: HTTP %d %s, gRPC %v; want them run", rows, rec.Code, rec.Body, err)
			}
			continue
		}
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "batching.max_batch_size 4") {
			t.Errorf("%d rows over HTTP: %d %s, want 400 naming batching.max_batch_size", rows, rec.Code, rec.Body)
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "batching.max_batch_size 4") {
			t.Errorf("%d rows over gRPC: %v, want INVALID_ARGUMENT naming batching.max_batch_size", rows, err)
		}
	}
	if n := f.Total.Load(); n != 2 {
		t.Errorf("the batcher ran %d requests, want the 2 of 4 rows", n)
	}
	r, err := c.ModelConfig(callCtx(t), &pb.ModelConfigRequest{Name: "m"})
	if err != nil || r.Config.MaxBatchSize != 4 || fmt.Sprint(r.Config.Input[0].Dims) != "[4]" {
		t.Errorf("ModelConfig %v %v, want max_batch_size 4 and dims [4]", r, err)
	}
}

// A model with an input whose dim 0 is fixed has no batch dim: ModelConfig
// says max_batch_size 0 with the whole dims, as Triton's config of such a
// model does, and a request of its fixed rows runs whatever
// batching.max_batch_size says.
func TestOIPNoBatchDim(t *testing.T) {
	info := tensor.ModelInfo{
		Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{8, 4}}},
		Outputs: []tensor.TensorInfo{{Name: "y", DType: tensor.FP32, Dims: []int64{8, 4}}},
	}
	bs := bareServer(t, bareOpts{info: &info, model: func(m *models.Model) { m.Batching.MaxBatchSize = 4 }})
	c := serveGRPC(t, bs.srv, oip.GRPCConfig{Metrics: bs.met, Gatherer: bs.reg})()
	r, err := c.ModelConfig(callCtx(t), &pb.ModelConfigRequest{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.MaxBatchSize != 0 || fmt.Sprint(r.Config.Input[0].Dims) != "[8 4]" || fmt.Sprint(r.Config.Output[0].Dims) != "[8 4]" {
		t.Errorf("ModelConfig %v, want max_batch_size 0 and the whole dims", r.Config)
	}
	h := oip.Handler(bs.srv, oip.HTTPConfig{Gatherer: bs.reg, Metrics: bs.met})
	if rec := serveHTTP(h, "POST", "/v2/models/m/infer", rowsJSON(8), nil); rec.Code != 200 {
		t.Errorf("8 rows on a model of dims [8,4]: %d %s", rec.Code, rec.Body)
	}
}
