package oip_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/tensor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ModelConfig answers Triton's configuration of a model from its inferq
// configuration; dims leave out the batch dim.
func TestGRPCModelConfig(t *testing.T) {
	s := newORTServer(t, ortOpts{model: func(m *models.Model) {
		m.Device = models.Device{Kind: models.DeviceCPU}
		m.Instances = 2
		m.Batching.MaxBatchSize = 8
		m.Batching.MaxQueueDelay = models.Duration(3 * time.Millisecond)
		m.Batching.PreferredBatchSizes = []int{4}
		m.Batching.MaxQueueSize = 64
		m.Batching.DefaultQueueTimeout = models.Duration(250 * time.Millisecond)
		m.Batching.PriorityLevels = 3
	}})
	c, ctx := s.client(t), callCtx(t)
	r, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: examples.MLPName})
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config
	if cfg.Name != examples.MLPName || cfg.Platform != "onnxruntime_onnx" || cfg.MaxBatchSize != 8 {
		t.Errorf("config: %v", cfg)
	}
	if len(cfg.Input) != 1 || cfg.Input[0].Name != "x" || cfg.Input[0].DataType != pb.DataType_TYPE_FP32 ||
		fmt.Sprint(cfg.Input[0].Dims) != fmt.Sprint([]int64{examples.MLPInputs}) {
		t.Errorf("inputs: %v", cfg.Input)
	}
	if len(cfg.Output) != 1 || cfg.Output[0].Name != "probs" || cfg.Output[0].DataType != pb.DataType_TYPE_FP32 || len(cfg.Output[0].Dims) != 1 {
		t.Errorf("outputs: %v", cfg.Output)
	}
	if g := cfg.InstanceGroup; len(g) != 1 || g[0].Kind != pb.ModelInstanceGroup_KIND_CPU || g[0].Count != 2 {
		t.Errorf("instance group: %v", g)
	}
	db := cfg.GetDynamicBatching()
	if db == nil || db.MaxQueueDelayMicroseconds != 3000 || !slices.Equal(db.PreferredBatchSize, []int32{4}) ||
		db.PriorityLevels != 3 || db.DefaultPriorityLevel != 3 {
		t.Fatalf("dynamic batching: %v", db)
	}
	if q := db.DefaultQueuePolicy; q.MaxQueueSize != 64 || q.DefaultTimeoutMicroseconds != 250000 || q.TimeoutAction != pb.ModelQueuePolicy_REJECT {
		t.Errorf("queue policy: %v", q)
	}
	// BYTES is Triton's TYPE_STRING; a batching model's dims drop the first.
	r, err = c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: identityName(tensor.BYTES)})
	if err != nil {
		t.Fatal(err)
	}
	if in := r.Config.Input; len(in) != 1 || in[0].DataType != pb.DataType_TYPE_STRING || fmt.Sprint(in[0].Dims) != fmt.Sprint(identityDims) {
		t.Errorf("BYTES identity inputs: %v", in)
	}
	for _, req := range []*pb.ModelConfigRequest{{Name: "nope"}, {Name: examples.MLPName, Version: "999"}} {
		if _, err := c.ModelConfig(ctx, req); status.Code(err) != codes.NotFound {
			t.Errorf("ModelConfig %v: %v, want NotFound", req, err)
		}
	}
}

// ModelStatistics counts a model's successes, failures, queue waits, runs
// and compute time, whichever path the requests took (gRPC here).
func TestGRPCModelStatistics(t *testing.T) {
	s := newORTServer(t, ortOpts{})
	c, ctx := s.client(t), callCtx(t)
	r := rand.New(rand.NewPCG(5, 5))
	const ok = 3
	for range ok {
		x, err := tensor.Random(tensor.TensorInfo{Name: "x", DType: tensor.FP32, Dims: []int64{2, examples.MLPInputs}}, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ModelInfer(ctx, rawRequest(examples.MLPName, x)); err != nil {
			t.Fatal(err)
		}
	}
	bad := &pb.ModelInferRequest{ModelName: examples.MLPName, Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 3}}},
		RawInputContents: [][]byte{make([]byte, 12)}}
	if _, err := c.ModelInfer(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad request: %v", err)
	}
	resp, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: examples.MLPName})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ModelStats) != 1 {
		t.Fatalf("stats: %v", resp)
	}
	st := resp.ModelStats[0]
	is := st.InferenceStats
	if st.Name != examples.MLPName || st.Version == "" || st.InferenceCount != ok || is.Success.Count != ok || is.Fail.Count != 1 {
		t.Errorf("counts: %v", st)
	}
	if st.ExecutionCount < 1 || st.ExecutionCount > ok || is.Queue.Count != ok || is.ComputeInfer.Count != ok || is.ComputeInfer.Ns == 0 {
		t.Errorf("runs and durations: %v", st)
	}
	all, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all.ModelStats); n != 1+len(examples.DataTypes()) {
		t.Errorf("every model: %d stats", n)
	}
	for _, st := range all.ModelStats {
		if st.Name != examples.MLPName && st.InferenceCount != 0 {
			t.Errorf("model %s never called: %v", st.Name, st)
		}
	}
	if _, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown model: %v", err)
	}
}

// fakeRepo is a ModelRepository that records its calls and fails with
// errs[name].
type fakeRepo struct {
	mu    sync.Mutex
	calls []string
	errs  map[string]error
}

func (f *fakeRepo) Index(ready bool) []oip.RepositoryEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("index %v", ready))
	return []oip.RepositoryEntry{{Name: "a", Version: "2", State: "READY"}, {Name: "b", State: "UNAVAILABLE", Reason: "unloaded"}}
}

func (f *fakeRepo) Load(_ context.Context, name string) error   { return f.do("load", name) }
func (f *fakeRepo) Unload(_ context.Context, name string) error { return f.do("unload", name) }

func (f *fakeRepo) do(verb, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, verb+" "+name)
	return f.errs[name]
}

// The repository RPCs call the ModelRepository and map its errors to
// Triton's codes, behind the bearer token.
func TestGRPCRepositoryRPCs(t *testing.T) {
	repo := &fakeRepo{errs: map[string]error{
		"missing":  fmt.Errorf("%w: no model %q", oip.ErrRepositoryNotFound, "missing"),
		"polled":   fmt.Errorf("%w: poll mode", oip.ErrRepositoryNotExplicit),
		"broken":   errors.New("model.onnx: not an onnx model"),
		"unloaded": nil,
	}}
	s := newORTServer(t, ortOpts{grpc: func(c *oip.GRPCConfig) { c.Repository = repo; c.AuthToken = "s3cret" }})
	c := s.client(t)
	if _, err := c.RepositoryIndex(callCtx(t), &pb.RepositoryIndexRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("index without the token: %v", err)
	}
	if _, err := c.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "unloaded"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("load without the token: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(callCtx(t), "authorization", "Bearer s3cret")
	idx, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: true})
	if err != nil {
		t.Fatal(err)
	}
	if m := idx.Models; len(m) != 2 || m[0].Name != "a" || m[0].Version != "2" || m[0].State != "READY" || m[1].Reason != "unloaded" {
		t.Errorf("index: %v", m)
	}
	for _, tt := range []struct {
		name string
		code codes.Code
	}{{"unloaded", codes.OK}, {"missing", codes.NotFound}, {"polled", codes.Unavailable}, {"broken", codes.InvalidArgument}, {"", codes.InvalidArgument}} {
		_, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: tt.name})
		if status.Code(err) != tt.code || (err != nil && !strings.Contains(err.Error(), "failed to load")) {
			t.Errorf("load %q: %v, want %s", tt.name, err, tt.code)
		}
		_, err = c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: tt.name})
		if status.Code(err) != tt.code || (err != nil && !strings.Contains(err.Error(), "failed to unload")) {
			t.Errorf("unload %q: %v, want %s", tt.name, err, tt.code)
		}
	}
	repo.mu.Lock()
	defer repo.mu.Unlock()
	if want := "index true|load unloaded|unload unloaded|load missing|unload missing|load polled|unload polled|load broken|unload broken"; strings.Join(repo.calls, "|") != want {
		t.Errorf("calls %q, want %q", strings.Join(repo.calls, "|"), want)
	}
}

// Without a model repository the index is the served models, READY, and
// loads and unloads are refused as outside explicit mode.
func TestGRPCRepositoryNone(t *testing.T) {
	s := newORTServer(t, ortOpts{})
	c, ctx := s.client(t), callCtx(t)
	idx, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Models) != 1+len(examples.DataTypes()) || idx.Models[0].Name != examples.MLPName || idx.Models[0].State != "READY" || idx.Models[0].Version == "" {
		t.Errorf("index: %v", idx.Models)
	}
	if _, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: examples.MLPName}); status.Code(err) != codes.Unavailable {
		t.Errorf("load: %v, want Unavailable", err)
	}
	if _, err := c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: examples.MLPName}); status.Code(err) != codes.Unavailable {
		t.Errorf("unload: %v, want Unavailable", err)
	}
}
