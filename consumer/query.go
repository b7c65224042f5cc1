package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
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

// startQueries subscribes to the queries of every queue, with
// Config.QueryGroup, until ctx ends. The returned func waits for the
// subscriptions and their running handlers to end; a query still running
// then gets no answer (its caller's timeout ends it).
func (s *Server) startQueries(ctx context.Context) (wait func()) {
	qs, ok := s.cfg.Broker.(QuerySubscriber)
	if !ok || s.cfg.NoQueries {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, q := range s.queues {
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
	return wg.Wait
}

// answer runs one query through its model's batcher, ahead of queued tasks,
// and encodes the response. ctx ends when the caller gives up (its query
// timeout): a query not started by then is not run, and nothing is sent.
func (s *Server) answer(ctx context.Context, q *queue, req *mq.QueryRequest) mq.QueryResponse {
	resp, model, outcome := s.query(ctx, q, req)
	s.met.Queries.WithLabelValues(model, outcome).Inc()
	if model != "" {
		s.met.SyncDuration.WithLabelValues(model, "query").Observe(time.Since(req.Received).Seconds())
	}
	body, tags := resp.Encode()
	return mq.QueryResponse{Body: body, Tags: tags}
}

// query answers req; model is the model's name ("" when unknown) and
// outcome the metrics label.
func (s *Server) query(ctx context.Context, q *queue, req *mq.QueryRequest) (resp task.QueryResponse, model, outcome string) {
	fail := func(o string, err error) (task.QueryResponse, string, string) {
		return task.QueryResponse{Status: task.StatusFailure, Error: err.Error()}, model, o
	}
	t, err := task.ParseQuery(req.Body, req.Tags, q.limits)
	if t == nil {
		return fail(OutcomeUnprocessable, fmt.Errorf("undecodable query: %w", err))
	}
	sp := s.trace.query(q.name, req, t)
	defer func() {
		var err error
		if resp.Status != task.StatusSuccess {
			err = errors.New(resp.Error)
		}
		sp.end(outcome, err)
	}()
	m := q.models[t.Name]
	if m == nil {
		return fail(OutcomeUnknownModel, unknownModelError(t.Name, q))
	}
	model = m.Config.Name
	if err != nil {
		return fail(OutcomeBadInput, fmt.Errorf("model %q: %w", model, err))
	}
	if deadline, ok := t.Deadline(req.Received); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if ctx.Err() != nil {
		return fail(OutcomeExpired, errors.New("deadline exceeded: the caller gave up before inference started"))
	}
	lim := task.Limits{MaxBodyBytes: int64(m.Config.Limits.MaxBodyBytes), MaxTensorElements: m.Config.Limits.MaxTensorElements}
	if lim.MaxBodyBytes > 0 && int64(len(req.Body)) > lim.MaxBodyBytes {
		return fail(OutcomeBadInput, fmt.Errorf("model %q: query body of %d bytes is over the limit of %d bytes (limits.max_body_bytes)",
			model, len(req.Body), lim.MaxBodyBytes))
	}
	inputs, err := t.Inputs(m.Info, lim)
	if err != nil {
		return fail(OutcomeBadInput, fmt.Errorf("model %q: %w", model, err))
	}
	r := s.runSync(ctx, m, runtime.Item{Inputs: inputs, Outputs: t.OutputNames()}, sp)
	if r.Err != nil {
		o, err := syncError(model, r.Err)
		return fail(o, err)
	}
	result, bin, err := task.NewInferResponse(model, m.Version, r.Outputs, t).Encode()
	if err != nil {
		return fail(OutcomeFailure, fmt.Errorf("model %q: encoding the result: %w", model, err))
	}
	return task.QueryResponse{Status: task.StatusSuccess, Result: result, Binary: bin}, model, OutcomeSuccess
}

// runSync runs item through m's batcher ahead of queued tasks and waits
// for its result or for ctx to end. An item whose ctx ends before its run
// starts is not run.
func (s *Server) runSync(ctx context.Context, m *Model, item runtime.Item, sp *span) runtime.ItemResult {
	done := make(chan runtime.ItemResult, 1)
	req := &runtime.Request{Item: item, Priority: true}
	req.Done = func(r runtime.ItemResult) {
		sp.endStage(r.Err)
		done <- r
	}
	if sp != nil {
		req.Started = func() { sp.infer(req.BatchItems) }
	}
	sp.next(SpanBatch)
	if err := m.Batcher.Enqueue(ctx, req); err != nil {
		return runtime.ItemResult{Err: fmt.Errorf("enqueue for inference: %w", err)}
	}
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		return runtime.ItemResult{Err: ctx.Err()}
	}
}

// syncError names the outcome of a failed sync run and the error the caller
// gets.
func syncError(model string, err error) (outcome string, _ error) {
	switch {
	case errors.Is(err, runtime.ErrInvalidInput):
		return OutcomeBadInput, fmt.Errorf("model %q: %w", model, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return OutcomeExpired, fmt.Errorf("model %q: the caller gave up (timeout) before the result: %w", model, err)
	}
	return OutcomeFailure, fmt.Errorf("model %q: inference failed: %w", model, err)
}

// unknownModelError says which models queue q serves.
func unknownModelError(name string, q *queue) error {
	names := make([]string, 0, len(q.models))
	for n := range q.models {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return fmt.Errorf("unknown model %q: queue %s serves %v", name, q.name, names)
}

// runningDetail is the detail of the running progress event.
func runningDetail(items int) string {
	return "running: batch of " + strconv.Itoa(items)
}
