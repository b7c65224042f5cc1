package oip_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// identityDims are the per-item dims of the identity models: a request of
// batch 2 is [2,3].
var identityDims = []int64{3}

// identityName is the identity example model of dt.
func identityName(dt tensor.DType) string { return "identity-" + strings.ToLower(dt.String()) }

// ortServer is a consumer serving the real example models (onnxruntime on
// the CPU, INFERQ_ORT_LIB or ../lib): mlp, and an identity model for every
// datatype, over HTTP and gRPC. It never runs (its broker address is
// dead): the Open Inference Protocol needs only its models and batchers.
type ortServer struct {
	url  string
	grpc pb.GRPCInferenceServiceClient
	// conn dials the gRPC server with more options.
	dial func(opts ...grpc.DialOption) pb.GRPCInferenceServiceClient
}

// ortOpts adjust newORTServer's models and gRPC config.
type ortOpts struct {
	model func(*models.Model)
	grpc  func(*oip.GRPCConfig)
}

func newORTServer(t *testing.T, o ortOpts) *ortServer {
	t.Helper()
	lib, err := runtime.LocateLibrary(runtime.LibrarySearch{Env: os.Getenv("INFERQ_ORT_LIB"), WorkDir: ".."})
	if err != nil {
		t.Skipf("onnxruntime library not available: %v", err)
	}
	env, err := runtime.NewEnv(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	onnx := map[string][]byte{examples.MLPName: examples.MLP()}
	names := []string{examples.MLPName}
	for _, dt := range examples.DataTypes() {
		d, _ := tensor.DTypeFromONNX(int32(dt))
		n := identityName(d)
		onnx[n] = examples.Identity(n, dt, identityDims)
		names = append(names, n)
	}
	reg := prometheus.NewRegistry()
	met, err := consumer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var ms []consumer.Model
	for _, name := range names {
		sess, err := runtime.NewSession(env, runtime.SessionConfig{Name: name, Model: onnx[name], IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		bat, err := batch.New(batch.Config{Name: name, Policy: batch.Policy{MaxBatchSize: 8},
			Runners: []batch.Runner{sess}, Observer: met.BatchObserver(name)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = bat.Run(ctx) })
		m := models.NewModel(name)
		m.Path = "unused.onnx"
		if o.model != nil {
			o.model(&m)
		}
		ms = append(ms, consumer.Model{Config: m, Info: sess.Info(), Batcher: bat})
	}
	cfg := models.Config{}
	for _, m := range ms {
		cfg.Models = append(cfg.Models, m.Config)
	}
	cfg.SetDefaults()
	for i := range ms {
		ms[i].Config = cfg.Models[i]
	}
	cons := consumertest.Offline(t, consumer.Config{Metrics: met, Models: ms})
	hs := httptest.NewServer(oip.Handler(cons, oip.HTTPConfig{Gatherer: reg, Metrics: met}))
	t.Cleanup(hs.Close)
	gc := oip.GRPCConfig{Metrics: met, Gatherer: reg}
	if o.grpc != nil {
		o.grpc(&gc)
	}
	return &ortServer{url: hs.URL, dial: serveGRPC(t, cons, gc)}
}

// serveGRPC serves s with c on a loopback port and returns a dialer of
// clients.
func serveGRPC(t *testing.T, s *consumer.Server, c oip.GRPCConfig) func(opts ...grpc.DialOption) pb.GRPCInferenceServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := oip.NewGRPCServer(s, c)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return func(opts ...grpc.DialOption) pb.GRPCInferenceServiceClient {
		opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20))}, opts...)
		cc, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return pb.NewGRPCInferenceServiceClient(cc)
	}
}

func (s *ortServer) client(t *testing.T) pb.GRPCInferenceServiceClient {
	if s.grpc == nil {
		s.grpc = s.dial()
	}
	return s.grpc
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// randomTensor is a random tensor "in" of dt, shape [rows,3], without NaN
// (NaN != NaN would fail the comparisons, not the servers).
func randomTensor(t *testing.T, dt tensor.DType, rows int64, r *rand.Rand) tensor.Tensor {
	t.Helper()
	if dt == tensor.BYTES {
		elems := make([][]byte, rows*identityDims[0])
		for i := range elems {
			elems[i] = fmt.Appendf(nil, "s%d-%x", i, r.Uint32()>>(r.UintN(32)))
		}
		elems[0] = nil // an empty element
		return tensor.NewBytesTensor("in", append([]int64{rows}, identityDims...), elems)
	}
	tn, err := tensor.Random(tensor.TensorInfo{Name: "in", DType: dt, Dims: append([]int64{rows}, identityDims...)}, r)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// typedInput is tn as a request input with typed contents.
func typedInput(t *testing.T, tn tensor.Tensor) *pb.ModelInferRequest_InferInputTensor {
	t.Helper()
	c, err := oip.TypedContents(tn)
	if err != nil {
		t.Fatal(err)
	}
	return &pb.ModelInferRequest_InferInputTensor{Name: tn.Name, Datatype: tn.DType.String(), Shape: tn.Shape, Contents: c}
}

func rawRequest(model string, tn tensor.Tensor) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: tn.Name, Datatype: tn.DType.String(), Shape: tn.Shape}}, RawInputContents: [][]byte{tn.Data}}
}

// grpcOutput is the response's only output as a tensor.
func grpcOutput(t *testing.T, resp *pb.ModelInferResponse, wantRaw bool) tensor.Tensor {
	t.Helper()
	if len(resp.Outputs) != 1 {
		t.Fatalf("%d outputs, want 1", len(resp.Outputs))
	}
	o := resp.Outputs[0]
	dt, err := tensor.ParseDType(o.Datatype)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.RawOutputContents) > 0; got != wantRaw {
		t.Fatalf("raw_output_contents present %v, want %v", got, wantRaw)
	}
	tn := tensor.Tensor{Name: o.Name, DType: dt, Shape: o.Shape}
	if wantRaw {
		if o.Contents != nil {
			t.Fatal("raw output with contents too")
		}
		tn.Data = resp.RawOutputContents[0]
	} else {
		in := &pb.ModelInferRequest_InferInputTensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Contents: o.Contents}
		if tn.Data, err = oip.TypedData(in); err != nil {
			t.Fatal(err)
		}
	}
	if err := tn.Validate(); err != nil {
		t.Fatal(err)
	}
	return tn
}

// httpInfer sends tn to model over HTTP in the binary form and returns the
// output, asking for it binary or as JSON.
func httpInfer(t *testing.T, url, model string, tn tensor.Tensor, binaryOut bool) tensor.Tensor {
	t.Helper()
	header, err := json.Marshal(map[string]any{
		"inputs":     []any{map[string]any{"name": tn.Name, "shape": tn.Shape, "datatype": tn.DType.String(), "parameters": map[string]any{"binary_data_size": len(tn.Data)}}},
		"parameters": map[string]any{"binary_data_output": binaryOut},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, "POST", url+"/v2/models/"+model+"/infer", append(header, tn.Data...), map[string]string{oip.HeaderInferenceLength: strconv.Itoa(len(header))})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP infer %s: %d %s", model, resp.StatusCode, body)
	}
	n := len(body)
	if h := resp.Header.Get(oip.HeaderInferenceLength); h != "" {
		if n, err = strconv.Atoi(h); err != nil {
			t.Fatal(err)
		}
	}
	r, err := task.DecodeInferResponse(body[:n], body[n:])
	if err != nil {
		t.Fatalf("HTTP infer %s: %v\n%s", model, err, body)
	}
	if len(r.Outputs) != 1 {
		t.Fatalf("HTTP infer %s: %d outputs", model, len(r.Outputs))
	}
	return r.Outputs[0].Tensor
}

func sameTensor(t *testing.T, what string, got, want tensor.Tensor) {
	t.Helper()
	if got.DType != want.DType || tensor.FormatShape(got.Shape) != tensor.FormatShape(want.Shape) || !bytes.Equal(got.Data, want.Data) {
		t.Errorf("%s: got %s %x, want %s %x", what, got, clipBytes(got.Data), want, clipBytes(want.Data))
	}
}

func clipBytes(b []byte) []byte { return b[:min(len(b), 64)] }

// Every datatype through the identity models, batch 2: raw and typed
// inputs (FP16, which has no typed field, raw only) come back raw, as
// Triton returns every output, each equal to what went in, and equal to
// what HTTP infer returns for the same input, binary and JSON (the
// acceptance test of issue 13; JSON refuses FP16 outputs, as Triton does).
func TestGRPCInferEveryDatatype(t *testing.T) {
	s := newORTServer(t, ortOpts{})
	c := s.client(t)
	r := rand.New(rand.NewPCG(13, 1))
	for _, edt := range examples.DataTypes() {
		dt, _ := tensor.DTypeFromONNX(int32(edt))
		t.Run(dt.String(), func(t *testing.T) {
			model := identityName(dt)
			in := randomTensor(t, dt, 2, r)
			want := in
			want.Name = "out"

			resp, err := c.ModelInfer(callCtx(t), rawRequest(model, in))
			if err != nil {
				t.Fatalf("raw: %v", err)
			}
			if resp.ModelName != model || resp.ModelVersion == "" {
				t.Errorf("raw: model %q version %q", resp.ModelName, resp.ModelVersion)
			}
			raw := grpcOutput(t, resp, true)
			sameTensor(t, "raw", raw, want)

			if dt == tensor.FP16 {
				req := rawRequest(model, in)
				req.RawInputContents = nil
				req.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4, 5, 6}}
				_, err := c.ModelInfer(callCtx(t), req)
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "raw_input_contents") {
					t.Errorf("typed FP16: %v, want InvalidArgument naming raw_input_contents", err)
				}
			} else {
				req := &pb.ModelInferRequest{ModelName: model, Id: "typed-1", Inputs: []*pb.ModelInferRequest_InferInputTensor{typedInput(t, in)}}
				resp, err := c.ModelInfer(callCtx(t), req)
				if err != nil {
					t.Fatalf("typed: %v", err)
				}
				if resp.Id != "typed-1" {
					t.Errorf("typed: id %q, want the request's", resp.Id)
				}
				sameTensor(t, "typed in, raw out", grpcOutput(t, resp, true), want)
				// binary_data_output, the HTTP extension's, changes nothing.
				req.Parameters = map[string]*pb.InferParameter{"binary_data_output": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}
				resp, err = c.ModelInfer(callCtx(t), req)
				if err != nil {
					t.Fatalf("typed, binary_data_output: %v", err)
				}
				sameTensor(t, "typed in, binary_data_output", grpcOutput(t, resp, true), want)
			}

			sameTensor(t, "HTTP binary output vs gRPC", httpInfer(t, s.url, model, in, true), raw)
			if dt == tensor.FP16 {
				// As Triton: "sending FP16 data via JSON is not supported".
				header := fmt.Sprintf(`{"inputs":[{"name":"in","shape":%s,"datatype":"FP16","parameters":{"binary_data_size":%d}}]}`, tensor.FormatShape(in.Shape), len(in.Data))
				resp, body := do(t, "POST", s.url+"/v2/models/"+model+"/infer", append([]byte(header), in.Data...), map[string]string{oip.HeaderInferenceLength: strconv.Itoa(len(header))})
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "FP16") {
					t.Errorf("HTTP JSON output of FP16: %d %s, want 400", resp.StatusCode, body)
				}
				return
			}
			sameTensor(t, "HTTP JSON output vs gRPC", httpInfer(t, s.url, model, in, false), raw)
		})
	}
}

// mlp with a batch of 4 rows in one request: four rows of probabilities,
// the same over gRPC and HTTP.
func TestGRPCInferBatch(t *testing.T) {
	s := newORTServer(t, ortOpts{})
	r := rand.New(rand.NewPCG(13, 2))
	x, err := tensor.Random(tensor.TensorInfo{Name: "x", DType: tensor.FP32, Dims: []int64{4, examples.MLPInputs}}, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.client(t).ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: examples.MLPName,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{typedInput(t, x)}})
	if err != nil {
		t.Fatal(err)
	}
	got := grpcOutput(t, resp, true)
	if tensor.FormatShape(got.Shape) != "[4,4]" || got.Name != "probs" {
		t.Fatalf("mlp output %s, want probs [4,4]", got)
	}
	sameTensor(t, "HTTP vs gRPC", httpInfer(t, s.url, examples.MLPName, x, true), got)
}

func TestGRPCMetadataAndHealth(t *testing.T) {
	s := newORTServer(t, ortOpts{})
	c, ctx := s.client(t), callCtx(t)
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("ServerLive: %v %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ServerReady: %v %v", r, err)
	}
	if r, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{}); err != nil || r.Name != "inferq" || r.Version == "" {
		t.Errorf("ServerMetadata: %v %v", r, err)
	}
	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: examples.MLPName})
	if err != nil {
		t.Fatal(err)
	}
	if md.Platform != "onnxruntime_onnx" || len(md.Versions) != 1 || len(md.Inputs) != 1 || md.Inputs[0].Name != "x" ||
		md.Inputs[0].Datatype != "FP32" || fmt.Sprint(md.Inputs[0].Shape) != "[-1 16]" || md.Outputs[0].Name != "probs" {
		t.Errorf("ModelMetadata: %v", md)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: examples.MLPName, Version: md.Versions[0]}); err != nil || !r.Ready {
		t.Errorf("ModelReady: %v %v", r, err)
	}
	for _, call := range []struct {
		name string
		err  error
	}{
		{"ModelReady unknown", func() error { _, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nope"}); return err }()},
		{"ModelMetadata unknown", func() error { _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"}); return err }()},
		{"ModelMetadata version", func() error {
			_, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: examples.MLPName, Version: "999"})
			return err
		}()},
	} {
		if status.Code(call.err) != codes.NotFound {
			t.Errorf("%s: %v, want NotFound", call.name, call.err)
		}
	}
}

// Bad requests get Triton's codes, with messages that say what is wrong.
func TestGRPCInferErrors(t *testing.T) {
	s := newORTServer(t, ortOpts{model: func(m *models.Model) {
		m.Limits.MaxBodyBytes = 1 << 20 // the server's message limit
		if m.Name == identityName(tensor.INT32) {
			m.Limits.MaxBodyBytes = 4096 // a model limit under the server's
		}
	}})
	c := s.client(t)
	fp32 := identityName(tensor.FP32)
	in := func(dt string, shape ...int64) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: "in", Datatype: dt, Shape: shape}
	}
	six := []float32{1, 2, 3, 4, 5, 6}
	for _, tt := range []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		want string
	}{
		{"unknown model", &pb.ModelInferRequest{ModelName: "nope"}, codes.NotFound, `unknown model "nope"`},
		{"unknown version", &pb.ModelInferRequest{ModelName: fp32, ModelVersion: "7"}, codes.NotFound, `no version "7"`},
		{"no inputs", &pb.ModelInferRequest{ModelName: fp32}, codes.InvalidArgument, `"in": missing`},
		{"unknown input", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "zz", Datatype: "FP32", Shape: []int64{2, 3}, Contents: &pb.InferTensorContents{Fp32Contents: six}}}}, codes.InvalidArgument, "not an input of the model"},
		{"datatype unknown", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP8", 2, 3)}, RawInputContents: [][]byte{make([]byte, 6)}}, codes.InvalidArgument, "datatype"},
		{"datatype not the model's", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP64", 2, 3)}, RawInputContents: [][]byte{make([]byte, 48)}}, codes.InvalidArgument, "expected FP32"},
		{"shape", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 2, 4)}, RawInputContents: [][]byte{make([]byte, 32)}}, codes.InvalidArgument, "expected FP32 [-1,3]"},
		{"raw size", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 2, 3)}, RawInputContents: [][]byte{make([]byte, 20)}}, codes.InvalidArgument, "raw data is 20 bytes"},
		{"raw count", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 2, 3)}, RawInputContents: [][]byte{make([]byte, 24), nil}}, codes.InvalidArgument, "raw_input_contents holds 2 tensors for 1 inputs"},
		{"raw and typed", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "in", Datatype: "FP32", Shape: []int64{2, 3}, Contents: &pb.InferTensorContents{Fp32Contents: six}}}, RawInputContents: [][]byte{make([]byte, 24)}}, codes.InvalidArgument, "both contents and raw_input_contents"},
		{"no contents", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 2, 3)}}, codes.InvalidArgument, "no data"},
		{"wrong contents field", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "in", Datatype: "FP32", Shape: []int64{2, 3}, Contents: &pb.InferTensorContents{IntContents: []int32{1, 2, 3, 4, 5, 6}}}}}, codes.InvalidArgument, "contents.fp32_contents"},
		{"typed count", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "in", Datatype: "FP32", Shape: []int64{2, 3}, Contents: &pb.InferTensorContents{Fp32Contents: six[:5]}}}}, codes.InvalidArgument, "needs 24"},
		{"INT8 out of range", &pb.ModelInferRequest{ModelName: identityName(tensor.INT8), Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "in", Datatype: "INT8", Shape: []int64{1, 3}, Contents: &pb.InferTensorContents{IntContents: []int32{1, 200, 3}}}}}, codes.InvalidArgument, "out of range for INT8"},
		{"UINT16 out of range", &pb.ModelInferRequest{ModelName: identityName(tensor.UINT16), Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "in", Datatype: "UINT16", Shape: []int64{1, 3}, Contents: &pb.InferTensorContents{UintContents: []uint32{1, 70000, 3}}}}}, codes.InvalidArgument, "out of range for UINT16"},
		{"BYTES malformed raw", &pb.ModelInferRequest{ModelName: identityName(tensor.BYTES), Inputs: []*pb.ModelInferRequest_InferInputTensor{in("BYTES", 1, 3)},
			RawInputContents: [][]byte{{9, 0, 0, 0, 'a'}}}, codes.InvalidArgument, "BYTES data"},
		{"bad parameter type", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 2, 3)}, RawInputContents: [][]byte{make([]byte, 24)},
			Parameters: map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "1s"}}}}, codes.InvalidArgument, "parameters.timeout"},
		{"bad id", &pb.ModelInferRequest{ModelName: fp32, Id: "a;b", Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 2, 3)}, RawInputContents: [][]byte{make([]byte, 24)}}, codes.InvalidArgument, "id"},
		{"over the model's body limit", &pb.ModelInferRequest{ModelName: identityName(tensor.INT32), Inputs: []*pb.ModelInferRequest_InferInputTensor{in("INT32", 2000, 3)},
			RawInputContents: [][]byte{make([]byte, 24000)}}, codes.ResourceExhausted, "limits.max_body_bytes"},
		// Over every model's limit but under the server's message bound
		// (the most any model may allow, whatever is served when it
		// starts): admission answers, naming the field.
		{"over every body limit", &pb.ModelInferRequest{ModelName: fp32, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("FP32", 100<<10, 3)},
			RawInputContents: [][]byte{make([]byte, 1200<<10)}}, codes.ResourceExhausted, "limits.max_body_bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ModelInfer(callCtx(t), tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %s containing %q", err, tt.code, tt.want)
			}
		})
	}
}

// With a token, every call but ServerLive and ServerReady needs
// "authorization: Bearer <token>" in its metadata.
func TestGRPCToken(t *testing.T) {
	s := newORTServer(t, ortOpts{grpc: func(c *oip.GRPCConfig) { c.AuthToken = "s3cret" }})
	c := s.client(t)
	x := randomTensor(t, tensor.FP32, 1, rand.New(rand.NewPCG(1, 1)))
	req := rawRequest(identityName(tensor.FP32), x)
	with := func(auth string) context.Context {
		ctx := callCtx(t)
		if auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		return ctx
	}
	for _, auth := range []string{"", "Bearer nope", "s3cret", "Basic s3cret"} {
		if _, err := c.ModelInfer(with(auth), req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelInfer with authorization %q: %v, want Unauthenticated", auth, err)
		}
		if _, err := c.ModelMetadata(with(auth), &pb.ModelMetadataRequest{Name: examples.MLPName}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelMetadata with authorization %q: %v, want Unauthenticated", auth, err)
		}
	}
	if _, err := c.ModelInfer(with("Bearer s3cret"), req); err != nil {
		t.Errorf("ModelInfer with the token: %v", err)
	}
	if _, err := c.ModelInfer(with("bearer s3cret"), req); err != nil {
		t.Errorf("ModelInfer with the token, scheme in lower case: %v", err)
	}
	if r, err := c.ServerLive(with(""), &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("ServerLive without the token: %v %v", r, err)
	}
	if r, err := c.ServerReady(with(""), &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ServerReady without the token: %v %v", r, err)
	}
}

// ModelInfer calls beyond GRPCConfig.MaxConcurrentInfer are answered
// UNAVAILABLE at once, not queued; the slots come back when calls end, and
// other calls are not capped.
func TestGRPCConcurrencyCap(t *testing.T) {
	b := &blockingBatcher{f: consumertest.NewFakeBatcher(), entered: make(chan struct{}, 8), release: make(chan struct{})}
	bs := bareServer(t, bareOpts{batcher: b})
	c := serveGRPC(t, bs.srv, oip.GRPCConfig{Metrics: bs.met, Gatherer: bs.reg, MaxConcurrentInfer: 2})()
	req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{0, 1, 0, 0}}}}}
	held := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.ModelInfer(callCtx(t), req)
			held <- err
		}()
	}
	for range 2 {
		select {
		case <-b.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first two calls did not reach the batcher")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.ModelInfer(ctx, req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "max_concurrent_requests") {
		t.Errorf("a third call: %v, want Unavailable naming max_concurrent_requests", err)
	}
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "m"}); err != nil {
		t.Errorf("metadata while infer is full: %v", err)
	}
	close(b.release)
	for range 2 {
		if err := <-held; err != nil {
			t.Errorf("a held call: %v", err)
		}
	}
	if _, err := c.ModelInfer(ctx, req); err != nil {
		t.Errorf("after the held calls ended: %v", err)
	}
}

// A model whose batcher is closed answers UNAVAILABLE, as HTTP answers 503.
func TestGRPCBatcherClosed(t *testing.T) {
	bs := bareServer(t, bareOpts{batcher: closedBatcher{}})
	c := serveGRPC(t, bs.srv, oip.GRPCConfig{Metrics: bs.met, Gatherer: bs.reg})()
	req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{0, 1, 0, 0}}}}}
	if _, err := c.ModelInfer(callCtx(t), req); status.Code(err) != codes.Unavailable {
		t.Errorf("closed batcher: %v, want Unavailable", err)
	}
}

type closedBatcher struct{}

func (closedBatcher) Enqueue(context.Context, *batch.Request) error { return batch.ErrClosed }
