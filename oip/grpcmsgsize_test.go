package oip_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/tensor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// lateModel is a served model of lateModels.
type lateModel struct {
	cfg  models.Model
	info tensor.ModelInfo
}

func (m *lateModel) ModelConfig() *models.Model  { return &m.cfg }
func (m *lateModel) ModelInfo() tensor.ModelInfo { return m.info }
func (m *lateModel) Serving() string             { return "1" }

// lateModels serves models added after the server was made, as a model
// repository loads them; Infer answers with the input as the output.
type lateModels struct {
	mu     sync.Mutex
	models []*lateModel
}

func (s *lateModels) add(m *lateModel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append(s.models, m)
}

func (s *lateModels) Model(name string) (*lateModel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.models {
		if m.cfg.Name == name {
			return m, nil
		}
	}
	return nil, admit.NewTable[*lateModel]("this server").Unknown(name)
}

func (s *lateModels) Models() []*lateModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*lateModel(nil), s.models...)
}

func (s *lateModels) Infer(ctx context.Context, in admit.Input, reply oip.Reply) (admit.Verdict, string, error) {
	m, err := s.Model(in.Model)
	if err != nil {
		return admit.UnknownModel, "unknown_model", err
	}
	t := admit.NewTable[*lateModel]("this server")
	_ = t.Add(m)
	a := t.Admit(in)
	if a.Verdict != admit.Run {
		return a.Verdict, "bad_input", a.Err
	}
	return admit.Run, "success", reply("1", a.Inputs, a.Task)
}

// With a model repository the server starts before its models load: the
// gRPC message bound must not come from the models served when the server
// is made (issue 25 item 10: it refused a 5 MiB message, "received message
// larger than max", that the same model accepted as a static model). Each
// model's own limits.max_body_bytes still applies, at admission.
func TestGRPCMessageSizeWithLateModels(t *testing.T) {
	s := &lateModels{}
	gs := oip.NewGRPCServer[*lateModel](s, oip.GRPCConfig{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := pb.NewGRPCInferenceServiceClient(cc)

	const rows = 5 * 256 // 5 MiB of FP32 rows of 1024
	cfg := models.Config{Models: []models.Model{models.NewModel("m"), models.NewModel("small")}}
	for i := range cfg.Models {
		cfg.Models[i].Path = "unused.onnx"
		cfg.Models[i].Batching.MaxBatchSize = rows
	}
	cfg.SetDefaults()
	cfg.Models[1].Limits.MaxBodyBytes = 1 << 20
	info := tensor.ModelInfo{
		Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 1024}}},
		Outputs: []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 1024}}}}
	for _, m := range cfg.Models {
		s.add(&lateModel{cfg: m, info: info})
	}
	req := func(model string) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "x", Datatype: "FP32", Shape: []int64{rows, 1024}}}, RawInputContents: [][]byte{make([]byte, rows*1024*4)}}
	}
	resp, err := c.ModelInfer(callCtx(t), req("m"))
	if err != nil {
		t.Fatalf("a 5 MiB request to a model loaded after the server started: %v", err)
	}
	if len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != rows*1024*4 {
		t.Errorf("response of %d outputs", len(resp.RawOutputContents))
	}
	// A model's own limit applies at admission, naming the field.
	if _, err := c.ModelInfer(callCtx(t), req("small")); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limits.max_body_bytes") {
		t.Errorf("over the model's own limit: %v, want RESOURCE_EXHAUSTED naming limits.max_body_bytes", err)
	}
}
