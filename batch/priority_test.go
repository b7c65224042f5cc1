package batch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
)

// level is a request of the collector at a priority level.
func (c *collector) level(it batch.Item, level int, sync bool) *batch.Request {
	r := c.req(it, sync)
	r.Level = level
	return r
}

// TestBatcherPriorityLevels: with priority levels, level 1 runs first, a
// sync request ahead of a queued one of its level, and a level beyond the
// policy's counts as the lowest.
func TestBatcherPriorityLevels(t *testing.T) {
	f := newFake(1)
	pol := policy(1, 0)
	pol.PriorityLevels = 3
	b, _ := startBatcher(t, batch.Config{Policy: pol, Runners: f.runners(), QueueSize: 16})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 1, 3), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	enqueue(t, b,
		c.level(fitem("l3", 1, 8), 3, false), c.level(fitem("l0", 1, 8), 0, false),
		c.level(fitem("l2", 1, 8), 2, false), c.level(fitem("l9", 1, 8), 9, false),
		c.level(fitem("l1", 1, 8), 1, false), c.level(fitem("s2", 1, 8), 2, true))
	f.open()
	c.wait(t, 7)
	c.ok(t, "block", "l3", "l0", "l2", "l9", "l1", "s2")
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"block"}, {"l1"}, {"s2"}, {"l2"}, {"l3"}, {"l0"}, {"l9"}})
}

// TestBatcherPriorityAging: a low-level request that has waited
// (2 x levels - 1) x PriorityAging runs before high-level requests that
// came after it; without aging they pass it.
func TestBatcherPriorityAging(t *testing.T) {
	const aging = 10 * time.Millisecond
	for _, tc := range []struct {
		aging time.Duration
		want  [][]string
	}{
		{aging, [][]string{{"block"}, {"low"}, {"hi0"}, {"hi1"}}},
		{0, [][]string{{"block"}, {"hi0"}, {"hi1"}, {"low"}}},
	} {
		f := newFake(1)
		pol := policy(1, 0)
		pol.PriorityLevels, pol.PriorityAging = 2, tc.aging
		b, stop := startBatcher(t, batch.Config{Policy: pol, Runners: f.runners(), QueueSize: 8})
		c := newCollector()
		enqueue(t, b, c.req(fitem("block", 1, 3), false))
		waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
		enqueue(t, b, c.level(fitem("low", 1, 8), 2, false))
		// The bound: lane 3 (level 2, queued) to lane 0 in 3 agings.
		time.Sleep(3*aging + 5*time.Millisecond)
		enqueue(t, b, c.level(fitem("hi0", 1, 8), 1, true), c.level(fitem("hi1", 1, 8), 1, true))
		f.open()
		c.wait(t, 4)
		sameLists(t, "runs (aging "+tc.aging.String()+")", idLists(f.snapshot()), tc.want)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatcherCause: a request whose context ends with a cause before its
// run gets the cause as its error (the consumer's queue timeout).
func TestBatcherCause(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(2, 0), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 1, 3), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	errWaited := errors.New("waited too long")
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Millisecond, errWaited)
	defer cancel()
	if err := b.Enqueue(ctx, c.req(fitem("t0", 1, 8), false)); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	f.open()
	c.wait(t, 2)
	if err := c.result(t, "t0").Err; !errors.Is(err, errWaited) {
		t.Fatalf("t0: %v, want the context's cause", err)
	}
}

// chanOwner signals every finished request.
type chanOwner chan struct{}

func (chanOwner) RunStarting(*batch.Request) {}
func (o chanOwner) Finished(*batch.Request)  { o <- struct{}{} }

// slowRunner runs every item after a short sleep, so that a flood of
// requests keeps the queue full.
type slowRunner struct{}

func (slowRunner) RunBatch(ctx context.Context, items []batch.Item) []batch.ItemResult {
	time.Sleep(200 * time.Microsecond)
	return make([]batch.ItemResult, len(items))
}

// TestBatcherPriorityNoStarvation: under a flood of level-1 sync requests
// that always has some waiting, a queued level-2 request still runs once
// it has aged (3 x PriorityAging); without aging it waits as long as the
// flood lasts.
func TestBatcherPriorityNoStarvation(t *testing.T) {
	for _, aging := range []time.Duration{2 * time.Millisecond, 0} {
		t.Run("aging "+aging.String(), func(t *testing.T) {
			pol := policy(1, 0)
			pol.PriorityLevels, pol.PriorityAging = 2, aging
			b, _ := startBatcher(t, batch.Config{Policy: pol, Runners: []batch.Runner{slowRunner{}}, QueueSize: 16})
			ctx, stop := context.WithCancel(context.Background())
			var flood sync.WaitGroup
			for i := range 4 {
				flood.Go(func() {
					o := chanOwner(make(chan struct{}, 1))
					for ctx.Err() == nil {
						r := &batch.Request{Item: fitem(fmt.Sprintf("hi%d", i), 1, 8), Priority: true, Level: 1, Owner: o}
						if b.Enqueue(ctx, r) == nil {
							<-o
						}
					}
				})
			}
			defer func() { stop(); flood.Wait() }()
			waitFor(t, "the flood", func() bool { return b.Queued() > 0 })
			c := newCollector()
			low := c.level(fitem("low", 1, 8), 2, false)
			enqueue(t, b, low)
			if aging > 0 {
				c.wait(t, 1)
				return
			}
			time.Sleep(200 * time.Millisecond)
			if c.n.Load() != 0 {
				t.Fatal("the low request ran during the flood without aging: the test's flood is too thin")
			}
		})
	}
}
