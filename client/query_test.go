package client_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/trace"
)

// queryResponder answers the queries of channel the way inferq does: y =
// 2x for a single FP32 input x; FAILURE when x[0] < 0. It records the
// traceparent tags it sees.
type queryResponder struct {
	mu          sync.Mutex
	traceparent []string
}

func startResponder(t *testing.T, addr, channel string) *queryResponder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := mq.Dial(ctx, mq.Config{Address: addr, ClientID: "responder"})
	if err != nil {
		t.Fatal(err)
	}
	r := &queryResponder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = conn.SubscribeQueries(ctx, channel, "inferq", r.answer)
	}()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return r
}

func (r *queryResponder) answer(ctx context.Context, req *mq.QueryRequest) mq.QueryResponse {
	r.mu.Lock()
	r.traceparent = append(r.traceparent, req.Tags[task.TagTraceParent])
	r.mu.Unlock()
	resp := r.run(req)
	body, tags := resp.Encode()
	return mq.QueryResponse{Body: body, Tags: tags}
}

func (r *queryResponder) run(req *mq.QueryRequest) task.QueryResponse {
	fail := func(err error) task.QueryResponse {
		return task.QueryResponse{Status: task.StatusFailure, Error: err.Error()}
	}
	info := tensor.ModelInfo{Inputs: []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 16}}}}
	t, err := task.ParseQuery(req.Body, req.Tags, task.Limits{})
	if err != nil {
		return fail(err)
	}
	in, err := t.Inputs(info, task.Limits{})
	if err != nil {
		return fail(err)
	}
	x, _ := tensor.Values[float32](in[0])
	if x[0] < 0 {
		return fail(errors.New(`model "mlp": inference failed: negative`))
	}
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = 2 * v
	}
	result, bin, err := task.NewInferResponse(t.Name, "1", []tensor.Tensor{tensor.NewTensor("y", in[0].Shape, y)}, t).Encode()
	if err != nil {
		return fail(err)
	}
	return task.QueryResponse{Status: task.StatusSuccess, Result: result, Binary: bin}
}

func (r *queryResponder) traceparents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.traceparent)
}

// queryWhenLive retries a query until the responder's subscription is live
// (a query with no subscriber waits for its whole timeout).
func queryWhenLive(t *testing.T, c *client.Client, ctx context.Context, in []tensor.Tensor, opts ...client.Option) (*task.InferResponse, error) {
	t.Helper()
	for {
		resp, err := c.Query(ctx, "mlp", in, 200*time.Millisecond, opts...)
		if !errors.Is(err, mq.ErrTimeout) || ctx.Err() != nil {
			return resp, err
		}
	}
}

func TestQuery(t *testing.T) {
	srv := fastBroker(t)
	r := startResponder(t, srv.Addr, "inferq.mlp")
	c := newClient(t, srv.Addr, "query")
	ctx := ctxT(t, 20*time.Second)

	for _, binary := range []bool{false, true} {
		var opts []client.Option
		if binary {
			opts = append(opts, client.WithBinaryInputs(), client.WithTaskOptions(task.WithBinaryOutputs("y")))
		}
		resp, err := queryWhenLive(t, c, ctx, mlpInput(1), opts...)
		if err != nil {
			t.Fatalf("binary %v: %v", binary, err)
		}
		y, err := tensor.Values[float32](resp.Outputs[0].Tensor)
		if err != nil || len(y) != 16 || y[0] != 2 || y[15] != 32 || resp.Outputs[0].Binary != binary {
			t.Fatalf("binary %v: y = %v (binary %v), %v", binary, y, resp.Outputs[0].Binary, err)
		}
	}

	t.Run("failure", func(t *testing.T) {
		_, err := c.Query(ctx, "mlp", mlpInput(-1), 5*time.Second)
		var qe *client.QueryError
		if !errors.As(err, &qe) || !errors.Is(err, client.ErrQueryFailed) || qe.Model != "mlp" || qe.Message != `model "mlp": inference failed: negative` {
			t.Fatalf("err %v, want a *QueryError", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		_, err := c.Query(ctx, "nobody", mlpInput(1), 100*time.Millisecond)
		if !errors.Is(err, mq.ErrTimeout) {
			t.Fatalf("err %v, want mq.ErrTimeout", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("a 100 ms query took %v", d)
		}
	})
	t.Run("traceparent", func(t *testing.T) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0x00, 0xf0, 2}, TraceFlags: trace.FlagsSampled,
		})
		tctx := trace.ContextWithSpanContext(ctx, sc)
		want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
		if got := client.TraceParent(tctx); got != want {
			t.Fatalf("TraceParent %q, want %q", got, want)
		}
		if got := client.TraceParent(ctx); got != "" {
			t.Fatalf("TraceParent without a span: %q", got)
		}
		if _, err := c.Query(tctx, "mlp", mlpInput(1), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if tps := r.traceparents(); tps[len(tps)-1] != want {
			t.Errorf("the query carried traceparent %q, want %q", tps[len(tps)-1], want)
		}
		// Enqueue carries it too.
		id, err := c.Enqueue(tctx, "traced", mlpInput(1))
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := c.Conn().Peek(ctx, c.QueueOf("traced"), 1, time.Second)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("peek: %v, %d messages", err, len(msgs))
		}
		if got := msgs[0].Tags[task.TagTraceParent]; got != want || msgs[0].Tags[task.TagTaskID] != id {
			t.Errorf("task tags %v, want traceparent %q", msgs[0].Tags, want)
		}
		c.Forget(id)
	})
}
