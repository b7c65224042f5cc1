package batch_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
)

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// selectingIn reports whether a goroutine is blocked in a select inside
// the function named fn.
func selectingIn(fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:goruntime.Stack(buf, true)]), "\n\n") {
		if header, _, _ := strings.Cut(g, "\n"); strings.Contains(header, "[select") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// noLeak fails t at cleanup if goroutines started during the test are
// still there (tests here do not run in parallel).
func noLeak(t *testing.T) {
	base := goruntime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for goruntime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines left behind:\n%s", goruntime.NumGoroutine()-base, buf[:goruntime.Stack(buf, true)])
				return
			}
			goruntime.Gosched()
		}
	})
}

// fitem is a fake runner's item: one FP32 input "x" [rows, dim], its id in
// Outputs (the fake echoes it as the output's name).
func fitem(id string, rows int, dim int64) batch.Item {
	return batch.Item{
		Inputs:  []tensor.Tensor{{Name: "x", DType: tensor.FP32, Shape: []int64{int64(rows), dim}}},
		Outputs: []string{id},
	}
}

type fakeRun struct {
	runner int
	ids    []string
	rows   int
	shapes []string
}

// fakeRuns records the runs of a set of fake runners. A run holding an
// item whose id starts with "block" waits until release is closed; an
// item whose id starts with "fail" fails.
type fakeRuns struct {
	mu        sync.Mutex
	runs      []fakeRun
	inflight  []int
	maxPer    []int
	total     int
	maxTotal  int
	release   chan struct{}
	short     bool // return one result too few
	spin      int  // yields per run, to make runs overlap
	releaseMu sync.Once
}

func newFake(n int) *fakeRuns {
	return &fakeRuns{inflight: make([]int, n), maxPer: make([]int, n), release: make(chan struct{})}
}

func (f *fakeRuns) runners() []batch.Runner {
	r := make([]batch.Runner, len(f.inflight))
	for i := range r {
		r[i] = fakeRunner{i: i, f: f}
	}
	return r
}

func (f *fakeRuns) open() { f.releaseMu.Do(func() { close(f.release) }) }

func (f *fakeRuns) snapshot() []fakeRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.runs)
}

func (f *fakeRuns) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

// idLists returns each run's ids, for comparing with a want.
func idLists(runs []fakeRun) [][]string {
	l := make([][]string, len(runs))
	for i, r := range runs {
		l[i] = r.ids
	}
	return l
}

type fakeRunner struct {
	i int
	f *fakeRuns
}

func (r fakeRunner) RunBatch(ctx context.Context, items []batch.Item) []batch.ItemResult {
	f := r.f
	run := fakeRun{runner: r.i}
	block := false
	for _, it := range items {
		id := it.Outputs[0]
		run.ids = append(run.ids, id)
		run.rows += int(it.Inputs[0].Rows())
		run.shapes = append(run.shapes, it.Inputs[0].DType.String()+tensor.FormatShape(it.Inputs[0].Shape[1:]))
		block = block || strings.HasPrefix(id, "block")
	}
	f.mu.Lock()
	f.runs = append(f.runs, run)
	f.inflight[r.i]++
	f.total++
	f.maxPer[r.i] = max(f.maxPer[r.i], f.inflight[r.i])
	f.maxTotal = max(f.maxTotal, f.total)
	short := f.short
	f.mu.Unlock()
	if block {
		<-f.release
	}
	for range f.spin {
		goruntime.Gosched()
	}
	f.mu.Lock()
	f.inflight[r.i]--
	f.total--
	f.mu.Unlock()
	res := make([]batch.ItemResult, len(items))
	for i, it := range items {
		id := it.Outputs[0]
		if strings.HasPrefix(id, "fail") {
			res[i].Err = errors.New("fake: " + id)
			continue
		}
		res[i].Outputs = []tensor.Tensor{{Name: id}}
	}
	if short {
		res = res[1:]
	}
	return res
}

// collector is the Owner of test requests: it records what Finished
// receives, per request id (the item's first output name), and the batch
// size each run started with.
type collector struct {
	mu      sync.Mutex
	results map[string][]batch.ItemResult
	at      map[string]time.Time
	started map[string]int
	n       atomic.Int64
}

func (c *collector) RunStarting(r *batch.Request) {
	c.mu.Lock()
	c.started[r.Item.Outputs[0]] = r.BatchItems
	c.mu.Unlock()
}

func (c *collector) Finished(r *batch.Request) {
	id := r.Item.Outputs[0]
	c.mu.Lock()
	c.results[id] = append(c.results[id], r.Result)
	c.at[id] = time.Now()
	c.mu.Unlock()
	c.n.Add(1)
}

func newCollector() *collector {
	return &collector{results: make(map[string][]batch.ItemResult), at: make(map[string]time.Time), started: make(map[string]int)}
}

func (c *collector) req(it batch.Item, prio bool) *batch.Request {
	return &batch.Request{Item: it, Priority: prio, Owner: c}
}

func (c *collector) wait(t testing.TB, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d results", n), func() bool { return c.n.Load() >= int64(n) })
}

func (c *collector) time(id string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[id]
}

// result returns id's one result, failing t if Done was not called exactly
// once.
func (c *collector) result(t testing.TB, id string) batch.ItemResult {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.results[id]); n != 1 {
		t.Fatalf("%s: Finished called %d times", id, n)
	}
	return c.results[id][0]
}

// ok fails t unless id succeeded with its own output.
func (c *collector) ok(t testing.TB, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r := c.result(t, id)
		if r.Err != nil || len(r.Outputs) != 1 || r.Outputs[0].Name != id {
			t.Fatalf("%s: got %+v, want its own output", id, r)
		}
	}
}

// startBatcher runs a batcher for cfg until the test ends; stop stops it
// and returns Run's error.
func startBatcher(t *testing.T, cfg batch.Config) (b *batch.Batcher, stop func() error) {
	t.Helper()
	noLeak(t)
	b, err := batch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return b, stop
}

func enqueue(t testing.TB, b *batch.Batcher, reqs ...*batch.Request) {
	t.Helper()
	for _, r := range reqs {
		if err := b.Enqueue(context.Background(), r); err != nil {
			t.Fatalf("Enqueue %s: %v", r.Item.Outputs[0], err)
		}
	}
}

func policy(maxBatch int, delay time.Duration, preferred ...int) batch.Policy {
	return batch.Policy{MaxBatchSize: maxBatch, MaxQueueDelay: delay, PreferredBatchSizes: preferred}
}

func sameLists(t testing.TB, what string, got, want [][]string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func TestBatcherConfigValidate(t *testing.T) {
	f := newFake(1)
	tests := []struct {
		name string
		cfg  batch.Config
		want string // "" for valid
	}{
		{"ok", batch.Config{Policy: policy(8, time.Millisecond, 2, 4), Runners: f.runners()}, ""},
		{"zero delay", batch.Config{Policy: policy(1, 0), Runners: f.runners()}, ""},
		{"preferred unsorted", batch.Config{Policy: policy(8, 0, 8, 2), Runners: f.runners()}, ""},
		{"zero max", batch.Config{Policy: policy(0, time.Millisecond), Runners: f.runners()}, "max_batch_size 0"},
		{"negative delay", batch.Config{Policy: policy(4, -time.Millisecond), Runners: f.runners()}, "negative"},
		{"preferred over max", batch.Config{Policy: policy(4, 0, 8), Runners: f.runners()}, "preferred batch size 8 can never be reached"},
		{"preferred zero", batch.Config{Policy: policy(4, 0, 0), Runners: f.runners()}, "preferred batch size 0"},
		{"preferred twice", batch.Config{Policy: policy(4, 0, 2, 2), Runners: f.runners()}, "given twice"},
		{"no runners", batch.Config{Policy: policy(4, 0)}, "no runners"},
		{"nil runner", batch.Config{Policy: policy(4, 0), Runners: []batch.Runner{nil}}, "runner 0 is nil"},
		{"nil runner", batch.Config{Policy: policy(4, 0), Runners: []batch.Runner{(*fakeRunner)(nil)}}, "runner 0 is nil"},
		{"negative concurrency", batch.Config{Policy: policy(4, 0), Runners: f.runners(), Concurrency: -1}, "concurrency -1"},
		{"small queue", batch.Config{Policy: policy(4, 0), Runners: f.runners(), QueueSize: 3}, "queue size 3"},
	}
	for _, tt := range tests {
		b, err := batch.New(tt.cfg)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
		if b != nil {
			_ = b.Close()
		}
	}
}

// TestBatcherSizeTrigger: MaxBatchSize rows run at once, without waiting
// for the delay.
func TestBatcherSizeTrigger(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(4, time.Hour), Runners: f.runners()})
	c := newCollector()
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprint("a", i))
		enqueue(t, b, c.req(fitem(ids[i], 1, 8), false))
	}
	c.wait(t, 8)
	c.ok(t, ids...)
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{ids[:4], ids[4:]})
}

// TestBatcherOwner: the owner hears RunStarting with the run's batch size
// before its run, then Finished once with the result; a request with
// neither Owner nor the deprecated Done is refused; Done still works.
func TestBatcherOwner(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(3, time.Hour), Runners: f.runners()})
	c := newCollector()
	for _, id := range []string{"a", "b", "c"} {
		enqueue(t, b, c.req(fitem(id, 1, 8), false))
	}
	c.wait(t, 3)
	c.ok(t, "a", "b", "c")
	c.mu.Lock()
	for _, id := range []string{"a", "b", "c"} {
		if n := c.started[id]; n != 3 {
			t.Errorf("%s: RunStarting saw a batch of %d, want 3", id, n)
		}
	}
	c.mu.Unlock()
	if err := b.Enqueue(context.Background(), &batch.Request{Item: fitem("x", 1, 8)}); err == nil || !strings.Contains(err.Error(), "without Owner") {
		t.Errorf("a request without an owner: %v", err)
	}
}

// TestBatcherDelayTrigger: a lone item runs MaxQueueDelay after its
// Enqueue, not later; items arriving meanwhile join it.
func TestBatcherDelayTrigger(t *testing.T) {
	const delay = 50 * time.Millisecond
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(8, delay), Runners: f.runners()})
	c := newCollector()
	r := c.req(fitem("lone", 1, 8), false)
	enqueue(t, b, r)
	c.wait(t, 1)
	c.ok(t, "lone")
	took := c.time("lone").Sub(r.Enqueued)
	if took < delay || took > delay+300*time.Millisecond {
		t.Errorf("lone item ran after %s, want about %s", took, delay)
	}

	r0, r1 := c.req(fitem("b0", 1, 8), false), c.req(fitem("b1", 2, 8), false)
	enqueue(t, b, r0, r1)
	c.wait(t, 3)
	c.ok(t, "b0", "b1")
	if took := c.time("b0").Sub(r0.Enqueued); took < delay {
		t.Errorf("b0 ran after %s, before the delay", took)
	}
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"lone"}, {"b0", "b1"}})
}

// TestBatcherFlush: Flush runs the groups holding a request enqueued
// before it at the first free slot, without waiting out MaxQueueDelay; a
// request that comes after it, alone, waits as before. A flush while every
// slot is busy still lets the batch fill until one frees.
func TestBatcherFlush(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(8, time.Hour), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("a0", 1, 8), false), c.req(fitem("a1", 1, 8), false))
	b.Flush()
	c.wait(t, 2)
	c.ok(t, "a0", "a1")

	// After a flush, a new request waits for the delay (an hour here).
	enqueue(t, b, c.req(fitem("late", 1, 8), false))
	time.Sleep(50 * time.Millisecond)
	if n := len(f.snapshot()); n != 1 {
		t.Fatalf("%d runs after a request that came after the flush, want 1", n)
	}
	b.Flush()
	c.wait(t, 3)
	c.ok(t, "late")

	// Every slot busy: the group holding a flushed request keeps filling
	// until the slot frees, then runs whole.
	enqueue(t, b, c.req(fitem("block", 1, 3), false))
	b.Flush()
	waitFor(t, "the blocking run", func() bool { return f.started() == 3 })
	enqueue(t, b, c.req(fitem("b0", 1, 8), false))
	b.Flush()
	// b1 is in the batcher's intake once Enqueue returns, and the
	// gatherer drains its intake before it cuts for the freed slot.
	enqueue(t, b, c.req(fitem("b1", 1, 8), false))
	f.open()
	c.wait(t, 6)
	c.ok(t, "block", "b0", "b1")
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"a0", "a1"}, {"late"}, {"block"}, {"b0", "b1"}})
}

// TestBatcherPreferredSize: when the head of a group adds up to a
// preferred size and nothing else is waiting, the largest such prefix runs
// without waiting for the delay.
func TestBatcherPreferredSize(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(16, time.Hour, 4, 2), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 2, 3), false)) // 2 rows: preferred
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	var ids []string
	for i := range 6 {
		ids = append(ids, fmt.Sprint("b", i))
		enqueue(t, b, c.req(fitem(ids[i], 1, 8), false))
	}
	f.open()
	c.wait(t, 7)
	c.ok(t, ids...)
	// Rows count: 3 + 1 is preferred, 3 alone is not.
	enqueue(t, b, c.req(fitem("c0", 3, 8), false), c.req(fitem("c1", 1, 8), false))
	c.wait(t, 9)
	c.ok(t, "block", "c0", "c1")
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"block"}, ids[:4], ids[4:], {"c0", "c1"}})
}

// TestBatcherShapeGroups: only items of equal per-item dims and dtypes
// share a run; an odd one neither flushes nor stalls the others.
func TestBatcherShapeGroups(t *testing.T) {
	f := newFake(1)
	b, stop := startBatcher(t, batch.Config{Policy: policy(4, time.Hour), Runners: f.runners()})
	c := newCollector()
	f64 := fitem("d0", 1, 8)
	f64.Inputs[0].DType = tensor.FP64
	twoIn := fitem("e0", 1, 8)
	twoIn.Inputs = append(twoIn.Inputs, tensor.Tensor{Name: "y", DType: tensor.INT64, Shape: []int64{1, 2}})
	enqueue(t, b,
		c.req(fitem("a0", 1, 8), false), c.req(fitem("a1", 1, 8), false),
		c.req(fitem("b0", 1, 5), false), c.req(f64, false), c.req(twoIn, false),
		c.req(fitem("a2", 1, 8), false), c.req(fitem("a3", 1, 8), false))
	c.wait(t, 4)
	c.ok(t, "a0", "a1", "a2", "a3")
	sameLists(t, "runs before stop", idLists(f.snapshot()), [][]string{{"a0", "a1", "a2", "a3"}})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	c.ok(t, "b0", "d0", "e0")
	runs := f.snapshot()
	if len(runs) != 4 {
		t.Fatalf("runs %v, want the 3 odd items alone", idLists(runs))
	}
	for _, r := range runs {
		for _, s := range r.shapes {
			if s != r.shapes[0] {
				t.Fatalf("run %v mixes shapes %v", r.ids, r.shapes)
			}
		}
	}
}

// TestBatcherRows: rows are counted against MaxBatchSize, and an item
// bigger than MaxBatchSize runs alone.
func TestBatcherRows(t *testing.T) {
	f := newFake(1)
	b, stop := startBatcher(t, batch.Config{Policy: policy(8, time.Hour), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("r0", 3, 8), false), c.req(fitem("r1", 3, 8), false), c.req(fitem("r2", 3, 8), false))
	c.wait(t, 2)
	enqueue(t, b, c.req(fitem("big", 20, 8), false))
	c.wait(t, 4) // r2 (3 rows) cannot join big (20): each runs as it is
	enqueue(t, b, c.req(fitem("s0", 4, 8), false), c.req(fitem("s1", 4, 8), false))
	c.wait(t, 6)
	enqueue(t, b, c.req(fitem("huge", 9, 8), false))
	c.wait(t, 7)
	enqueue(t, b, c.req(fitem("t0", 1, 8), false))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	c.ok(t, "r0", "r1", "r2", "big", "s0", "s1", "huge", "t0")
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"r0", "r1"}, {"r2"}, {"big"}, {"s0", "s1"}, {"huge"}, {"t0"}})
	for _, r := range f.snapshot() {
		if r.rows > 8 && len(r.ids) > 1 {
			t.Errorf("run %v has %d rows", r.ids, r.rows)
		}
	}
}

// TestBatcherPriority: priority requests go ahead of queued ones, in
// their group and across groups.
func TestBatcherPriority(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(2, 0), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 1, 3), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	enqueue(t, b,
		c.req(fitem("n0", 1, 8), false), c.req(fitem("n1", 1, 8), false), c.req(fitem("n2", 1, 8), false),
		c.req(fitem("p0", 1, 8), true), c.req(fitem("n3", 1, 8), false), c.req(fitem("p1", 1, 8), true),
		c.req(fitem("q0", 1, 5), true))
	f.open()
	c.wait(t, 8)
	c.ok(t, "block", "n0", "n1", "n2", "n3", "p0", "p1", "q0")
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"block"}, {"p0", "p1"}, {"q0"}, {"n0", "n1"}, {"n2", "n3"}})
}

// TestBatcherCancelled: an item whose context ends before its run starts
// is not run and gets the context's error.
func TestBatcherCancelled(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(4, 0), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 1, 3), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })

	cctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	for _, e := range []struct {
		ctx context.Context
		req *batch.Request
	}{
		{cctx, c.req(fitem("c0", 1, 8), false)},
		{context.Background(), c.req(fitem("ok0", 1, 8), false)},
		{dctx, c.req(fitem("d0", 1, 8), true)},
	} {
		if err := b.Enqueue(e.ctx, e.req); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-dctx.Done()
	// A context already done is refused outright: no Done.
	if err := b.Enqueue(cctx, c.req(fitem("x0", 1, 8), false)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Enqueue with a cancelled context: %v", err)
	}
	// Submit returns when its context ends, queued or not.
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer scancel()
	if _, err := b.Submit(sctx, fitem("s0", 1, 8), false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit: %v, want the deadline", err)
	}
	f.open()
	c.wait(t, 4)
	c.ok(t, "ok0")
	if err := c.result(t, "c0").Err; !errors.Is(err, context.Canceled) {
		t.Errorf("c0: %v", err)
	}
	if err := c.result(t, "d0").Err; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("d0: %v", err)
	}
	for _, r := range f.snapshot() {
		for _, id := range r.ids {
			if id != "block" && id != "ok0" {
				t.Errorf("%s was run", id)
			}
		}
	}
}

// TestBatcherConcurrency: never more than runners x concurrency runs in
// flight, concurrency per runner, and every runner used.
func TestBatcherConcurrency(t *testing.T) {
	const runners, conc = 3, 2
	f := newFake(runners)
	b, _ := startBatcher(t, batch.Config{Policy: policy(1, 0), Runners: f.runners(), Concurrency: conc})
	c := newCollector()
	const n = 30
	for i := range n {
		enqueue(t, b, c.req(fitem(fmt.Sprint("block", i), 1, 8), false))
	}
	waitFor(t, "every slot busy", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.total == runners*conc
	})
	f.mu.Lock()
	for i, n := range f.inflight {
		if n != conc {
			t.Errorf("runner %d has %d runs in flight, want %d", i, n, conc)
		}
	}
	f.mu.Unlock()
	if q := b.Queued(); q != n-runners*conc {
		t.Errorf("Queued() = %d, want %d", q, n-runners*conc)
	}
	if got := b.InFlight(); got != runners*conc {
		t.Errorf("InFlight() = %d, want %d", got, runners*conc)
	}
	f.open()
	c.wait(t, n)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxTotal != runners*conc {
		t.Errorf("%d runs in flight at most, want %d", f.maxTotal, runners*conc)
	}
	for i, m := range f.maxPer {
		if m > conc {
			t.Errorf("runner %d had %d runs in flight", i, m)
		}
	}
}

// TestBatcherBackpressure: QueueSize bounds what waits; Enqueue waits for
// room, TryEnqueue fails fast with ErrQueueFull.
func TestBatcherBackpressure(t *testing.T) {
	f := newFake(1)
	b, _ := startBatcher(t, batch.Config{Policy: policy(1, 0), Runners: f.runners(), QueueSize: 2})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 1, 8), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	ctx := context.Background()
	for _, id := range []string{"q0", "q1"} {
		if err := b.TryEnqueue(ctx, c.req(fitem(id, 1, 8), false)); err != nil {
			t.Fatalf("TryEnqueue %s: %v", id, err)
		}
	}
	if err := b.TryEnqueue(ctx, c.req(fitem("full", 1, 8), true)); err != batch.ErrQueueFull {
		t.Fatalf("TryEnqueue on a full queue: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.Enqueue(tctx, c.req(fitem("late", 1, 8), false)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enqueue on a full queue: %v", err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- b.Enqueue(ctx, c.req(fitem("q2", 1, 8), false)) }()
	f.open()
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	c.wait(t, 4)
	c.ok(t, "block", "q0", "q1", "q2")
	if c.n.Load() != 4 {
		t.Errorf("%d results, want 4 (refused requests get none)", c.n.Load())
	}
}

// TestBatcherSoftStop: cancelling Run stops intake, runs what is pending
// without waiting for the delay, waits for the runs in flight and returns.
func TestBatcherSoftStop(t *testing.T) {
	f := newFake(1)
	b, stop := startBatcher(t, batch.Config{Policy: policy(8, time.Hour), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 8, 3), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	enqueue(t, b, c.req(fitem("a0", 1, 8), false), c.req(fitem("a1", 2, 8), false), c.req(fitem("b0", 1, 5), true))
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	f.open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if got := c.n.Load(); got != 4 {
		t.Fatalf("Run returned with %d of 4 results in", got)
	}
	c.ok(t, "block", "a0", "a1", "b0")
	sameLists(t, "runs", idLists(f.snapshot()), [][]string{{"block"}, {"b0"}, {"a0", "a1"}})

	ctx := context.Background()
	if err := b.Enqueue(ctx, c.req(fitem("z0", 1, 8), false)); !errors.Is(err, batch.ErrClosed) {
		t.Errorf("Enqueue after stop: %v", err)
	}
	if err := b.TryEnqueue(ctx, c.req(fitem("z1", 1, 8), false)); !errors.Is(err, batch.ErrClosed) {
		t.Errorf("TryEnqueue after stop: %v", err)
	}
	if _, err := b.Submit(ctx, fitem("z2", 1, 8), true); !errors.Is(err, batch.ErrClosed) {
		t.Errorf("Submit after stop: %v", err)
	}
	if err := b.Run(ctx); !errors.Is(err, batch.ErrClosed) {
		t.Errorf("Run after stop: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close after stop: %v", err)
	}
}

// TestBatcherStopWakesEnqueue: an Enqueue waiting for room when Run
// stops returns ErrClosed rather than holding the stop up.
func TestBatcherStopWakesEnqueue(t *testing.T) {
	f := newFake(1)
	b, stop := startBatcher(t, batch.Config{Policy: policy(1, 0), Runners: f.runners(), QueueSize: 1})
	c := newCollector()
	enqueue(t, b, c.req(fitem("block", 1, 8), false))
	waitFor(t, "the blocking run", func() bool { return f.started() == 1 })
	enqueue(t, b, c.req(fitem("q0", 1, 8), false))
	waiting := make(chan error, 1)
	go func() { waiting <- b.Enqueue(context.Background(), c.req(fitem("q1", 1, 8), false)) }()
	waitFor(t, "Enqueue to wait for room", func() bool { return selectingIn("(*Batcher).enqueue") })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	if err := <-waiting; !errors.Is(err, batch.ErrClosed) {
		t.Fatalf("waiting Enqueue: %v", err)
	}
	f.open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	c.ok(t, "block", "q0")
}

// TestBatcherClose: Close is a soft stop that waits for Run; before Run,
// it fails what was enqueued with ErrClosed.
func TestBatcherClose(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		f := newFake(1)
		b, _ := startBatcher(t, batch.Config{Policy: policy(8, time.Hour), Runners: f.runners()})
		c := newCollector()
		enqueue(t, b, c.req(fitem("warm", 8, 8), false))
		c.wait(t, 1) // Run is running: a Close before would fail a0
		enqueue(t, b, c.req(fitem("a0", 1, 8), false))
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		c.ok(t, "warm", "a0")
		if err := b.Enqueue(context.Background(), c.req(fitem("a1", 1, 8), false)); !errors.Is(err, batch.ErrClosed) {
			t.Errorf("Enqueue after Close: %v", err)
		}
	})
	t.Run("never run", func(t *testing.T) {
		noLeak(t)
		f := newFake(1)
		b, err := batch.New(batch.Config{Policy: policy(8, time.Hour), Runners: f.runners()})
		if err != nil {
			t.Fatal(err)
		}
		c := newCollector()
		enqueue(t, b, c.req(fitem("a0", 1, 8), false), c.req(fitem("p0", 1, 8), true))
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a0", "p0"} {
			if err := c.result(t, id).Err; !errors.Is(err, batch.ErrClosed) {
				t.Errorf("%s: %v", id, err)
			}
		}
		if err := b.Run(context.Background()); !errors.Is(err, batch.ErrClosed) {
			t.Errorf("Run after Close: %v", err)
		}
		if f.started() != 0 {
			t.Errorf("%d runs", f.started())
		}
	})
}

// TestBatcherRunnerFault: a runner that returns the wrong number of
// results fails the batch's items rather than losing or misrouting them.
func TestBatcherRunnerFault(t *testing.T) {
	f := newFake(1)
	f.short = true
	b, _ := startBatcher(t, batch.Config{Policy: policy(2, time.Hour), Runners: f.runners()})
	c := newCollector()
	enqueue(t, b, c.req(fitem("a0", 1, 8), false), c.req(fitem("a1", 1, 8), false))
	c.wait(t, 2)
	for _, id := range []string{"a0", "a1"} {
		if err := c.result(t, id).Err; err == nil || !strings.Contains(err.Error(), "returned 1 results for 2 items") {
			t.Errorf("%s: %v", id, err)
		}
	}
}

type countingObserver struct {
	waits, batches, items, rows atomic.Int64
}

func (o *countingObserver) ObserveQueueWait(time.Duration) { o.waits.Add(1) }
func (o *countingObserver) ObserveBatch(s batch.Stats) {
	o.batches.Add(1)
	o.items.Add(int64(s.Items))
	o.rows.Add(int64(s.Rows))
}

// TestBatcherLoad: 16 goroutines enqueue, try-enqueue and submit items of
// random shapes, rows, priorities and fates through a small queue; every
// accepted request gets exactly one result, its own, and no run breaks
// the policy.
func TestBatcherLoad(t *testing.T) {
	const (
		goroutines = 16
		perG       = 150
		maxBatch   = 8
		runners    = 2
		conc       = 2
	)
	f := newFake(runners)
	f.spin = 20
	obs := new(countingObserver)
	b, stop := startBatcher(t, batch.Config{
		Policy:  policy(maxBatch, 200*time.Microsecond, 4),
		Runners: f.runners(), Concurrency: conc, QueueSize: 16, Observer: obs,
	})
	c := newCollector()
	var accepted, submitted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for i := range perG {
				id := fmt.Sprintf("g%d-%d", g, i)
				if r.IntN(20) == 0 {
					id = "fail-" + id
				}
				it := fitem(id, 1+r.IntN(3), int64(4+r.IntN(3)))
				prio := r.IntN(5) == 0
				ctx, cancel := context.WithCancel(context.Background())
				switch r.IntN(10) {
				case 0: // cancelled before Enqueue: refused, no Done
					cancel()
				case 1: // cancelled while queued, or later
					defer cancel()
					go cancel()
				default:
					defer cancel()
				}
				switch mode := r.IntN(4); {
				case mode == 0:
					res, err := b.Submit(ctx, it, prio)
					if err == nil && (len(res.Outputs) != 1 || res.Outputs[0].Name != id) {
						t.Errorf("Submit %s: got %+v", id, res)
					}
					if err != nil && !errors.Is(err, context.Canceled) && !strings.HasPrefix(id, "fail") {
						t.Errorf("Submit %s: %v", id, err)
					}
					submitted.Add(1)
				default:
					req := c.req(it, prio)
					var err error
					if mode == 1 {
						if err = b.TryEnqueue(ctx, req); err == batch.ErrQueueFull {
							err = b.Enqueue(ctx, req)
						}
					} else {
						err = b.Enqueue(ctx, req)
					}
					switch {
					case err == nil:
						accepted.Add(1)
					case !errors.Is(err, context.Canceled):
						t.Errorf("Enqueue %s: %v", id, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := c.n.Load(); got != accepted.Load() {
		t.Fatalf("%d results for %d accepted requests", got, accepted.Load())
	}
	c.mu.Lock()
	for id, rs := range c.results {
		if len(rs) != 1 {
			t.Errorf("%s: Finished called %d times", id, len(rs))
			continue
		}
		r := rs[0]
		switch {
		case strings.HasPrefix(id, "fail"):
			if r.Err == nil {
				t.Errorf("%s succeeded", id)
			}
		case r.Err != nil:
			if !errors.Is(r.Err, context.Canceled) {
				t.Errorf("%s: %v", id, r.Err)
			}
		case len(r.Outputs) != 1 || r.Outputs[0].Name != id:
			t.Errorf("%s: got %+v", id, r)
		}
	}
	c.mu.Unlock()
	var items int64
	for _, r := range f.snapshot() {
		items += int64(len(r.ids))
		if r.rows > maxBatch && len(r.ids) > 1 {
			t.Errorf("run %v: %d rows", r.ids, r.rows)
		}
		for _, s := range r.shapes {
			if s != r.shapes[0] {
				t.Errorf("run %v mixes shapes %v", r.ids, r.shapes)
			}
		}
	}
	if f.maxTotal > runners*conc {
		t.Errorf("%d runs in flight", f.maxTotal)
	}
	if obs.items.Load() != items || obs.waits.Load() != items || obs.batches.Load() != int64(len(f.snapshot())) {
		t.Errorf("observer saw %d items, %d waits, %d batches; runners saw %d items in %d runs",
			obs.items.Load(), obs.waits.Load(), obs.batches.Load(), items, len(f.snapshot()))
	}
	t.Logf("%d accepted + %d submitted; %d items in %d runs (%.2f items/run); at most %d runs in flight",
		accepted.Load(), submitted.Load(), items, len(f.snapshot()), float64(items)/float64(len(f.snapshot())), f.maxTotal)
}

// TestBatcherBusy: Busy sums the wall time of the runs (at least what the
// simulated device slept for each) and gives the run slots.
func TestBatcherBusy(t *testing.T) {
	f := newFake(2)
	f.open()
	lat := batch.Latency{Base: 5 * time.Millisecond, PerRow: time.Millisecond}
	runners := f.runners()
	for i := range runners {
		runners[i] = batch.Simulate(runners[i], lat)
	}
	b, _ := startBatcher(t, batch.Config{Policy: policy(4, time.Hour), Runners: runners, Concurrency: 3})
	if busy, slots := b.Busy(); busy != 0 || slots != 6 {
		t.Fatalf("Busy() before any run = %v, %d; want 0, 6", busy, slots)
	}
	c := newCollector()
	for i := range 12 {
		enqueue(t, b, c.req(fitem(fmt.Sprint("b", i), 1, 8), false))
	}
	c.wait(t, 12)
	busy, _ := b.Busy()
	if n := b.Rows(); n != 12 {
		t.Errorf("Rows() after 3 runs of 4 rows = %d, want 12", n)
	}
	if want := 3 * lat.For(4); busy < want {
		t.Errorf("Busy() after 3 runs of 4 rows = %v, want at least %v", busy, want)
	}
}
