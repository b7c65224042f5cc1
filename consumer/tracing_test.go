package consumer_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/task"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The caller's span: what a producer's traceparent tag names.
const (
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + parentTrace + "-" + parentSpan + "-01"
)

// withTracing gives the harness's consumer a tracer provider that records
// into an in-memory exporter.
func withTracing(exp *tracetest.InMemoryExporter) brokerOpt {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return withConfig(func(c *consumer.Config) { c.TracerProvider = tp })
}

// spansOf waits until the exporter holds n spans of the trace whose root
// span has attribute key = value, and returns them by name.
func spansOf(t *testing.T, exp *tracetest.InMemoryExporter, root string, n int) map[string]tracetest.SpanStub {
	t.Helper()
	var out map[string]tracetest.SpanStub
	waitFor(t, 10*time.Second, "the spans of "+root, func() bool {
		out = map[string]tracetest.SpanStub{}
		var traceID trace.TraceID
		for _, s := range exp.GetSpans() {
			if s.Name == root {
				traceID = s.SpanContext.TraceID()
			}
		}
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == traceID {
				out[s.Name] = s
			}
		}
		return len(out) == n
	})
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// checkTree checks that root is the child of the caller's span and every
// other span a child of root, all in the caller's trace.
func checkTree(t *testing.T, spans map[string]tracetest.SpanStub, root string) {
	t.Helper()
	r := spans[root]
	if got := r.SpanContext.TraceID().String(); got != parentTrace {
		t.Errorf("%s: trace %s, want the caller's %s", root, got, parentTrace)
	}
	if got := r.Parent.SpanID().String(); got != parentSpan || !r.Parent.IsRemote() {
		t.Errorf("%s: parent %s (remote %v), want the caller's span %s", root, got, r.Parent.IsRemote(), parentSpan)
	}
	for name, s := range spans {
		if name == root {
			continue
		}
		if s.Parent.SpanID() != r.SpanContext.SpanID() {
			t.Errorf("%s: parent %s, want %s's %s", name, s.Parent.SpanID(), root, r.SpanContext.SpanID())
		}
		if s.StartTime.Before(r.StartTime) || s.EndTime.After(r.EndTime) {
			t.Errorf("%s [%v, %v] is not within %s [%v, %v]", name, s.StartTime, s.EndTime, root, r.StartTime, r.EndTime)
		}
	}
}

func TestTracingTask(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	r := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r, 8)), withTracing(exp))

	h.send("t1", 1, 1, task.WithTraceParent(traceparent))
	h.record("t1")
	spans := spansOf(t, exp, consumer.SpanReceive, 4)
	checkTree(t, spans, consumer.SpanReceive)
	recv := spans[consumer.SpanReceive]
	if recv.SpanKind != trace.SpanKindConsumer || attr(recv, consumer.AttrTaskID).AsString() != "t1" ||
		attr(recv, consumer.AttrModel).AsString() != testModel {
		t.Errorf("receive span: kind %v, attributes %v", recv.SpanKind, recv.Attributes)
	}
	if n := attr(spans[consumer.SpanInfer], consumer.AttrBatchSize).AsInt64(); n != 1 {
		t.Errorf("infer span: batch size %d, want 1", n)
	}
	// The stages follow one another.
	b, i, s := spans[consumer.SpanBatch], spans[consumer.SpanInfer], spans[consumer.SpanStore]
	if i.StartTime.Before(b.EndTime) || s.StartTime.Before(i.EndTime) {
		t.Errorf("stages overlap: batch [%v %v] infer [%v %v] store [%v %v]", b.StartTime, b.EndTime, i.StartTime, i.EndTime, s.StartTime, s.EndTime)
	}

	t.Run("failure", func(t *testing.T) {
		exp.Reset()
		body := []byte(`{"task_id":"t2","task_name":"m","args":[[1,2]],"kwargs":{"reply_to":"` + h.reply + `"}}`)
		h.sendMsg(mq.OutMessage{Channel: h.q, Body: body, Tags: map[string]string{task.TagTraceParent: traceparent}})
		h.record("t2")
		spans := spansOf(t, exp, consumer.SpanReceive, 2) // receive, store: it never ran
		recv := spans[consumer.SpanReceive]
		if recv.Status.Code != codes.Error || attr(recv, consumer.AttrOutcome).AsString() != consumer.OutcomeBadInput {
			t.Errorf("receive span of a bad input: status %+v, attributes %v", recv.Status, recv.Attributes)
		}
	})
}

func TestTracingQuery(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	r := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r, 8)), withTracing(exp))
	h.waitQueries()
	exp.Reset()
	resp, err := h.query(queryBody(testModel, 1, 1), map[string]string{task.TagTraceParent: traceparent}, 5*time.Second)
	if err != nil || resp.Status != task.StatusSuccess {
		t.Fatalf("query: %+v, %v", resp, err)
	}
	spans := spansOf(t, exp, consumer.SpanQuery, 3)
	checkTree(t, spans, consumer.SpanQuery)
	if q := spans[consumer.SpanQuery]; q.SpanKind != trace.SpanKindServer || attr(q, consumer.AttrOutcome).AsString() != consumer.OutcomeSuccess {
		t.Errorf("query span: kind %v, attributes %v", q.SpanKind, q.Attributes)
	}
}

func TestTracingHTTP(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	r := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r, 8)), withTracing(exp))
	srv := httptest.NewServer(oip.Handler(h.cons, oip.HTTPConfig{Gatherer: h.reg, Metrics: h.met}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("POST", srv.URL+"/v2/models/m/infer", bytes.NewReader([]byte(
		`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)))
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	spans := spansOf(t, exp, consumer.SpanHTTP, 3)
	checkTree(t, spans, consumer.SpanHTTP)
}
