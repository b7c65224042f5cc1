package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Queue policy (a model's batching.max_queue_size, default_queue_timeout
// and priority levels, Triton's names): what every path (queued tasks,
// queries, HTTP, gRPC) shares between admission and the start of a run.
//
// A model's pending requests are those admitted and handed to its batcher
// and not yet started: inferq_pending_requests, Triton's
// nv_inference_pending_request_count. At max_queue_size a sync request is
// refused at once (ErrQueueFull) and the model's queue is not polled
// further: its poller's Deliver waits for room (waitQueueRoom), and while
// Deliver waits the poller takes nothing, so tasks stay on the broker with
// their receive counts untouched; nothing is NAcked.

// ErrQueueFull is wrapped by the error of a sync request refused because its
// model has max_queue_size requests waiting: HTTP answers 503 with
// Retry-After, gRPC should answer UNAVAILABLE.
var ErrQueueFull = errors.New("queue full")

// ErrQueueTimeout is wrapped by the error of a request that waited longer
// than its model's default_queue_timeout for its run and was not run: a
// task's FAILURE record says "queue timeout", HTTP answers 503, gRPC should
// answer UNAVAILABLE.
var ErrQueueTimeout = errors.New("queue timeout")

// queuePolicy is one model's queue bound and timeout, and its count of
// pending requests.
type queuePolicy struct {
	model   string
	max     int64         // max_queue_size; 0: no bound here (the batcher's own)
	timeout time.Duration // default_queue_timeout; 0: none
	pending atomic.Int64
	gauge   prometheus.Gauge
	// q is the model's queue: its room is told whenever a pending
	// request starts or leaves.
	q *queue
}

// reserve counts one more pending request for a sync path, unless the
// model has max_queue_size waiting already, its queue's tasks in intake
// counted (they came first): then it returns the error to answer with,
// wrapping ErrQueueFull.
func (p *queuePolicy) reserve() error {
	n := p.pending.Add(1)
	if p.max > 0 && n+p.q.undecided.Load() > p.max {
		p.pending.Add(-1)
		return fmt.Errorf("model %q: %w: %d requests are waiting for a run (batching.max_queue_size); retry later", p.model, ErrQueueFull, p.max)
	}
	p.gauge.Inc()
	return nil
}

// take counts a queued task the poller's wait has let in.
func (p *queuePolicy) take() {
	p.pending.Add(1)
	p.gauge.Inc()
}

// release counts a pending request out: its run starts, or it leaves
// without one.
func (p *queuePolicy) release() {
	p.pending.Add(-1)
	p.gauge.Dec()
	p.q.wake()
}

// full reports whether extra more requests would take the model over
// max_queue_size.
func (p *queuePolicy) full(extra int64) bool {
	return p.max > 0 && p.pending.Load()+extra >= p.max
}

// queueCtx is the context a request of the model waits in the batcher
// with: ctx, ending at default_queue_timeout from now with a cause wrapping
// ErrQueueTimeout (the batcher then finishes it with that error, unrun),
// unless deadline (the request's own, zero for none) comes first.
func (p *queuePolicy) queueCtx(ctx context.Context, deadline, now time.Time) (context.Context, context.CancelFunc) {
	if p.timeout > 0 {
		at := now.Add(p.timeout)
		if deadline.IsZero() || at.Before(deadline) {
			cause := fmt.Errorf("model %q: %w: waited longer than batching.default_queue_timeout (%s) for its run; not run", p.model, ErrQueueTimeout, p.timeout)
			return context.WithDeadlineCause(ctx, at, cause)
		}
	}
	if !deadline.IsZero() {
		return context.WithDeadline(ctx, deadline)
	}
	return ctx, noCancel
}

// queueRoom says whether q may hand one more message to intake: every model
// of q with a max_queue_size has room for it beside the messages of q in
// intake and not yet admitted (they may all be for that model).
func (q *queue) queueRoom() bool {
	undecided := q.undecided.Load()
	for _, m := range q.table.Load().Models() {
		if m.pol.full(undecided) {
			return false
		}
	}
	return true
}

// waitQueueRoom holds the poller's Deliver while a model of q is at its
// max_queue_size: the Poller polls no more while Deliver blocks, so the
// queue's tasks stay on the broker, unreceived. It returns ctx's error
// when ctx ends first (the Poller then gives what it holds back,
// uncounted).
func (s *Server) waitQueueRoom(ctx context.Context, q *queue) error {
	if q.queueRoom() {
		return nil
	}
	s.log.Debug("model queue full (batching.max_queue_size); queue paused", "queue", q.name)
	for !q.queueRoom() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.room:
		}
	}
	s.log.Debug("model queue has room; queue resumed", "queue", q.name)
	return nil
}
