package consumer

import (
	"context"
	"time"

	"github.com/inferq/inferq/mq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span names. A queued task is traced as a root span SpanReceive (kind
// consumer) from its delivery to its settlement, with the children
// SpanBatch (enqueued to its run's start), SpanInfer (the run, with the
// batch size) and SpanStore (storing the record and settling the message).
// A sync request is a root SpanQuery (KubeMQ query) or SpanHTTP (Open
// Inference Protocol) of kind server with the children SpanBatch and
// SpanInfer. The root's parent is the W3C traceparent the caller sent: the
// task's or query's traceparent tag, or the HTTP traceparent header.
const (
	SpanReceive = "inferq.receive"
	SpanQuery   = "inferq.query"
	SpanHTTP    = "inferq.http"
	SpanBatch   = "inferq.batch"
	SpanInfer   = "inferq.infer"
	SpanStore   = "inferq.store"
)

// Span attribute keys of inferq's own.
const (
	AttrTaskID    = attribute.Key("inferq.task_id")
	AttrModel     = attribute.Key("inferq.model")
	AttrAttempt   = attribute.Key("inferq.attempt")
	AttrBatchSize = attribute.Key("inferq.batch_size")
	AttrOutcome   = attribute.Key("inferq.outcome")
)

// tracing starts the spans of tasks and sync requests. Its zero value is
// off: no span, no allocation, no traceparent parsing, so that a server
// without a tracer provider (or with a no-op one) pays one nil check per
// stage.
type tracing struct {
	tr trace.Tracer
}

// tracerName is the instrumentation scope of inferq's spans.
const tracerName = "github.com/inferq/inferq/consumer"

func newTracing(tp trace.TracerProvider) tracing {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return tracing{}
	}
	return tracing{tr: tp.Tracer(tracerName)}
}

// root starts a root span of name at at, the child of remote (the
// caller's span, from its traceparent; a new trace when invalid), and
// returns the context that carries it. Callers check t.tr first, so that
// no attribute is built while tracing is off; the other helpers take the
// nil context of tracing off and do nothing.
func (t tracing) root(name string, kind trace.SpanKind, remote trace.SpanContext, at time.Time, attrs ...attribute.KeyValue) context.Context {
	ctx := context.Background()
	if remote.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, remote)
	}
	ctx, _ = t.tr.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	return ctx
}

// taskRoot starts the SpanReceive of a queued task (nil when off).
func (t tracing) taskRoot(queue, msgID string, a *admitted, attempt int, at time.Time) context.Context {
	if t.tr == nil {
		return nil
	}
	return t.root(SpanReceive, trace.SpanKindConsumer, a.Remote, at,
		AttrTaskID.String(a.Task.ID), AttrModel.String(a.Task.Name), AttrAttempt.Int(attempt),
		attrSystem, attrDestination.String(queue), attrMessageID.String(msgID))
}

// queryRoot starts the SpanQuery of a sync query (nil when off).
func (t tracing) queryRoot(queue string, req *mq.QueryRequest, a *admitted) context.Context {
	if t.tr == nil {
		return nil
	}
	return t.root(SpanQuery, trace.SpanKindServer, a.Remote, req.Received,
		AttrModel.String(a.Task.Name), attrSystem, attrDestination.String(queue), attrMessageID.String(req.ID))
}

// httpRoot starts the SpanHTTP of an infer request (nil when off).
func (t tracing) httpRoot(model string, a *admitted, at time.Time) context.Context {
	if t.tr == nil {
		return nil
	}
	return t.root(SpanHTTP, trace.SpanKindServer, a.Remote, at, AttrModel.String(model))
}

// stage ends the stage span open in cur, if any, and opens the stage name
// under root, returning the context that carries it (nil when off). A
// trace's stages move from goroutine to goroutine (intake, the batcher's
// run, a writer), always handed over through a channel or the batcher, so
// one goroutine at a time owns them.
func (t tracing) stage(root, cur context.Context, name string, attrs ...attribute.KeyValue) context.Context {
	if root == nil {
		return nil
	}
	endSpan(cur, nil)
	ctx, _ := t.tr.Start(root, name, trace.WithAttributes(attrs...))
	return ctx
}

// inferStage opens the SpanInfer stage of a run of batch items (nil when
// off; the attribute is built only when on).
func (t tracing) inferStage(root, cur context.Context, batch int) context.Context {
	if root == nil {
		return nil
	}
	return t.stage(root, cur, SpanInfer, AttrBatchSize.Int(batch))
}

// endSpan ends the span ctx carries, marking it failed with err; nil ends
// nothing.
func endSpan(ctx context.Context, err error) {
	if ctx == nil {
		return
	}
	sp := trace.SpanFromContext(ctx)
	setError(sp, err)
	sp.End()
}

// endRoot ends a root span with the outcome and err.
func endRoot(root context.Context, outcome string, err error) {
	if root == nil {
		return
	}
	sp := trace.SpanFromContext(root)
	if outcome != "" {
		sp.SetAttributes(AttrOutcome.String(outcome))
	}
	setError(sp, err)
	sp.End()
}

func setError(sp trace.Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
}
