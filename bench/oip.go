package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The http and grpc modes: the Open Inference Protocol's infer requests,
// over HTTP (POST /v2/models/{m}/infer; --payload json or binary, the
// binary tensor extension) and over gRPC (ModelInfer with
// raw_input_contents, as Triton's clients send it), to the in-process
// servers' loopback listeners. Each caller (--producers x --inflight) waits
// for its answer before it sends again.

// oipClients reach the servers' HTTP or gRPC listeners, one per server.
type oipClients struct {
	urls  []string
	http  *http.Client
	grpc  []pb.GRPCInferenceServiceClient
	conns []*grpc.ClientConn
}

func newOIPClients(srv *benchServer, callers int) (*oipClients, error) {
	c := &oipClients{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(callers, 2)}}}
	for _, w := range srv.workers {
		if w.Addr() == nil || w.GRPCAddr() == nil {
			c.close()
			return nil, errors.New("bench: a server without its HTTP or gRPC listener")
		}
		c.urls = append(c.urls, "http://"+w.Addr().String())
		cc, err := grpc.NewClient(w.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(128<<20)))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("bench: grpc client: %w", err)
		}
		c.conns = append(c.conns, cc)
		c.grpc = append(c.grpc, pb.NewGRPCInferenceServiceClient(cc))
	}
	return c, nil
}

func (c *oipClients) close() {
	for _, cc := range c.conns {
		_ = cc.Close()
	}
	c.http.CloseIdleConnections()
}

// starter sends each task as one infer request, over HTTP or gRPC, on
// its own goroutine, and verifies the outputs.
func (c *oipClients) starter(m *benchModel, mode string, binary bool) starter {
	return func(ctx, wctx context.Context, pi, n int, fin func(error)) error {
		for i := range n {
			k := (pi + i) % len(c.urls)
			go func() {
				var outs []tensor.Tensor
				var err error
				if mode == ModeGRPC {
					outs, err = grpcInfer(wctx, c.grpc[k], m.cfg.Name, m.input())
				} else {
					outs, err = c.httpInfer(wctx, c.urls[k], m.cfg.Name, m.input(), binary)
				}
				if err != nil {
					if wctx.Err() != nil {
						err = fmt.Errorf("%w: %s infer: %w", errLost, mode, err)
					}
					fin(err)
					return
				}
				fin(m.check.tensors(outs))
			}()
		}
		return nil
	}
}

func (c *oipClients) httpInfer(ctx context.Context, url, model string, in []tensor.Tensor, binary bool) ([]tensor.Tensor, error) {
	body, n, err := task.NewInferRequest(in, binary, binary)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v2/models/"+model+"/infer", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if binary {
		req.Header.Set(oip.HeaderInferenceLength, strconv.Itoa(n))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("http infer: %s: %.200s", resp.Status, b)
	}
	jl := len(b)
	if h := resp.Header.Get(oip.HeaderInferenceLength); h != "" {
		if jl, err = strconv.Atoi(h); err != nil || jl > len(b) {
			return nil, fmt.Errorf("http infer: %s %q does not fit %d bytes", oip.HeaderInferenceLength, h, len(b))
		}
	}
	r, err := task.DecodeInferResponse(b[:jl], b[jl:])
	if err != nil {
		return nil, err
	}
	return r.Tensors(), nil
}

func grpcInfer(ctx context.Context, c pb.GRPCInferenceServiceClient, model string, in []tensor.Tensor) ([]tensor.Tensor, error) {
	req := &pb.ModelInferRequest{ModelName: model, Inputs: make([]*pb.ModelInferRequest_InferInputTensor, len(in)), RawInputContents: make([][]byte, len(in))}
	for i, t := range in {
		req.Inputs[i] = &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.DType.String(), Shape: t.Shape}
		req.RawInputContents[i] = t.Data
	}
	resp, err := c.ModelInfer(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(resp.RawOutputContents) != len(resp.Outputs) {
		return nil, fmt.Errorf("grpc infer: %d raw outputs for %d outputs", len(resp.RawOutputContents), len(resp.Outputs))
	}
	outs := make([]tensor.Tensor, len(resp.Outputs))
	for i, o := range resp.Outputs {
		dt, err := tensor.ParseDType(o.Datatype)
		if err != nil {
			return nil, fmt.Errorf("grpc infer: output %q: %w", o.Name, err)
		}
		outs[i] = tensor.Tensor{Name: o.Name, DType: dt, Shape: o.Shape, Data: resp.RawOutputContents[i]}
		if err := outs[i].Validate(); err != nil {
			return nil, fmt.Errorf("grpc infer: %w", err)
		}
	}
	return outs, nil
}
