package oip

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pb "github.com/inferq/inferq/oip/inferencepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Triton's model repository extension over gRPC: RepositoryIndex,
// RepositoryModelLoad and RepositoryModelUnload, the RPCs of the HTTP
// routes POST /v2/repository/index and .../models/{m}/load and /unload,
// behind the same bearer token as the other RPCs. With a ModelRepository
// they are its index, load and unload; without one (models: only) the
// index lists the served models READY and load and unload answer
// UNAVAILABLE, as outside explicit mode.

// ModelRepository is a model repository as the gRPC server drives it
// (repository.Control adapts *repository.Repository). Safe for concurrent
// use.
type ModelRepository interface {
	// Index lists the repository's models and versions with their state;
	// with readyOnly, only the READY ones.
	Index(readyOnly bool) []RepositoryEntry
	// Load loads or reloads the model called name. Its error wraps
	// ErrRepositoryNotFound for a model the repository lacks and
	// ErrRepositoryNotExplicit outside explicit mode; any other error is
	// a failed load.
	Load(ctx context.Context, name string) error
	// Unload stops serving the model called name; errors as Load's.
	Unload(ctx context.Context, name string) error
}

// RepositoryEntry is a model version in a ModelRepository's index.
type RepositoryEntry struct {
	Name, Version, State, Reason string
}

// The errors a ModelRepository's Load and Unload wrap for the cases with
// their own gRPC code.
var (
	// ErrRepositoryNotFound: the repository has no such model (NOT_FOUND).
	ErrRepositoryNotFound = errors.New("model not in the repository")
	// ErrRepositoryNotExplicit: loads and unloads need explicit mode
	// (UNAVAILABLE, Triton's code for it).
	ErrRepositoryNotExplicit = errors.New("explicit model control is not enabled")
)

func (g *grpcService[M]) RepositoryIndex(_ context.Context, req *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	var idx []RepositoryEntry
	if g.repo != nil {
		idx = g.repo.Index(req.Ready)
	} else {
		for _, m := range g.s.Models() {
			idx = append(idx, RepositoryEntry{Name: m.ModelConfig().Name, Version: m.Serving(), State: "READY"})
		}
	}
	resp := &pb.RepositoryIndexResponse{Models: make([]*pb.RepositoryIndexResponse_ModelIndex, len(idx))}
	for i, e := range idx {
		resp.Models[i] = &pb.RepositoryIndexResponse_ModelIndex{Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason}
	}
	return resp, nil
}

func (g *grpcService[M]) RepositoryModelLoad(ctx context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	if err := g.control(ctx, "load", req.ModelName, g.repoLoad); err != nil {
		return nil, err
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

func (g *grpcService[M]) RepositoryModelUnload(ctx context.Context, req *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if err := g.control(ctx, "unload", req.ModelName, g.repoUnload); err != nil {
		return nil, err
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}

func (g *grpcService[M]) repoLoad(ctx context.Context, name string) error {
	if g.repo == nil {
		return errNoRepository("load")
	}
	return g.repo.Load(ctx, name)
}

func (g *grpcService[M]) repoUnload(ctx context.Context, name string) error {
	if g.repo == nil {
		return errNoRepository("unload")
	}
	return g.repo.Unload(ctx, name)
}

func errNoRepository(verb string) error {
	return fmt.Errorf("%w: model %s needs a model_repository in model_control_mode explicit (this server has models: only)", ErrRepositoryNotExplicit, verb)
}

// control runs a load or unload of the model called name; the error is a
// gRPC status: NOT_FOUND, UNAVAILABLE outside explicit mode, else
// INVALID_ARGUMENT for a failed load (the HTTP route's 400).
func (g *grpcService[M]) control(ctx context.Context, verb, name string, do func(context.Context, string) error) error {
	if name == "" {
		return status.Errorf(codes.InvalidArgument, "failed to %s: no model_name", verb)
	}
	err := do(ctx, name)
	if err == nil {
		return nil
	}
	code := codes.InvalidArgument
	switch {
	case errors.Is(err, ErrRepositoryNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrRepositoryNotExplicit):
		code = codes.Unavailable
	case ctx.Err() != nil:
		code = status.FromContextError(ctx.Err()).Code()
	}
	return status.Errorf(code, "failed to %s %q: %v", verb, name, err)
}

// ModelConfig is Triton's configuration of a model, from its inferq
// configuration: platform onnxruntime_onnx, max_batch_size, the inputs and
// outputs (dims without the batch dim), the instance group and the
// dynamic batching with its queue policy and priority levels.
func (g *grpcService[M]) ModelConfig(_ context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	m, err := g.model(req.Name, req.Version)
	if err != nil {
		return nil, err
	}
	return &pb.ModelConfigResponse{Config: tritonConfig(m.ModelConfig(), m.ModelInfo())}, nil
}

// ModelStatistics are Triton's per-model statistics, read from the
// metrics (GRPCConfig.Gatherer; see tritonStats). An empty name asks for
// every model.
func (g *grpcService[M]) ModelStatistics(_ context.Context, req *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	var ms []M
	if req.Name != "" {
		m, err := g.model(req.Name, req.Version)
		if err != nil {
			return nil, err
		}
		ms = []M{m}
	} else {
		ms = slices.Clone(g.s.Models())
	}
	resp := &pb.ModelStatisticsResponse{}
	for _, m := range ms {
		resp.ModelStats = append(resp.ModelStats, tritonStats(g.gather, m.ModelConfig().Name, m.Serving()))
	}
	return resp, nil
}
