package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// errLost marks a task whose result did not come back before the drain
// timeout.
var errLost = errors.New("bench: result lost")

// loadSpec is the closed-loop load one sample applies: producers, each with
// at most window tasks in flight, sending up to chunk tasks per call.
type loadSpec struct {
	producers int
	window    int
	chunk     int
	// duration bounds the sending when tasks is 0; otherwise tasks in all
	// are sent, however long that takes.
	duration time.Duration
	tasks    int
	// maxTasks, with a duration, stops the sending early after this many
	// tasks (0: no cap); the rate is then taken up to the last result.
	maxTasks int
	// drain is how long results may take after the sending stopped;
	// tasks still out then are lost.
	drain time.Duration
	// progress, when set, is called with every completed task's count.
	progress func(n int)
}

// starter sends n tasks for producer p. It either returns an error (no
// task was sent; done is never called) or calls done exactly once per task,
// possibly later and from any goroutine, with nil (verified result), an
// error of that task (a FAILURE, a wrong output), or an error wrapping
// errLost once wctx ended before the result came. ctx ends the sending; wctx
// ends the waiting. done may be called before start returns.
type starter func(ctx, wctx context.Context, p, n int, done func(error)) error

// loadResult is what a sample measured.
type loadResult struct {
	Sent, OK, Errors, Lost int
	// LatencySum and LatencyMax cover every OK task; Latencies holds all
	// of them up to maxLatencies, then a uniform sample (reservoir) of
	// that size, so that a million-task sample does not grow the process.
	LatencySum, LatencyMax time.Duration
	// Seconds is the measured time: the duration (tasks completed within
	// it count for the rate), or with --tasks the time from the first send
	// to the last result.
	Seconds     float64
	TasksPerSec float64
	Latencies   []time.Duration
	FirstErrors []string
}

// maxLatencies bounds the latencies a sample keeps (8 MiB).
const maxLatencies = 1 << 20

type collector struct {
	mu       sync.Mutex
	deadline time.Time // zero with a task count
	lat      []time.Duration
	ok       int
	sum, max time.Duration
	inWindow int
	errs     int
	lost     int
	last     time.Time
	first    []string
	progress func(int)
}

func (c *collector) done(sent time.Time, err error) {
	now := time.Now()
	c.mu.Lock()
	switch {
	case err == nil:
		d := now.Sub(sent)
		c.ok++
		c.sum += d
		c.max = max(c.max, d)
		if len(c.lat) < maxLatencies {
			c.lat = append(c.lat, d)
		} else if j := rand.IntN(c.ok); j < maxLatencies {
			c.lat[j] = d
		}
		if c.deadline.IsZero() || !now.After(c.deadline) {
			c.inWindow++
		}
		c.last = now
	case errors.Is(err, errLost):
		c.lost++
	default:
		c.errs++
		if len(c.first) < 5 {
			c.first = append(c.first, err.Error())
		}
	}
	c.mu.Unlock()
	if c.progress != nil {
		c.progress(1)
	}
}

// drive applies spec's load through start and measures it. It returns
// when every task sent is done or lost.
func drive(ctx context.Context, spec loadSpec, start starter) loadResult {
	spec.producers, spec.window, spec.chunk = max(spec.producers, 1), max(spec.window, 1), max(spec.chunk, 1)
	t0 := time.Now()
	d := &driver{spec: spec, start: start, ctx: ctx, col: &collector{progress: spec.progress}, stopSend: make(chan struct{})}
	if spec.tasks <= 0 {
		d.col.deadline = t0.Add(spec.duration)
		tm := time.AfterFunc(spec.duration, d.stop)
		defer tm.Stop()
	}
	unwatch := context.AfterFunc(ctx, d.stop)
	defer unwatch()
	wctx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait()
	d.wctx = wctx
	d.limit = spec.tasks
	if d.limit <= 0 {
		d.limit = spec.maxTasks
	}
	d.budget.Store(int64(d.limit))
	var producers sync.WaitGroup
	for p := range spec.producers {
		producers.Go(func() { d.produce(p) })
	}
	producers.Wait()
	d.stop()
	sendEnd := time.Now()
	d.drain(cancelWait)
	return d.result(t0, sendEnd)
}

// driver is the state of one drive: the producers share it.
type driver struct {
	spec      loadSpec
	start     starter
	ctx, wctx context.Context // ctx ends the sending, wctx the waiting
	col       *collector
	stopSend  chan struct{}
	stopOnce  sync.Once
	// limit is the task budget (0: none); budget is what is left of it,
	// capped is set once it ran out.
	limit       int
	budget      atomic.Int64
	capped      atomic.Bool
	sent        atomic.Int64
	sendErrs    atomic.Int64
	outstanding sync.WaitGroup
}

// stop ends the sending; it may be called any number of times.
func (d *driver) stop() { d.stopOnce.Do(func() { close(d.stopSend) }) }

// take takes up to n tasks from the budget (all n without one).
func (d *driver) take(n int) int {
	if d.limit <= 0 {
		return n
	}
	for {
		left := d.budget.Load()
		k := min(int64(n), left)
		if k <= 0 {
			d.capped.Store(true)
			return 0
		}
		if d.budget.CompareAndSwap(left, left-k) {
			return int(k)
		}
	}
}

// produce is producer p: it keeps up to spec.window tasks in flight,
// sending what is free up to spec.chunk at a time, until the sending stops.
func (d *driver) produce(p int) {
	sem := make(chan struct{}, d.spec.window)
	for {
		k, ok := d.acquire(sem)
		if !ok || !d.send(p, k, sem) {
			return
		}
	}
}

// acquire waits for one free slot in sem, takes up to spec.chunk without
// waiting, and returns how many tasks to send; false: stop producing.
func (d *driver) acquire(sem chan struct{}) (int, bool) {
	select { // one slot, blocking
	case sem <- struct{}{}:
	case <-d.stopSend:
		return 0, false
	}
	n := 1
grab:
	for n < d.spec.chunk { // more, without waiting
		select {
		case sem <- struct{}{}:
			n++
		default:
			break grab
		}
	}
	k := d.take(n)
	for range n - k {
		<-sem
	}
	if k == 0 {
		return 0, false
	}
	select {
	case <-d.stopSend:
		for range k {
			<-sem
		}
		return 0, false
	default:
	}
	return k, true
}

// send starts k tasks of producer p; each frees its slot in sem when done.
// A failed send counts its tasks as errors; false: stop producing.
func (d *driver) send(p, k int, sem chan struct{}) bool {
	at := time.Now()
	d.outstanding.Add(k)
	err := d.start(d.ctx, d.wctx, p, k, func(err error) {
		d.col.done(at, err)
		<-sem
		d.outstanding.Done()
	})
	if err == nil {
		d.sent.Add(int64(k))
		return true
	}
	d.sendErrs.Add(int64(k))
	d.col.mu.Lock()
	if len(d.col.first) < 5 {
		d.col.first = append(d.col.first, fmt.Sprintf("send: %v", err))
	}
	d.col.mu.Unlock()
	for range k {
		<-sem
		d.outstanding.Done()
	}
	return d.ctx.Err() == nil
}

// drain waits spec.drain for the tasks still out, then gives them up:
// cancelWait makes their collectors report them lost.
func (d *driver) drain(cancelWait context.CancelFunc) {
	all := make(chan struct{})
	go func() { d.outstanding.Wait(); close(all) }()
	tm := time.NewTimer(d.spec.drain)
	select {
	case <-all:
		tm.Stop()
	case <-tm.C:
		cancelWait() // the rest are lost
		<-all
	}
}

// result is what the drive measured, the sending having run from t0 to
// sendEnd.
func (d *driver) result(t0, sendEnd time.Time) loadResult {
	col := d.col
	col.mu.Lock()
	defer col.mu.Unlock()
	res := loadResult{
		Sent: int(d.sent.Load()), OK: col.ok, Errors: col.errs + int(d.sendErrs.Load()), Lost: col.lost,
		LatencySum: col.sum, LatencyMax: col.max, Latencies: col.lat, FirstErrors: col.first,
	}
	if d.spec.tasks <= 0 && !d.capped.Load() {
		res.Seconds = earlier(sendEnd, col.deadline).Sub(t0).Seconds()
		if res.Seconds > 0 {
			res.TasksPerSec = float64(col.inWindow) / res.Seconds
		}
	} else if !col.last.IsZero() {
		res.Seconds = col.last.Sub(t0).Seconds()
		res.TasksPerSec = float64(res.OK) / res.Seconds
	}
	return res
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
