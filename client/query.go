package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// DefaultQueryTimeout is Query's timeout when it is given none.
const DefaultQueryTimeout = 30 * time.Second

// ErrQueryFailed is wrapped by the *QueryError of a query that inferq
// answered with FAILURE.
var ErrQueryFailed = errors.New("client: query failed")

// QueryError is inferq's FAILURE answer to a query: the model is unknown,
// the input does not fit it, or inference failed. Message is inferq's.
type QueryError struct {
	Model   string
	Message string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("client: query for %s failed: %s", e.Model, e.Message)
}

// Unwrap returns ErrQueryFailed.
func (e *QueryError) Unwrap() error { return ErrQueryFailed }

// Query runs model on inputs synchronously: a KubeMQ query on the model's
// queue channel (QueueOf, or WithQueue), answered by one of the servers of
// that queue, which runs it ahead of queued tasks. It waits up to timeout
// (DefaultQueryTimeout when 0; also bounded by ctx): a server does not run a
// query whose timeout has passed. Nothing is stored and nothing is
// retried; the query is not seen by Wait or Status.
//
// It returns the outputs, a *QueryError (wrapping ErrQueryFailed) when
// inferq answered FAILURE, an error wrapping mq.ErrTimeout when no server
// answered in time, or mq.ErrUnavailable while the broker is away. The
// options are Enqueue's (WithQueue, WithBinaryInputs, WithTaskOptions);
// WithID, WithRetries and WithCompat do not apply. The trace context of
// ctx travels in the traceparent tag unless task.WithTraceParent sets one.
// Safe for concurrent use; it needs no reply subscription (Ready).
func (c *Client) Query(ctx context.Context, model string, inputs []tensor.Tensor, timeout time.Duration, opts ...Option) (*task.InferResponse, error) {
	if timeout <= 0 {
		timeout = DefaultQueryTimeout
	}
	o := c.options(opts)
	o.traceFrom(ctx)
	topts := o.taskOpts
	if o.binary {
		topts = append(topts, task.WithBinaryInputs())
	}
	body, tags, err := task.NewQuery(model, inputs, topts...)
	if err != nil {
		return nil, fmt.Errorf("client: query for %s: %w", model, err)
	}
	queue := o.queue
	if queue == "" {
		queue = c.QueueOf(model)
	}
	res, err := c.conn.Query(ctx, queue, body, tags, timeout)
	if err != nil {
		if errors.Is(err, mq.ErrTimeout) {
			return nil, fmt.Errorf("client: query for %s on %s: no answer within %v (is 'inferq serve' serving it?): %w", model, queue, timeout, err)
		}
		return nil, fmt.Errorf("client: query for %s on %s: %w", model, queue, err)
	}
	if res.Error != "" && len(res.Body) == 0 {
		return nil, fmt.Errorf("client: query for %s on %s: %s", model, queue, res.Error)
	}
	resp, err := task.ParseQueryResponse(res.Body)
	if err != nil {
		return nil, fmt.Errorf("client: query for %s: %w", model, err)
	}
	if resp.Status != task.StatusSuccess {
		return nil, &QueryError{Model: model, Message: resp.Error}
	}
	out, err := resp.Response()
	if err != nil {
		return nil, fmt.Errorf("client: query for %s: result: %w", model, err)
	}
	return out, nil
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// ctx carries none: what Enqueue and Query put in a task's traceparent tag
// so that inferq's spans join the caller's trace.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// traceFrom puts the trace context of ctx in the tasks' traceparent tag;
// a task.WithTraceParent among the options, applied later, wins.
func (o *enqueueOptions) traceFrom(ctx context.Context) {
	if tp := TraceParent(ctx); tp != "" {
		o.taskOpts = append([]task.Option{task.WithTraceParent(tp)}, o.taskOpts...)
	}
}
