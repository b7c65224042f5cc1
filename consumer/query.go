package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/attribute"
)

// DefaultQueryGroup is the query subscription group of every server, so
// that the servers of a queue share its queries and each query is answered
// once.
const DefaultQueryGroup = "inferq"

// QuerySubscriber answers the KubeMQ queries of a channel until ctx ends.
// *mq.Conn satisfies it; a Broker without it serves no queries.
type QuerySubscriber interface {
	SubscribeQueries(ctx context.Context, channel, group string, handler mq.QueryHandler) error
}

// Span attributes of the messaging semantic conventions.
var (
	attrSystem      = attribute.String("messaging.system", "kubemq")
	attrDestination = attribute.Key("messaging.destination.name")
	attrMessageID   = attribute.Key("messaging.message.id")
)

// subscribeQueries subscribes to q's queries, with Config.QueryGroup,
// until ctx ends; wg is done when the subscription and its running
// handlers ended (a query still running then gets no answer: its caller's
// timeout ends it).
func (s *Server) subscribeQueries(ctx context.Context, q *queue, wg *sync.WaitGroup) {
	qs, ok := s.cfg.Broker.(QuerySubscriber)
	if !ok || s.cfg.NoQueries {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := qs.SubscribeQueries(ctx, q.name, s.cfg.QueryGroup, func(ctx context.Context, req *mq.QueryRequest) mq.QueryResponse {
			return s.answer(ctx, q, req)
		})
		if err != nil && !errors.Is(err, mq.ErrClosed) {
			s.log.Error("query subscription ended", "queue", q.name, "err", err)
		}
	}()
}

// answer runs one query through its model's batcher, ahead of queued tasks,
// and encodes the response. ctx ends when the caller gives up (its query
// timeout): a query not started by then is not run, and nothing is sent.
func (s *Server) answer(ctx context.Context, q *queue, req *mq.QueryRequest) mq.QueryResponse {
	resp, model, outcome := s.query(ctx, q, req)
	s.met.Queries.WithLabelValues(model, outcome).Inc()
	s.met.inference(model, outcome)
	if model != "" {
		s.met.SyncDuration.WithLabelValues(model, "query").Observe(time.Since(req.Received).Seconds())
	}
	body, tags := resp.Encode()
	return mq.QueryResponse{Body: body, Tags: tags}
}

// query answers req; model is the model's name ("" when unknown) and
// outcome the metrics label.
func (s *Server) query(ctx context.Context, q *queue, req *mq.QueryRequest) (resp task.QueryResponse, model, outcome string) {
	a := q.table.Load().Admit(admit.Input{From: admit.FromQuery, Body: req.Body, Tags: req.Tags, Received: req.Received, Traced: s.trace.tr != nil})
	var root context.Context
	if a.Task != nil {
		root = s.trace.queryRoot(q.name, req, &a)
	}
	if a.Model != nil {
		model = a.Model.Config.Name
	}
	outputs, ran, outcome, err := s.runSync(ctx, &a, root)
	if err == nil {
		var result, bin []byte
		result, bin, err = task.NewInferResponse(model, a.Model.version(ran), outputs, a.Task).Encode()
		if err == nil {
			endRoot(root, outcome, nil)
			return task.QueryResponse{Status: task.StatusSuccess, Result: result, Binary: bin}, model, outcome
		}
		outcome, err = OutcomeFailure, fmt.Errorf("model %q: encoding the result: %w", model, err)
	}
	endRoot(root, outcome, err)
	return task.QueryResponse{Status: task.StatusFailure, Error: err.Error()}, model, outcome
}

// syncJob is the run of a sync request (query or HTTP): the Owner of its
// batch.Request. Once the request is enqueued only the batcher touches
// it, until Finished signals done; a caller that gives up first leaves it
// to the batcher.
type syncJob struct {
	req         batch.Request
	trace       tracing
	root, stage context.Context
	done        chan struct{}
	pol         *queuePolicy
	started     atomic.Bool
}

// RunStarting opens the SpanInfer stage.
func (j *syncJob) RunStarting(r *batch.Request) {
	j.started.Store(true)
	j.pol.release()
	j.stage = j.trace.inferStage(j.root, j.stage, r.BatchItems)
}

// Finished ends the open stage and wakes the caller.
func (j *syncJob) Finished(r *batch.Request) {
	if !j.started.Load() {
		j.pol.release()
	}
	endSpan(j.stage, r.Result.Err)
	j.stage = nil
	j.done <- struct{}{}
}

// runSync runs an admitted sync request through its model's batcher ahead
// of queued tasks and waits for its result or for ctx (or the request's
// deadline) to end; a request not started by then is not run. It returns
// the outputs and the model version that ran them when the batcher says
// (batch.Request.Version), or the outcome label and the error the caller
// gets.
func (s *Server) runSync(ctx context.Context, a *admitted, root context.Context) (outputs []tensor.Tensor, ran, outcome string, err error) {
	if a.Verdict != admit.Run {
		return nil, "", outcomeOf(a.Verdict), a.Err
	}
	if !a.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, a.Deadline)
		defer cancel()
	}
	pol := a.Model.pol
	if err := pol.reserve(); err != nil {
		return nil, "", OutcomeQueueFull, err
	}
	j := &syncJob{trace: s.trace, root: root, done: make(chan struct{}, 1), pol: pol}
	j.req = batch.Request{Item: batch.Item{Inputs: a.Inputs, Outputs: a.Outputs}, Priority: a.Priority, Level: a.Level, Owner: j}
	j.stage = s.trace.stage(root, nil, SpanBatch)
	// The batcher waits with qctx: the deadline or default_queue_timeout.
	qctx, cancel := pol.queueCtx(ctx, time.Time{}, s.cfg.Now())
	defer cancel()
	var r batch.ItemResult
	if err := a.Model.Batcher.Enqueue(qctx, &j.req); err != nil {
		pol.release()
		r.Err = fmt.Errorf("enqueue for inference: %w", context.Cause(qctx))
		if qctx.Err() == nil {
			r.Err = fmt.Errorf("enqueue for inference: %w", err)
		}
		endSpan(j.stage, r.Err)
	} else {
		if r = j.wait(ctx, qctx); r.Err == nil {
			ran = j.req.Version
		}
	}
	if r.Err != nil {
		outcome, err = syncError(a.Model.Config.Name, r.Err)
		return nil, "", outcome, err
	}
	return r.Outputs, ran, OutcomeSuccess, nil
}

// wait waits for j's result, for ctx to end, or for qctx to end before
// its run started (the queue timeout: the batcher will not start it then).
func (j *syncJob) wait(ctx, qctx context.Context) batch.ItemResult {
	queued := qctx.Done()
	for {
		select {
		case <-j.done:
			return j.req.Result
		case <-ctx.Done():
			return batch.ItemResult{Err: ctx.Err()}
		case <-queued:
			if !j.started.Load() {
				return batch.ItemResult{Err: context.Cause(qctx)}
			}
			queued = nil // running: its result is on the way
		}
	}
}

// syncError names the outcome of a failed sync run and the error the caller
// gets.
func syncError(model string, err error) (outcome string, _ error) {
	switch {
	case errors.Is(err, ErrQueueTimeout), errors.Is(err, ErrQueueFull):
		outcome := OutcomeQueueTimeout
		if errors.Is(err, ErrQueueFull) {
			outcome = OutcomeQueueFull
		}
		return outcome, err // it names the model and the setting
	case errors.Is(err, batch.ErrInvalidInput):
		return OutcomeBadInput, fmt.Errorf("model %q: %w", model, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return OutcomeExpired, fmt.Errorf("model %q: the caller gave up (timeout) before the result: %w", model, err)
	}
	return OutcomeFailure, fmt.Errorf("model %q: inference failed: %w", model, err)
}

// runningDetail is the detail of the running progress event.
func runningDetail(items int) string {
	return "running: batch of " + strconv.Itoa(items)
}
