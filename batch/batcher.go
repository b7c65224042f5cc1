package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrQueueFull is returned by TryEnqueue when the batcher's queue has no
// room: the caller should retry later or shed the request.
var ErrQueueFull = errors.New("batch: batcher queue full")

// Runner runs a batch of items and returns one result per item, in order,
// failing only the items that fail. *runtime.Session is a Runner. A Batcher calls
// RunBatch from up to Config.Concurrency goroutines at once, so it
// must be safe for concurrent use when Concurrency > 1. The batcher passes
// a context that is never cancelled: cancellation is per item, checked by
// the batcher just before the run.
type Runner interface {
	RunBatch(ctx context.Context, items []Item) []ItemResult
}

// Policy says when a Batcher runs what it has gathered. Rows are
// counted, not items: an item of n rows (dim 0 of its inputs) takes n of a
// batch's MaxBatchSize.
type Policy struct {
	// MaxBatchSize is the most rows one run takes. A shape group that holds
	// this many rows runs at once (when a run slot is free); an item with
	// more rows runs alone.
	MaxBatchSize int
	// MaxQueueDelay is how long the oldest item of a shape group waits for
	// the batch to fill, counted from its Enqueue. Zero runs whatever is
	// there as soon as a run slot is free; batches still fill while every
	// slot is busy. Go's timers wake an otherwise idle process on Linux
	// with about 1 ms resolution (the netpoller waits in milliseconds), so
	// a delay under 1 ms acts as about 1 ms when the process has nothing
	// else to do; use PreferredBatchSizes to run a batch as soon as it is
	// worth running.
	MaxQueueDelay time.Duration
	// PreferredBatchSizes, optional, are row counts worth running at once:
	// when the items at the head of a shape group add up to one of them
	// and nothing else is waiting in the intake, the largest such prefix
	// runs without waiting for MaxQueueDelay. Each must be in
	// [1, MaxBatchSize]; order does not matter.
	PreferredBatchSizes []int
	// PriorityLevels is the number of priority levels (Request.Level), 1
	// the highest, as Triton orders them; 0 is one level. Within a level
	// Priority requests (a caller waiting) go first. Each level and kind
	// is a lane, 2 x PriorityLevels of them; batches are cut from the
	// lowest lane first, oldest first within a lane.
	PriorityLevels int
	// PriorityAging bounds starvation: a waiting request's lane counts
	// one lower for every PriorityAging it has waited, so after
	// (2 x PriorityLevels - 1) x PriorityAging every request is in lane
	// 0, where the oldest goes first: nothing enqueued after it passes
	// it. 0: no aging (a low lane waits as long as higher ones are busy).
	PriorityAging time.Duration
}

// lanes is the number of lanes the policy's levels make.
func (p Policy) lanes() int { return 2 * max(p.PriorityLevels, 1) }

// Validate refuses a policy that can never fire or makes no sense.
func (p Policy) Validate() error {
	if p.MaxBatchSize < 1 {
		return fmt.Errorf("batch: batch policy: max_batch_size %d: must be at least 1, or no batch can ever run", p.MaxBatchSize)
	}
	if p.MaxQueueDelay < 0 {
		return fmt.Errorf("batch: batch policy: max_queue_delay %s is negative", p.MaxQueueDelay)
	}
	if p.PriorityLevels < 0 {
		return fmt.Errorf("batch: batch policy: priority levels %d is negative", p.PriorityLevels)
	}
	if p.PriorityAging < 0 {
		return fmt.Errorf("batch: batch policy: priority aging %s is negative", p.PriorityAging)
	}
	seen := make(map[int]bool, len(p.PreferredBatchSizes))
	for _, s := range p.PreferredBatchSizes {
		if s < 1 || s > p.MaxBatchSize {
			return fmt.Errorf("batch: batch policy: preferred batch size %d can never be reached: want 1..max_batch_size (%d)", s, p.MaxBatchSize)
		}
		if seen[s] {
			return fmt.Errorf("batch: batch policy: preferred batch size %d given twice", s)
		}
		seen[s] = true
	}
	return nil
}

// Observer receives a Batcher's measurements, e.g. to feed Prometheus
// histograms. Its methods are called from the batcher's run goroutines,
// concurrently, and should return quickly: they delay the results.
type Observer interface {
	// ObserveQueueWait is called for every item when its run starts, with
	// the time since its Enqueue.
	ObserveQueueWait(d time.Duration)
	// ObserveBatch is called after every run.
	ObserveBatch(s Stats)
}

// Stats describes one run.
type Stats struct {
	Runner int // index in Config.Runners
	Items  int
	Rows   int
	Run    time.Duration // RunBatch's wall time
}

// Config configures a Batcher. The zero value of every optional
// field picks the default.
type Config struct {
	// Name names the batcher (the model) in errors and logs.
	Name   string
	Policy Policy
	// Runners are the model's instances (one session per device), at
	// least one.
	Runners []Runner
	// Concurrency is the number of runs in flight per runner; default 1.
	Concurrency int
	// QueueSize bounds the requests accepted and not yet started (the
	// runs in flight hold up to len(Runners) x Concurrency x MaxBatchSize
	// rows more); Enqueue blocks and TryEnqueue fails when it is reached.
	// Default 4 x MaxBatchSize x len(Runners) x Concurrency; at least
	// MaxBatchSize.
	QueueSize int
	// Observer, optional, receives batch sizes, queue waits and run times.
	Observer Observer
	// Logger, optional, receives start, stop and runner faults.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = "batcher"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.QueueSize == 0 && c.Policy.MaxBatchSize > 0 && c.Concurrency > 0 {
		c.QueueSize = 4 * c.Policy.MaxBatchSize * max(1, len(c.Runners)) * c.Concurrency
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("batch: batcher %q: %w", c.Name, err)
	}
	if len(c.Runners) == 0 {
		return fmt.Errorf("batch: batcher %q: no runners", c.Name)
	}
	for i, r := range c.Runners {
		if isNilRunner(r) {
			return fmt.Errorf("batch: batcher %q: runner %d is nil", c.Name, i)
		}
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("batch: batcher %q: concurrency %d: must be at least 1", c.Name, c.Concurrency)
	}
	if c.QueueSize < c.Policy.MaxBatchSize {
		return fmt.Errorf("batch: batcher %q: queue size %d is below max_batch_size %d: a full batch could never gather", c.Name, c.QueueSize, c.Policy.MaxBatchSize)
	}
	return nil
}

func isNilRunner(r Runner) bool {
	if r == nil {
		return true
	}
	v := reflect.ValueOf(r)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Request is one item handed to a Batcher by Enqueue or TryEnqueue. The
// caller sets Item, Priority, Alone and Owner.
//
// Once Enqueue returns nil the batcher owns the request until it calls
// Finish: the caller must not change the request or the item's tensors.
// The batcher does not touch the request after Finish, so the owner may
// recycle it from Finished.
type Request struct {
	Item Item
	// Priority requests (synchronous queries) are run ahead of the others
	// of their level, and do not wait out MaxQueueDelay.
	Priority bool
	// Level is the request's priority level, 1 the highest; 0 or a level
	// beyond Policy.PriorityLevels is the lowest. Lower levels run
	// first (see Policy.PriorityAging for the starvation bound).
	Level int
	// Alone runs the item in a batch of its own: the consumer sets it on a
	// task that was in flight when a process died, so that the tasks that
	// would share its batch do not share its fate.
	Alone bool
	// Owner is told of the request's run (see Owner); the job that
	// enqueued it, typically. Required.
	Owner Owner
	// BatchItems is set right before the run starts: the number of
	// requests in the run this one is part of (itself included), for
	// progress reports and traces.
	BatchItems int
	// Result is set before Owner.Finished: the outputs, or the error that
	// failed this item alone (the request's context error if it ended
	// before the run started, context.Cause of it when it has one;
	// ErrClosed if the batcher was closed without ever running it).
	Result ItemResult
	// Version, when set, is the model version that took the request: a
	// model repository's batcher (one that switches between versions)
	// sets it before the request reaches a version's batcher, and the
	// result reports it as model_version.
	Version string
	// Enqueued is set by Enqueue to the time it accepted the request;
	// MaxQueueDelay and the observer's queue wait count from it.
	Enqueued time.Time

	// ctx is the context given to Enqueue: a request whose context ends
	// before its run starts is not run. Kept here rather than passed
	// along so that a request costs the batcher no allocation.
	ctx  context.Context
	rows int
	lane int
	seq  uint64 // Enqueue order, against Batcher.flushed
}

// Owner is told of the run of the requests it enqueued. Both methods are
// called from a batcher goroutine, never while the batcher holds a lock,
// and hold a run slot until they return: they must be quick and must not
// block (hand the request to a buffered channel or a goroutine of your
// own), and must not call Enqueue or Submit, which may wait for the slot
// they hold. TryEnqueue is fine.
type Owner interface {
	// RunStarting is called right before the run that includes r starts
	// (r.BatchItems is set), and not at all for a request that never
	// runs. The consumer records the attempt then, so that a crash is
	// counted only against the tasks that were running.
	RunStarting(r *Request)
	// Finished is called exactly once for every request Enqueue accepted,
	// with r.Result set.
	Finished(r *Request)
}

// Start marks the start of r's run in a batch of n requests and tells
// its owner. Batchers call it (and fakes of one, in tests).
func (r *Request) Start(n int) {
	r.BatchItems = n
	r.Owner.RunStarting(r)
}

// Finish sets r's result and tells its owner: the last thing a batcher
// does with r.
func (r *Request) Finish(res ItemResult) {
	r.Result = res
	r.Owner.Finished(r)
}

// Batcher gathers requests for one model into batches by its Policy
// and runs them on its runners, at most len(Runners) x Concurrency runs at
// a time. Only items with equal per-item dims (every input's name, datatype
// and dims but dim 0) share a run; each such shape group gathers on its
// own, so an odd shape neither flushes nor stalls the others. While every
// run slot is busy the batcher keeps gathering, so batches fill under load,
// but never beyond MaxBatchSize rows.
//
// One goroutine (Run's) owns the gathering state; requests reach it through
// bounded channels and batches leave it to one goroutine per run slot.
// Enqueue, TryEnqueue, Submit, Queued, InFlight and Close are safe for
// concurrent use. Requests may be enqueued before Run starts; they wait for
// it (and fail with ErrClosed if Close comes first). The usual life:
// New, Run in an errgroup, Enqueue/Submit from any goroutine, cancel
// Run's context to stop.
type Batcher struct {
	name      string
	policy    Policy // PreferredBatchSizes sorted, a copy
	runners   []Runner
	conc      int
	obs       Observer
	logger    *slog.Logger
	errClosed error

	// tokens holds one token per request accepted and not yet started: it
	// is the queue bound, and what Enqueue waits on. prio and normal carry
	// the requests to Run's goroutine; each has room for QueueSize, so
	// sending on them never blocks once a token is held.
	tokens       chan struct{}
	prio, normal chan *Request

	// seq numbers the requests in Enqueue order; flushed is the last
	// number a Flush saw, and flush wakes Run's goroutine for it.
	seq, flushed atomic.Uint64
	flush        chan struct{}

	closing   chan struct{} // closed by Close, or by Run when it stops
	closeOnce sync.Once
	done      chan struct{} // closed when Run has returned, or by Close when Run never ran

	// mu is read-held by Enqueue from its closed check to its send, and
	// write-held to set closed, so that once closed is set no request can
	// slip into the channels after they were drained.
	mu     sync.RWMutex
	closed bool

	stateMu sync.Mutex
	state   batcherState

	running atomic.Int64 // items in runs
	busy    atomic.Int64 // run time so far, summed over runs (ns)
	rowsRun atomic.Int64 // rows of the runs that ended so far
	// fixedCost is the gatherer's estimate of a run's fixed cost (ns,
	// cost.go), for FixedCost.
	fixedCost atomic.Int64
	waiters   sync.Pool // of *waiter, for Submit
}

type batcherState uint8

const (
	stateIdle batcherState = iota
	stateRunning
	stateStopped
)

// New returns a batcher for cfg. Nothing runs until Run.
func New(cfg Config) (*Batcher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := cfg.Policy
	p.PreferredBatchSizes = slices.Clone(p.PreferredBatchSizes)
	slices.Sort(p.PreferredBatchSizes)
	b := &Batcher{
		name:      cfg.Name,
		policy:    p,
		runners:   slices.Clone(cfg.Runners),
		conc:      cfg.Concurrency,
		obs:       cfg.Observer,
		logger:    cfg.Logger,
		errClosed: fmt.Errorf("batch: batcher %q: %w", cfg.Name, ErrClosed),
		tokens:    make(chan struct{}, cfg.QueueSize),
		prio:      make(chan *Request, cfg.QueueSize),
		normal:    make(chan *Request, cfg.QueueSize),
		flush:     make(chan struct{}, 1),
		closing:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	b.waiters.New = func() any { return newWaiter() }
	return b, nil
}

// Name returns the batcher's name.
func (b *Batcher) Name() string { return b.name }

// LogValue describes the batcher in logs.
func (b *Batcher) LogValue() slog.Value {
	return slog.GroupValue(slog.String("batcher", b.name), slog.Int("runners", len(b.runners)), slog.Int("concurrency", b.conc))
}

// Queued returns the number of requests accepted and not yet started (a
// live value for a gauge).
func (b *Batcher) Queued() int { return len(b.tokens) }

// InFlight returns the number of items in runs now.
func (b *Batcher) InFlight() int { return int(b.running.Load()) }

// Busy returns the wall time the batcher's runs have taken so far, summed
// over its runs, and its run slots (runners x concurrency). The change of
// busy over a span, divided by the span and by slots, is the share of the
// time its devices were running: near 1 when they are the bottleneck.
func (b *Batcher) Busy() (busy time.Duration, slots int) {
	return time.Duration(b.busy.Load()), len(b.runners) * b.conc
}

// Rows returns the rows of the runs that ended so far. Its change over a
// span is the rows the devices served: where a run has a fixed cost (an
// accelerator's launch), fuller batches serve more rows in the same busy
// time, which Busy does not show.
func (b *Batcher) Rows() int64 { return b.rowsRun.Load() }

// Flush tells the batcher that nothing more is on its way for the requests
// it holds: a shape group holding a request enqueued before the call runs
// at the first free run slot, as if its MaxQueueDelay had passed, taking
// whatever the group holds then (up to MaxBatchSize). While every slot is
// busy the group still fills. The consumer calls it when it has enqueued
// all that a queue poll delivered: the next tasks can come only with the
// next poll, and waiting for them would only delay these. Requests
// enqueued after the call wait as before. Flush does not block. It leaves
// a fragment (a group of fewer than half the rows of recent runs) to wait
// out MaxQueueDelay while the batcher's runs show a fixed cost above it (an
// accelerator's): a fragment of a burst would hold the device for that cost
// while the rest of the burst arrives (cost.go).
func (b *Batcher) Flush() {
	b.flushed.Store(b.seq.Load())
	select {
	case b.flush <- struct{}{}:
	default:
	}
}

// Submit runs item through the batcher and waits for its result: the
// synchronous path for queries and HTTP. priority puts it ahead of queued
// requests. err is the enqueue error, ctx's error if ctx ends first (the
// item is then not run if it had not started, and its result is dropped if
// it had), or the item's own error (res.Err). item's tensors must not
// change until Submit returns.
func (b *Batcher) Submit(ctx context.Context, item Item, priority bool) (res ItemResult, err error) {
	w := b.waiters.Get().(*waiter)
	w.req = Request{Item: item, Priority: priority, Owner: w}
	if err := b.Enqueue(ctx, &w.req); err != nil {
		w.req = Request{}
		b.waiters.Put(w)
		return ItemResult{Err: err}, err
	}
	select {
	case res = <-w.ch:
		w.req = Request{}
		b.waiters.Put(w)
		return res, res.Err
	case <-ctx.Done():
		// Finished will still be called, into w.ch's free slot; w is left
		// to the garbage collector rather than reused.
		return ItemResult{Err: ctx.Err()}, ctx.Err()
	}
}

// waiter is Submit's request and the channel its Finished fills, kept
// together and reused so that Submit allocates nothing of its own.
type waiter struct {
	req Request
	ch  chan ItemResult
}

func newWaiter() *waiter { return &waiter{ch: make(chan ItemResult, 1)} }

func (w *waiter) RunStarting(*Request) {}
func (w *waiter) Finished(r *Request)  { w.ch <- r.Result }

// Close stops the batcher: Enqueue returns ErrClosed from now on. If Run is
// running, Close waits until it has run what was pending and returned (the
// same soft stop as cancelling Run's context); if Run never ran, the
// requests accepted so far get ErrClosed, from Close's goroutine. Close is
// idempotent. It must not be called from an Owner's methods.
func (b *Batcher) Close() error {
	b.closeOnce.Do(func() { close(b.closing) })
	b.stateMu.Lock()
	st := b.state
	if st == stateIdle {
		b.state = stateStopped
	}
	b.stateMu.Unlock()
	if st != stateIdle {
		<-b.done
		return nil
	}
	b.markClosed()
	for {
		var r *Request
		select {
		case r = <-b.prio:
		case r = <-b.normal:
		default:
			close(b.done)
			return nil
		}
		<-b.tokens
		r.Finish(ItemResult{Err: b.errClosed})
	}
}

// markClosed makes Enqueue refuse new requests; when it returns, no
// Enqueue is between its closed check and its send.
func (b *Batcher) markClosed() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// Run gathers and runs batches until ctx ends or Close is called, then
// stops softly: it takes no new requests (Enqueue returns ErrClosed), runs
// everything accepted so far by the policy's size limits without waiting
// for MaxQueueDelay, waits for the runs in flight, and returns nil. For a
// hard stop, cancel the requests' contexts as well: pending items then
// finish at once with their context's error, and only runs already
// started are waited for. Run starts len(Runners) x Concurrency goroutines
// and leaves none behind. It may be called once; after Close it returns
// ErrClosed.
func (b *Batcher) Run(ctx context.Context) error {
	b.stateMu.Lock()
	switch b.state {
	case stateRunning:
		b.stateMu.Unlock()
		return fmt.Errorf("batch: batcher %q: Run called twice", b.name)
	case stateStopped:
		b.stateMu.Unlock()
		return b.errClosed
	}
	b.state = stateRunning
	b.stateMu.Unlock()
	defer func() {
		b.stateMu.Lock()
		b.state = stateStopped
		b.stateMu.Unlock()
		close(b.done)
	}()

	g := newGatherer(b)
	var wg sync.WaitGroup
	for i := range b.runners {
		for range b.conc {
			wg.Go(func() { b.worker(i, g.work[i], g.freed) })
		}
	}
	b.logger.Info("batcher started", "batcher", b.name, "runners", len(b.runners), "concurrency", b.conc,
		"max_batch_size", b.policy.MaxBatchSize, "max_queue_delay", b.policy.MaxQueueDelay, "queue_size", cap(b.tokens))

	g.gather(ctx)

	// Wake the Enqueues waiting for room (room that would only come from
	// this goroutine), then shut the door.
	b.closeOnce.Do(func() { close(b.closing) })
	b.markClosed()
	g.drain()
	flushed := g.pending
	for g.pending > 0 {
		g.dispatch(true)
		if g.pending > 0 {
			g.release(<-g.freed)
		}
	}
	for _, w := range g.work {
		close(w)
	}
	wg.Wait()
	g.timer.Stop()
	b.logger.Info("batcher stopped", "batcher", b.name, "flushed", flushed)
	return nil
}
