package models

import (
	"strings"
	"testing"
	"time"
)

// TestQueuePolicyFields: batching's queue policy fields parse with
// Triton's names; priority_aging has a default; Level and CheckPriority
// map a request's priority.
func TestQueuePolicyFields(t *testing.T) {
	c, err := Parse([]byte(`
models:
  - name: a
    path: a.onnx
    batching: {max_batch_size: 4, max_queue_size: 16, default_queue_timeout: 250ms, priority_levels: 3, default_priority_level: 2}
  - name: b
    path: b.onnx
    batching: {priority_aging: 5s}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	a, b := c.Model("a").Batching, c.Model("b").Batching
	if a.MaxQueueSize != 16 || a.DefaultQueueTimeout.D() != 250*time.Millisecond || a.PriorityLevels != 3 || a.DefaultPriorityLevel != 2 {
		t.Errorf("a: %+v", a)
	}
	if a.Aging() != DefaultPriorityAging.D() || b.Aging() != 5*time.Second {
		t.Errorf("aging %s %s, want the default and 5s", a.Aging(), b.Aging())
	}
	for _, tc := range []struct {
		b          Batching
		p, level   int
		wantErrSub string
	}{
		{a, 0, 2, ""}, {a, 1, 1, ""}, {a, 3, 3, ""},
		{a, 4, 0, "priority 4: want 1 (highest) to 3"},
		{a, -2, 0, "priority -2: want 1 (highest) to 3"},
		{Batching{PriorityLevels: 3}, 0, 3, ""}, // no default: the lowest
		{b, 0, 1, ""},
		{b, 1, 0, "no priority levels (batching.priority_levels 0)"},
	} {
		err := tc.b.CheckPriority("priority", tc.p)
		if tc.wantErrSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
				t.Errorf("priority %d: %v, want %q", tc.p, err, tc.wantErrSub)
			}
			continue
		}
		if err != nil || tc.b.Level(tc.p) != tc.level {
			t.Errorf("priority %d: level %d, %v; want level %d", tc.p, tc.b.Level(tc.p), err, tc.level)
		}
	}
}
