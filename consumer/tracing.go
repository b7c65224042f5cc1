package consumer

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
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

// traceContext reads W3C traceparent (and tracestate) values.
var traceContext propagation.TraceContext

// traceparentCarrier carries one traceparent value to the propagator.
type traceparentCarrier string

func (c traceparentCarrier) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}
func (traceparentCarrier) Set(string, string) {}
func (traceparentCarrier) Keys() []string     { return []string{"traceparent"} }

// start starts a root span at at, the child of the remote span that
// traceparent names (a new trace when it is empty or invalid). Callers
// check t.tr first, so that no attribute is built while tracing is off;
// every method of *span is a no-op on nil.
func (t tracing) start(name string, kind trace.SpanKind, traceparent string, at time.Time, attrs ...attribute.KeyValue) *span {
	ctx := context.Background()
	if traceparent != "" {
		ctx = traceContext.Extract(ctx, traceparentCarrier(traceparent))
	}
	ctx, root := t.tr.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	return &span{tr: t.tr, ctx: ctx, root: root}
}

// task starts the SpanReceive of a queued task (nil when off).
func (t tracing) task(queue, msgID string, tk *task.Task, model string, attempt int, at time.Time) *span {
	if t.tr == nil {
		return nil
	}
	return t.start(SpanReceive, trace.SpanKindConsumer, tk.TraceParent, at,
		AttrTaskID.String(tk.ID), AttrModel.String(model), AttrAttempt.Int(attempt),
		attrSystem, attrDestination.String(queue), attrMessageID.String(msgID))
}

// query starts the SpanQuery of a sync query (nil when off).
func (t tracing) query(queue string, req *mq.QueryRequest, tk *task.Task) *span {
	if t.tr == nil {
		return nil
	}
	return t.start(SpanQuery, trace.SpanKindServer, tk.TraceParent, req.Received,
		AttrModel.String(tk.Name), attrSystem, attrDestination.String(queue), attrMessageID.String(req.ID))
}

// http starts the SpanHTTP of an infer request, its parent from the
// request's traceparent header (nil when off).
func (t tracing) http(h http.Header, model string, at time.Time) *span {
	if t.tr == nil {
		return nil
	}
	ctx := traceContext.Extract(context.Background(), propagation.HeaderCarrier(h))
	ctx, root := t.tr.Start(ctx, SpanHTTP, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at),
		trace.WithAttributes(AttrModel.String(model)))
	return &span{tr: t.tr, ctx: ctx, root: root}
}

// span is the trace of one task or request: its root span and the stage
// span open under it. The stages move from goroutine to goroutine (intake,
// the batcher's run, a writer) and a sync request's caller may give up
// while its run still ends, so the methods lock.
type span struct {
	tr    trace.Tracer
	ctx   context.Context // carries root
	mu    sync.Mutex
	root  trace.Span
	stage trace.Span
	ended bool
}

// next ends the open stage span, if any, and opens the stage name.
func (s *span) next(name string) {
	if s == nil {
		return
	}
	s.nextWith(name)
}

// infer opens the SpanInfer stage of a run of batch items.
func (s *span) infer(batch int) {
	if s == nil {
		return
	}
	s.nextWith(SpanInfer, AttrBatchSize.Int(batch))
}

func (s *span) nextWith(name string, attrs ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if s.stage != nil {
		s.stage.End()
	}
	_, s.stage = s.tr.Start(s.ctx, name, trace.WithAttributes(attrs...))
}

// endStage ends the open stage span, marking it failed with err.
func (s *span) endStage(err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stage == nil {
		return
	}
	setError(s.stage, err)
	s.stage.End()
	s.stage = nil
}

// end ends the open stage and the root, recording the outcome and err.
// Later calls do nothing.
func (s *span) end(outcome string, err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	if s.stage != nil {
		setError(s.stage, err)
		s.stage.End()
		s.stage = nil
	}
	if outcome != "" {
		s.root.SetAttributes(AttrOutcome.String(outcome))
	}
	setError(s.root, err)
	s.root.End()
}

func setError(sp trace.Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
}
