package oip

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/models"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
)

// The Open Inference Protocol over gRPC (KServe v2's
// inference.GRPCInferenceService, Triton's gRPC API): ServerLive,
// ServerReady, ModelReady, ServerMetadata, ModelMetadata and ModelInfer,
// and of Triton's own RPCs ModelConfig, ModelStatistics (triton.go) and the
// model repository extension (grpcrepo.go); the rest of Triton's answer
// UNIMPLEMENTED.
// ModelInfer takes the path of an HTTP infer request (admission with the
// model's limits, the model's batcher ahead of queued tasks); see
// grpcconv.go for the tensor forms. Errors are gRPC status codes, mapped
// from the HTTP path's statuses the way Triton maps its errors:
// INVALID_ARGUMENT for a bad request, NOT_FOUND for an unknown model or
// version, RESOURCE_EXHAUSTED for a message over limits.max_body_bytes,
// DEADLINE_EXCEEDED when the request's deadline (the call's, or the timeout
// parameter, or the model's timeout) passed before it ran, UNAVAILABLE when
// the model's batcher is closed or GRPCConfig.MaxConcurrentInfer requests
// are in progress, UNAUTHENTICATED without the bearer token, INTERNAL for
// an inference failure.

// GRPCConfig configures the gRPC endpoint.
type GRPCConfig struct {
	// Metrics counts the ModelInfer calls (inferq_grpc_infer_total and the
	// rest, see Observer); nil: not counted.
	Metrics Observer
	// Gatherer holds the metrics ModelStatistics reads (those Metrics
	// counts into, and the batchers' and the queue loop's: /metrics'
	// registry); nil: every statistic is 0.
	Gatherer prometheus.Gatherer
	// Ready reports readiness beyond the broker (models warm); nil: true.
	Ready func() bool
	// AuthToken, when set, is the bearer token every call but ServerLive
	// and ServerReady must carry in its metadata (authorization: Bearer
	// <token>, as Triton's and KServe's clients send it).
	AuthToken string
	// MaxConcurrentInfer bounds the ModelInfer calls in progress; one
	// more is answered UNAVAILABLE at once. 0:
	// models.DefaultHTTPMaxConcurrentRequests.
	MaxConcurrentInfer int
	// Repository, optional, answers Triton's repository RPCs (see
	// grpcrepo.go); nil: the served models are the index and loads and
	// unloads are refused.
	Repository ModelRepository
	// Logger receives the panics of handlers, recovered (ERROR); nil
	// discards them.
	Logger *slog.Logger
}

// maxMessageBytes bounds a gRPC message whatever models are served:
// task.DefaultMaxBodyBytes, above the most limits.max_body_bytes may be
// configured to (the broker's message limit less its slack), so that no
// model loaded after the server was made finds its requests refused by
// gRPC before admission reads its own limit.
const maxMessageBytes int64 = task.DefaultMaxBodyBytes

// grpcService serves GRPCInferenceService.
type grpcService[M Model] struct {
	pb.UnimplementedGRPCInferenceServiceServer
	s      Inference[M]
	obs    Observer
	gather prometheus.Gatherer // nil: none
	ready  func() bool
	repo   ModelRepository // nil: none
	token  *bearer         // nil: no token asked
	// slots holds a token per ModelInfer in progress.
	slots chan struct{}
}

// NewGRPCServer returns a gRPC server of the Open Inference Protocol over
// s's models. Messages are bounded by maxMessageBytes, the most any
// model's limits.max_body_bytes may be (each model's own is checked at
// admission, RESOURCE_EXHAUSTED naming the field), not by the models
// served when it is made: with a model repository there may be none yet,
// and models loaded later would meet a bound of 0 (issue 25 item 10).
// opts (TLS credentials) come after its own. Safe for concurrent use; the
// caller serves and stops it.
func NewGRPCServer[M Model](s Inference[M], c GRPCConfig, opts ...grpc.ServerOption) *grpc.Server {
	n := c.MaxConcurrentInfer
	if n <= 0 {
		n = models.DefaultHTTPMaxConcurrentRequests
	}
	g := &grpcService[M]{s: s, obs: c.Metrics, gather: c.Gatherer, ready: c.Ready, repo: c.Repository, slots: make(chan struct{}, n)}
	if g.ready == nil {
		g.ready = func() bool { return true }
	}
	if g.obs == nil {
		g.obs = noObserver{}
	}
	maxBody := maxMessageBytes
	for _, m := range s.Models() {
		maxBody = max(maxBody, admit.BodyLimit(m.ModelConfig()))
	}
	if c.AuthToken != "" {
		b := newBearer(c.AuthToken)
		g.token = &b
	}
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(maxBody)),
		grpc.InTapHandle(g.tap),
		grpc.ChainUnaryInterceptor(recoverUnary(logger(c.Logger))),
		grpc.ChainStreamInterceptor(recoverStream(logger(c.Logger))),
	}, opts...)
	srv := grpc.NewServer(opts...)
	pb.RegisterGRPCInferenceServiceServer(srv, g)
	return srv
}

// tap refuses a call before its message is read: one without the bearer
// token, and a ModelInfer while every slot is taken (the slot itself is
// taken in ModelInfer; this check keeps most refused messages unread).
func (g *grpcService[M]) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	health := info.FullMethodName == pb.GRPCInferenceService_ServerLive_FullMethodName ||
		info.FullMethodName == pb.GRPCInferenceService_ServerReady_FullMethodName
	if g.token != nil && !health {
		var auth string
		if v := info.Header.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
		if err := g.token.check(auth); err != nil {
			return ctx, status.Error(codes.Unauthenticated, err.Error())
		}
	}
	if info.FullMethodName == pb.GRPCInferenceService_ModelInfer_FullMethodName && len(g.slots) >= cap(g.slots) {
		return ctx, g.busy()
	}
	return ctx, nil
}

func (g *grpcService[M]) busy() error {
	return status.Errorf(codes.Unavailable, "%d infer requests are in progress, the limit (grpc.max_concurrent_requests); retry later", cap(g.slots))
}

func (g *grpcService[M]) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService[M]) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.ready()}, nil
}

func (g *grpcService[M]) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "inferq", Version: serverVersion(), Extensions: []string{"binary_tensor_data"}}, nil
}

// model returns the model called name at version ("" for any), or the
// NOT_FOUND status.
func (g *grpcService[M]) model(name, version string) (M, error) {
	m, err := g.s.Model(name)
	if err != nil {
		return m, status.Error(codes.NotFound, err.Error())
	}
	if version != "" && version != m.Serving() {
		return m, status.Errorf(codes.NotFound, "model %q has no version %q (it serves version %q)", name, version, m.Serving())
	}
	return m, nil
}

func (g *grpcService[M]) ModelReady(_ context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if _, err := g.model(req.Name, req.Version); err != nil {
		return nil, err
	}
	return &pb.ModelReadyResponse{Ready: g.ready()}, nil
}

func (g *grpcService[M]) ModelMetadata(_ context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := g.model(req.Name, req.Version)
	if err != nil {
		return nil, err
	}
	info := m.ModelInfo()
	return &pb.ModelMetadataResponse{Name: m.ModelConfig().Name, Versions: []string{m.Serving()}, Platform: "onnxruntime_onnx",
		Inputs: grpcTensorMetas(tensorMetas(info.Inputs)), Outputs: grpcTensorMetas(tensorMetas(info.Outputs))}, nil
}

func grpcTensorMetas(ts []tensorMeta) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
	for i, t := range ts {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
	}
	return out
}

// ModelInfer admits and runs one request, as an HTTP infer request runs.
func (g *grpcService[M]) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	start := time.Now()
	m, err := g.model(req.ModelName, req.ModelVersion)
	if err != nil {
		g.obs.ObserveInfer("grpc", "", outcomeUnknownModel, time.Since(start))
		return nil, err
	}
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	default:
		return nil, g.busy()
	}
	c := m.ModelConfig()
	resp, outcome, err := g.infer(ctx, c, req, start)
	g.obs.ObserveInfer("grpc", c.Name, outcome, time.Since(start))
	return resp, err
}

// infer admits and runs req for the model configured c, received at
// start; the error is a gRPC status.
func (g *grpcService[M]) infer(ctx context.Context, c *models.Model, req *pb.ModelInferRequest, start time.Time) (*pb.ModelInferResponse, string, error) {
	size := proto.Size(req)
	r, derr := readGRPCInfer(req, size, admit.Limits(c))
	if r.task == nil && derr == nil {
		derr = errors.New("internal error: no request read") // readGRPCInfer returns one or the other
	}
	in := admit.Input{From: admit.FromHTTP, Decoded: r.task, DecodeErr: derr, Size: int64(size), Trace: incoming{ctx},
		Model: c.Name, Received: start}
	var resp *pb.ModelInferResponse
	v, outcome, err := g.s.Infer(ctx, in, func(version string, outputs []tensor.Tensor, _ *task.Task) error {
		resp = &pb.ModelInferResponse{ModelName: c.Name, ModelVersion: version, Id: req.Id}
		grpcOutputs(resp, outputs)
		return nil
	})
	if err != nil {
		return nil, outcome, status.Error(grpcCode(v, outcome, err), err.Error())
	}
	return resp, outcome, nil
}

// grpcCode is the gRPC code of a failed infer request: the HTTP path's
// status (inferStatus) in gRPC's terms, with the cases gRPC tells apart.
func grpcCode(v admit.Verdict, outcome string, err error) codes.Code {
	switch {
	case v == admit.TooLarge:
		return codes.ResourceExhausted
	case outcome == outcomeExpired && errors.Is(err, context.Canceled):
		return codes.Canceled
	case outcome == outcomeExpired:
		return codes.DeadlineExceeded
	}
	switch inferStatus(v, outcome, err) {
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// incoming is a call's metadata as the carrier of its trace context
// (traceparent, tracestate), read only when admission asks (tracing on).
type incoming struct{ ctx context.Context }

func (c incoming) Get(key string) string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incoming) Set(string, string) {}
func (incoming) Keys() []string     { return nil }
