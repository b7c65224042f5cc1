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
	col := &collector{progress: spec.progress}
	stopSend := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopSend) }) }
	if spec.tasks <= 0 {
		col.deadline = t0.Add(spec.duration)
		tm := time.AfterFunc(spec.duration, stop)
		defer tm.Stop()
	}
	unwatch := context.AfterFunc(ctx, stop)
	defer unwatch()
	wctx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait()

	var (
		budget      atomic.Int64
		sent        atomic.Int64
		sendErrs    atomic.Int64
		outstanding sync.WaitGroup
		producers   sync.WaitGroup
	)
	limit := spec.tasks
	if limit <= 0 {
		limit = spec.maxTasks
	}
	budget.Store(int64(limit))
	var capped atomic.Bool
	take := func(n int) int { // with a task count: take up to n from the budget
		if limit <= 0 {
			return n
		}
		for {
			left := budget.Load()
			k := min(int64(n), left)
			if k <= 0 {
				capped.Store(true)
				return 0
			}
			if budget.CompareAndSwap(left, left-k) {
				return int(k)
			}
		}
	}
	for p := range spec.producers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			sem := make(chan struct{}, spec.window)
			for {
				select { // one slot, blocking
				case sem <- struct{}{}:
				case <-stopSend:
					return
				}
				n := 1
			grab:
				for n < spec.chunk { // more, without waiting
					select {
					case sem <- struct{}{}:
						n++
					default:
						break grab
					}
				}
				k := take(n)
				for range n - k {
					<-sem
				}
				if k == 0 {
					return
				}
				select {
				case <-stopSend:
					for range k {
						<-sem
					}
					return
				default:
				}
				at := time.Now()
				outstanding.Add(k)
				err := start(ctx, wctx, p, k, func(err error) {
					col.done(at, err)
					<-sem
					outstanding.Done()
				})
				if err != nil {
					sendErrs.Add(int64(k))
					col.mu.Lock()
					if len(col.first) < 5 {
						col.first = append(col.first, fmt.Sprintf("send: %v", err))
					}
					col.mu.Unlock()
					for range k {
						<-sem
						outstanding.Done()
					}
					if ctx.Err() != nil {
						return
					}
					continue
				}
				sent.Add(int64(k))
			}
		}()
	}
	producers.Wait()
	stop()
	sendEnd := time.Now()

	all := make(chan struct{})
	go func() { outstanding.Wait(); close(all) }()
	tm := time.NewTimer(spec.drain)
	select {
	case <-all:
		tm.Stop()
	case <-tm.C:
		cancelWait() // the rest are lost
		<-all
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	res := loadResult{
		Sent: int(sent.Load()), OK: col.ok, Errors: col.errs + int(sendErrs.Load()), Lost: col.lost,
		LatencySum: col.sum, LatencyMax: col.max, Latencies: col.lat, FirstErrors: col.first,
	}
	if spec.tasks <= 0 && !capped.Load() {
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
