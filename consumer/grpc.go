package consumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/inferq/inferq/admit"
	pb "github.com/inferq/inferq/consumer/inferencepb"
	"github.com/inferq/inferq/models"
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
	Server *Server
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
}

// grpcService serves GRPCInferenceService.
type grpcService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	s     *Server
	ready func() bool
	repo  ModelRepository // nil: none
	token *bearer         // nil: no token asked
	// slots holds a token per ModelInfer in progress.
	slots chan struct{}
}

// NewGRPCServer returns a gRPC server of the Open Inference Protocol over
// c.Server's models. Messages are bounded by the loosest
// limits.max_body_bytes of its models (each model's own is checked at
// admission); opts (TLS credentials) come after its own. Safe for
// concurrent use; the caller serves and stops it.
func NewGRPCServer(c GRPCConfig, opts ...grpc.ServerOption) *grpc.Server {
	n := c.MaxConcurrentInfer
	if n <= 0 {
		n = models.DefaultHTTPMaxConcurrentRequests
	}
	g := &grpcService{s: c.Server, ready: c.Ready, repo: c.Repository, slots: make(chan struct{}, n)}
	if g.ready == nil {
		g.ready = func() bool { return true }
	}
	if c.AuthToken != "" {
		b := newBearer(c.AuthToken)
		g.token = &b
	}
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(maxBody(c.Server.models.Load()))),
		grpc.InTapHandle(g.tap),
	}, opts...)
	srv := grpc.NewServer(opts...)
	pb.RegisterGRPCInferenceServiceServer(srv, g)
	return srv
}

// tap refuses a call before its message is read: one without the bearer
// token, and a ModelInfer while every slot is taken (the slot itself is
// taken in ModelInfer; this check keeps most refused messages unread).
func (g *grpcService) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
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

func (g *grpcService) busy() error {
	return status.Errorf(codes.Unavailable, "%d infer requests are in progress, the limit (grpc.max_concurrent_requests); retry later", cap(g.slots))
}

func (g *grpcService) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.ready()}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "inferq", Version: serverVersion(), Extensions: []string{"binary_tensor_data"}}, nil
}

// model returns the model called name at version ("" for any), or the
// NOT_FOUND status.
func (g *grpcService) model(name, version string) (*Model, error) {
	m, ok := g.s.models.Load().Model(name)
	if !ok {
		return nil, status.Error(codes.NotFound, g.s.models.Load().Unknown(name).Error())
	}
	if version != "" && version != m.Serving() {
		return nil, status.Errorf(codes.NotFound, "model %q has no version %q (it serves version %q)", name, version, m.Serving())
	}
	return m, nil
}

func (g *grpcService) ModelReady(_ context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if _, err := g.model(req.Name, req.Version); err != nil {
		return nil, err
	}
	return &pb.ModelReadyResponse{Ready: g.ready()}, nil
}

func (g *grpcService) ModelMetadata(_ context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := g.model(req.Name, req.Version)
	if err != nil {
		return nil, err
	}
	return &pb.ModelMetadataResponse{Name: m.Config.Name, Versions: []string{m.Serving()}, Platform: "onnxruntime_onnx",
		Inputs: grpcTensorMetas(tensorMetas(m.Info.Inputs)), Outputs: grpcTensorMetas(tensorMetas(m.Info.Outputs))}, nil
}

func grpcTensorMetas(ts []tensorMeta) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
	for i, t := range ts {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
	}
	return out
}

// ModelInfer admits and runs one request, as an HTTP infer request runs.
func (g *grpcService) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	start := time.Now()
	s := g.s
	m, err := g.model(req.ModelName, req.ModelVersion)
	if err != nil {
		s.met.GRPCInfer.WithLabelValues("", OutcomeUnknownModel).Inc()
		return nil, err
	}
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	default:
		return nil, g.busy()
	}
	name := m.Config.Name
	resp, outcome, err := s.grpcInfer(ctx, m, req, start)
	s.met.GRPCInfer.WithLabelValues(name, outcome).Inc()
	s.met.inference(name, outcome)
	s.met.SyncDuration.WithLabelValues(name, "grpc").Observe(time.Since(start).Seconds())
	return resp, err
}

// grpcInfer admits and runs req for m, received at start; the error is a
// gRPC status.
func (s *Server) grpcInfer(ctx context.Context, m *Model, req *pb.ModelInferRequest, start time.Time) (*pb.ModelInferResponse, string, error) {
	size := proto.Size(req)
	r, derr := readGRPCInfer(req, size, admit.Limits(&m.Config))
	if r.task == nil && derr == nil {
		derr = errors.New("internal error: no request read") // readGRPCInfer returns one or the other
	}
	a := s.models.Load().Admit(admit.Input{From: admit.FromHTTP, Decoded: r.task, DecodeErr: derr, Size: int64(size), Tags: s.trace.grpcTags(ctx),
		Model: m.Config.Name, Received: start, Traced: s.trace.tr != nil})
	root := s.trace.httpRoot(m.Config.Name, &a, start)
	outputs, ran, outcome, err := s.runSync(ctx, &a, root)
	var resp *pb.ModelInferResponse
	if err == nil {
		resp = &pb.ModelInferResponse{ModelName: m.Config.Name, ModelVersion: m.version(ran), Id: req.Id}
		if err = grpcOutputs(resp, outputs, r.raw); err != nil {
			outcome, err = OutcomeFailure, fmt.Errorf("model %q: encoding the result: %w", m.Config.Name, err)
		}
	}
	endRoot(root, outcome, err)
	if err != nil {
		return nil, outcome, status.Error(grpcCode(&a, outcome, err), err.Error())
	}
	return resp, outcome, nil
}

// grpcCode is the gRPC code of a failed infer request: the HTTP path's
// status (inferStatus) in gRPC's terms, with the cases gRPC tells apart.
func grpcCode(a *admitted, outcome string, err error) codes.Code {
	switch {
	case a.Verdict == admit.TooLarge:
		return codes.ResourceExhausted
	case outcome == OutcomeExpired && errors.Is(err, context.Canceled):
		return codes.Canceled
	case outcome == OutcomeExpired:
		return codes.DeadlineExceeded
	}
	switch inferStatus(a, outcome, err) {
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// grpcTags are the W3C trace headers of a call's metadata as tags, for
// admission (nil when tracing is off).
func (t tracing) grpcTags(ctx context.Context) map[string]string {
	if t.tr == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return map[string]string{"traceparent": first("traceparent"), "tracestate": first("tracestate")}
}

// maxBody is the loosest limits.max_body_bytes of mt's models.
func maxBody(mt *modelTable) int64 {
	var n int64
	for _, m := range mt.Models() {
		n = max(n, admit.BodyLimit(&m.Config))
	}
	return n
}
