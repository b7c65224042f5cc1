package batch_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
)

// TestFlushOnFixedCost: while a run's fixed cost is above MaxQueueDelay
// (a simulated accelerator: 150 ms a run) and the runs hold several rows, a
// flushed group of one row is a fragment: it waits out the delay, and what
// comes meanwhile joins it. On a cheap device, or at light load (runs of
// one row), a flush runs the group at once (as in TestBatcherFlush).
func TestFlushOnFixedCost(t *testing.T) {
	// a1 comes 10 ms after a0, which waits out 120 ms: room for a slow
	// scheduler under make test's parallel packages.
	const delay = 120 * time.Millisecond
	for _, tc := range []struct {
		name     string
		lat      batch.Latency
		warmRows int // rows of each warm-up run
		delay    time.Duration
		want     [][]string
	}{
		{"accelerator under load", batch.Latency{Base: 150 * time.Millisecond}, 8, delay, [][]string{{"a0", "a1"}}},
		{"accelerator at light load", batch.Latency{Base: 150 * time.Millisecond}, 1, time.Hour, [][]string{{"a0"}, {"a1"}}},
		{"cheap device under load", batch.Latency{}, 8, time.Hour, [][]string{{"a0"}, {"a1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(1)
			runners := f.runners()
			for i := range runners {
				runners[i] = batch.Simulate(runners[i], tc.lat)
			}
			b, _ := startBatcher(t, batch.Config{Policy: policy(8, tc.delay), Runners: runners})
			c := newCollector()
			// Flushed runs of warmRows rows each: the estimate's window.
			for i := range 8 {
				for k := range tc.warmRows {
					enqueue(t, b, c.req(fitem(fmt.Sprintf("w%d.%d", i, k), 1, 8), false))
				}
				b.Flush()
				c.wait(t, (i+1)*tc.warmRows)
			}
			// The estimate is taken when the gatherer gets the run's
			// batch back, a moment after its results went out.
			if tc.lat.Base > 0 {
				waitFor(t, "the fixed cost of the runs", func() bool { return b.FixedCost() >= tc.lat.Base })
			} else if fixed := b.FixedCost(); fixed >= delay {
				t.Fatalf("FixedCost %v on a cheap device", fixed)
			}
			warm, before := 8*tc.warmRows, len(f.snapshot())

			a0 := c.req(fitem("a0", 1, 8), false)
			enqueue(t, b, a0)
			b.Flush()
			if tc.delay == time.Hour {
				// The flush runs a0 at once (its delay is an hour).
				c.wait(t, warm+1)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
			enqueue(t, b, c.req(fitem("a1", 1, 8), false))
			b.Flush()
			c.wait(t, warm+2)
			c.ok(t, "a0", "a1")
			sameLists(t, "runs after the warm-up", idLists(f.snapshot())[before:], tc.want)
			if tc.delay != time.Hour {
				if took := c.time("a0").Sub(a0.Enqueued); took < delay {
					t.Errorf("a0 finished %v after its enqueue, before its delay of %v", took, delay)
				}
			}
		})
	}
}
