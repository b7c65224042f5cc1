package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/inferq/inferq/task"
	"go.opentelemetry.io/otel/trace/noop"
)

// With tracing off (no provider, or a no-op one) a task's spans cost no
// allocation.
func TestTracingOffAllocatesNothing(t *testing.T) {
	for _, tr := range []tracing{newTracing(nil), newTracing(noop.NewTracerProvider())} {
		a := &admitted{Task: &task.Task{ID: "t1", Name: "m", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		err := errors.New("x")
		now := time.Now()
		if n := testing.AllocsPerRun(100, func() {
			root := tr.taskRoot("q", "m1", a, 1, now)
			st := tr.stage(root, nil, SpanBatch)
			st = tr.inferStage(root, st, 8)
			endSpan(st, nil)
			st = tr.stage(root, nil, SpanStore)
			endSpan(st, nil)
			endRoot(root, OutcomeSuccess, err)
		}); n != 0 {
			t.Errorf("%v allocations per task with tracing off", n)
		}
	}
}
