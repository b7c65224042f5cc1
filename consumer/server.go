package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/trace"
)

// Batcher takes one item into a model's dynamic batcher; Done is called
// once with its result. *runtime.Batcher satisfies it.
type Batcher interface {
	Enqueue(ctx context.Context, r *runtime.Request) error
}

// Store stores a result record durably (broker or spool) before it
// returns. *results.Store satisfies it.
type Store interface {
	Put(ctx context.Context, e results.Entry) error
	Get(taskID string) ([]byte, bool)
}

// Broker is what the consumer needs of the broker connection. *mq.Conn
// satisfies it.
type Broker interface {
	EventSender
	NewPoller(cfg mq.PollerConfig) (*mq.Poller, error)
	Sender() *mq.Sender
	QueuesInfo(ctx context.Context, filter string) (map[string]mq.QueueInfo, error)
}

// Model is one served model as the consumer sees it.
type Model struct {
	Config  models.Model
	Info    tensor.ModelInfo
	Batcher Batcher
	// Version is reported as model_version in results ("1" when empty).
	Version string
	met     *modelMetrics // set by New

	// MaxInFlight is how many of its tasks may be taken and unsettled at
	// once, from its placement (runtime.Placement.MaxInFlight: 4 full
	// batches per run loop on every device); 0 derives it from the config
	// alone.
	MaxInFlight int
}

// Config configures a Server.
type Config struct {
	Broker Broker
	Store  Store
	Models []Model
	// Journal counts crash attempts; nil keeps a memory-only one.
	Journal *Journal
	Metrics *Metrics
	Logger  *slog.Logger
	// Worker names this process in result records (host name by default
	// in cmd).
	Worker string
	// AlertWebhook, when set, receives a POST per dead-lettered task.
	AlertWebhook        string
	AlertWebhookTimeout time.Duration
	// IntakeWorkers decode tasks in parallel (default 4).
	IntakeWorkers int
	// Writers store results and settle messages in parallel; a store can
	// block on broker retries, so there are many (default 128).
	Writers int
	// PollMaxItems caps one stream poll (default 128); MaxInFlight caps
	// messages taken and not settled per queue (default 4 x max batch x
	// instances, at least 256).
	PollMaxItems int
	MaxInFlight  int
	// ProgressBuffer bounds queued progress events (default 4096).
	ProgressBuffer int
	// DrainTimeout bounds the wait for in-flight work after Run's ctx ends
	// (the --shutdown-grace; default 30 s).
	DrainTimeout time.Duration
	// QueryGroup is the group every queue's query subscription joins, so
	// that the servers of a queue share its queries, each answered once
	// (default DefaultQueryGroup). NoQueries turns the query responder off.
	QueryGroup string
	NoQueries  bool
	// TracerProvider, when set, traces tasks and sync requests (see
	// SpanReceive); nil or a no-op provider: no tracing, no cost.
	TracerProvider trace.TracerProvider
	// DepthEvery is how often inferq_queue_depth is refreshed (default 5 s).
	DepthEvery time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.IntakeWorkers <= 0 {
		c.IntakeWorkers = 4
	}
	if c.Writers <= 0 {
		c.Writers = 128
	}
	if c.PollMaxItems <= 0 {
		c.PollMaxItems = 128
	}
	if c.ProgressBuffer <= 0 {
		c.ProgressBuffer = 4096
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.DepthEvery <= 0 {
		c.DepthEvery = 5 * time.Second
	}
	if c.Worker == "" {
		c.Worker = "inferq"
	}
	if c.QueryGroup == "" {
		c.QueryGroup = DefaultQueryGroup
	}
}

// Validate reports what is missing.
func (c *Config) Validate() error {
	switch {
	case c.Broker == nil:
		return errors.New("consumer: no broker")
	case c.Store == nil:
		return errors.New("consumer: no result store")
	case len(c.Models) == 0:
		return errors.New("consumer: no model")
	}
	for _, m := range c.Models {
		if m.Batcher == nil {
			return fmt.Errorf("consumer: model %q: no batcher", m.Config.Name)
		}
	}
	return nil
}

// queue is one consumed queue and the models routed from it by task_name.
type queue struct {
	name   string
	models map[string]*Model
	first  *Model      // the first model configured on the queue
	limits task.Limits // the loosest of its models', for the envelope
	poller *mq.Poller
}

// Server consumes every configured queue. Create it with New, start it with
// Run; its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	met     *Metrics
	sender  *mq.Sender
	journal *Journal
	pub     *publisher
	alert   *alerter
	trace   tracing
	queues  []*queue

	intake chan *delivery
	write  chan *job

	inflight atomic.Int64
}

// delivery is a message on its way through intake.
type delivery struct {
	q        *queue
	msg      *mq.Message
	received time.Time
}

// job is a task whose inference ended (or that never ran), on its way to
// the writers.
type job struct {
	q        *queue
	model    *Model
	msg      *mq.Message
	task     *task.Task
	received time.Time
	enqueued time.Time
	attempt  int
	result   runtime.ItemResult
	// status/err set when the task never ran (expired, cancelled, bad
	// input): the writer stores the record and settles without retry.
	final    task.Status
	finalErr error
	outcome  string
	dlq      bool  // a final failure that goes to the dead letter queue
	span     *span // nil when tracing is off
}

// New checks cfg and builds the per-queue routing.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, met: cfg.Metrics, sender: cfg.Broker.Sender(), journal: cfg.Journal}
	if s.met == nil {
		return nil, errors.New("consumer: no metrics")
	}
	if s.journal == nil {
		s.journal, _ = OpenJournal("")
	}
	s.pub = newPublisher(cfg.Broker, cfg.ProgressBuffer, s.met.ProgressDrops.Inc, s.log)
	s.alert = newAlerter(s.pub, cfg.AlertWebhook, cfg.AlertWebhookTimeout, s.met.AlertDrops.Inc, s.log)
	s.trace = newTracing(cfg.TracerProvider)
	byQueue := map[string]*queue{}
	maxInFlight := 256
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.Version == "" {
			m.Version = "1"
		}
		m.met = s.met.forModel(m.Config.Name)
		q := byQueue[m.Config.Queue]
		if q == nil {
			q = &queue{name: m.Config.Queue, models: map[string]*Model{}}
			byQueue[q.name] = q
			s.queues = append(s.queues, q)
		}
		if _, dup := q.models[m.Config.Name]; dup {
			return nil, fmt.Errorf("consumer: model %q configured twice", m.Config.Name)
		}
		q.models[m.Config.Name] = m
		if q.first == nil {
			q.first = m
		}
		q.limits.MaxBodyBytes = max(q.limits.MaxBodyBytes, int64(m.Config.Limits.MaxBodyBytes))
		q.limits.MaxTensorElements = max(q.limits.MaxTensorElements, m.Config.Limits.MaxTensorElements)
		if m.MaxInFlight > 0 {
			maxInFlight = max(maxInFlight, m.MaxInFlight)
		} else {
			maxInFlight = max(maxInFlight, 4*m.Config.Batching.MaxBatchSize*m.Config.Instances*m.Config.Concurrency)
		}
	}
	if cfg.MaxInFlight <= 0 {
		s.cfg.MaxInFlight = maxInFlight
	}
	s.intake = make(chan *delivery, s.cfg.MaxInFlight)
	s.write = make(chan *job, s.cfg.MaxInFlight)
	for _, q := range s.queues {
		q := q
		p, err := cfg.Broker.NewPoller(mq.PollerConfig{
			Channel:      q.name,
			Deliver:      func(ctx context.Context, batch []*mq.Message) error { return s.deliver(ctx, q, batch) },
			MaxItems:     s.cfg.PollMaxItems,
			MaxInFlight:  s.cfg.MaxInFlight,
			DrainTimeout: s.cfg.DrainTimeout,
			OnState:      func(up bool, err error) { s.brokerState(q.name, up, err) },
			OnSettleError: func(err error) {
				s.met.SettleErrors.Inc()
				s.log.Warn("settle failed", "queue", q.name, "err", err)
			},
		})
		if err != nil {
			return nil, fmt.Errorf("consumer: poller for %s: %w", q.name, err)
		}
		q.poller = p
	}
	return s, nil
}

// Ready reports whether every queue's poller reaches the broker.
func (s *Server) Ready() bool {
	for _, q := range s.queues {
		if !q.poller.Up() {
			return false
		}
	}
	return true
}

// PollerStats reports each queue's poller counters, by queue.
func (s *Server) PollerStats() map[string]mq.PollerStats {
	out := make(map[string]mq.PollerStats, len(s.queues))
	for _, q := range s.queues {
		out[q.name] = q.poller.Stats()
	}
	return out
}

// Inflight is the number of messages taken and not yet settled.
func (s *Server) Inflight() int64 { return s.inflight.Load() }

func (s *Server) brokerState(queue string, up bool, err error) {
	if up {
		s.met.BrokerUp.Set(1)
		s.log.Info("broker reachable", "queue", queue)
		return
	}
	s.met.BrokerUp.Set(0)
	s.log.Warn("broker unreachable; retrying", "queue", queue, "err", err)
}

// Run consumes until ctx ends, then stops polling, lets what was taken
// finish within DrainTimeout (the pollers give back what is still unsettled
// after it, uncounted), and returns.
func (s *Server) Run(ctx context.Context) error {
	// Stages behind the pollers outlive ctx so that taken work can finish.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var stages sync.WaitGroup
	stages.Add(2)
	go func() { defer stages.Done(); s.pub.run(work) }()
	go func() { defer stages.Done(); s.sampleDepth(ctx) }()
	var intakeWG, writeWG sync.WaitGroup
	for range s.cfg.IntakeWorkers {
		intakeWG.Add(1)
		go func() { defer intakeWG.Done(); s.intakeLoop(work) }()
	}
	for range s.cfg.Writers {
		writeWG.Add(1)
		go func() { defer writeWG.Done(); s.writeLoop(work) }()
	}
	var pollers sync.WaitGroup
	errs := make(chan error, len(s.queues))
	for _, q := range s.queues {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			if err := q.poller.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("consumer: poller %s: %w", q.name, err)
			}
		}()
	}
	waitQueries := s.startQueries(ctx)
	s.log.Info("consuming", "queues", len(s.queues), "models", len(s.cfg.Models))
	<-ctx.Done()
	s.log.Info("stopping: no new tasks; finishing what was taken", "inflight", s.inflight.Load(), "grace", s.cfg.DrainTimeout)
	// Pollers return once everything they delivered is settled, or after
	// DrainTimeout with the rest given back to the queue.
	pollers.Wait()
	waitQueries()
	stopWork()
	intakeWG.Wait()
	writeWG.Wait()
	s.alert.wait()
	stages.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// sampleDepth keeps inferq_queue_depth current for every served queue
// until ctx ends (one QueuesInfo call for all of them: ~10 ms on a broker
// with thousands of channels).
func (s *Server) sampleDepth(ctx context.Context) {
	names := make([]string, len(s.queues))
	for i, q := range s.queues {
		names[i] = q.name
	}
	filter := strings.Join(names, ";")
	t := time.NewTicker(s.cfg.DepthEvery)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.DepthEvery)
		info, err := s.cfg.Broker.QueuesInfo(qctx, filter)
		cancel()
		if err == nil {
			for _, n := range names {
				s.met.QueueDepth.WithLabelValues(n).Set(float64(info[mq.InfoName(n)].Waiting))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deliver hands a polled batch to the intake workers (backpressure: it
// blocks while they are behind).
func (s *Server) deliver(ctx context.Context, q *queue, batch []*mq.Message) error {
	now := s.cfg.Now()
	for _, m := range batch {
		s.inflight.Add(1)
		select {
		case s.intake <- &delivery{q: q, msg: m, received: now}:
		case <-ctx.Done():
			s.inflight.Add(-1)
			return ctx.Err()
		}
	}
	return nil
}

func (s *Server) intakeLoop(ctx context.Context) {
	for {
		select {
		case d := <-s.intake:
			s.take(ctx, d)
		case <-ctx.Done():
			// Work stops only after the pollers drained or gave up:
			// whatever is left was given back with their streams.
			for {
				select {
				case d := <-s.intake:
					s.inflight.Add(-1)
					_ = d.msg.NAck()
				default:
					return
				}
			}
		}
	}
}

// take decodes one message and sends it on: to its model's batcher, or
// straight to a writer when it must not run.
func (s *Server) take(ctx context.Context, d *delivery) {
	defer func() {
		if r := recover(); r != nil {
			// A decoder bug must not kill the worker: the message is
			// unprocessable, and the stack goes to the log.
			s.log.Error("panic in intake", "msg", d.msg, "panic", r, "stack", string(debug.Stack()))
			s.unprocessable(ctx, d, fmt.Errorf("internal error decoding the task: %v", r))
		}
	}()
	m := d.msg
	t, err := task.Parse(m.Body, m.Tags, d.q.limits)
	if t == nil {
		// Undecodable: no task id to answer to.
		s.unprocessable(ctx, d, err)
		return
	}
	model := d.q.models[t.Name]
	if model == nil && errors.Is(err, task.ErrTooLarge) {
		// Too large to read its task_name: its queue's (first) model
		// answers for it, with the size error.
		model = d.q.first
	}
	j := &job{q: d.q, model: model, msg: m, task: t, received: d.received}
	j.attempt = s.attempt(t, m)
	if model == nil {
		s.unknownModel(ctx, d, j)
		return
	}
	model.met.inflight.Inc()
	j.span = s.trace.task(d.q.name, m.ID, t, model.Config.Name, j.attempt, d.received)
	if !t.CreatedAt.IsZero() {
		model.met.queue.Observe(d.received.Sub(t.CreatedAt).Seconds())
	}
	if err != nil {
		s.finish(ctx, j, task.StatusFailure, limitHint(model, fmt.Errorf("task %s: %w", t.ID, err)), OutcomeBadInput)
		return
	}
	deadline, hasDeadline := t.Deadline(d.received)
	if !hasDeadline && model.Config.Timeout > 0 {
		base := t.CreatedAt
		if base.IsZero() {
			base = d.received
		}
		deadline, hasDeadline = base.Add(model.Config.Timeout.D()), true
	}
	if hasDeadline && !d.received.Before(deadline) {
		s.finish(ctx, j, task.StatusFailure, fmt.Errorf("deadline exceeded: the task expired at %s, before inference started", task.FormatTime(deadline)), OutcomeExpired)
		return
	}
	if s.cancelled(t.ID) {
		s.finish(ctx, j, task.StatusCancelled, errors.New("cancelled before inference started"), OutcomeCancelled)
		return
	}
	lim := task.Limits{MaxBodyBytes: int64(model.Config.Limits.MaxBodyBytes), MaxTensorElements: model.Config.Limits.MaxTensorElements}
	if int64(len(m.Body)) > lim.MaxBodyBytes {
		s.finish(ctx, j, task.StatusFailure, fmt.Errorf("task %s: body of %d bytes is over model %q's limit of %d bytes (limits.max_body_bytes)",
			t.ID, len(m.Body), model.Config.Name, lim.MaxBodyBytes), OutcomeBadInput)
		return
	}
	inputs, err := t.Inputs(model.Info, lim)
	if err != nil {
		s.finish(ctx, j, task.StatusFailure, limitHint(model, fmt.Errorf("model %q: %w", model.Config.Name, err)), OutcomeBadInput)
		return
	}
	crashes := s.journal.Crashes(m.ID)
	if limit := maxAttempts(model, m); crashes > 0 && j.attempt > limit {
		// Every attempt left ended with the process: this one must not run.
		j.attempt = limit
		j.dlq = true
		s.finish(ctx, j, task.StatusFailure, fmt.Errorf("worker lost during inference: the process ended during %d attempt(s) of this task; attempts exhausted (%d)", crashes, limit), OutcomeFailure)
		return
	}
	s.pub.progress(d.q.name, t.ID, PctReceived, "received")
	j.enqueued = s.cfg.Now()
	j.span.next(SpanBatch)
	var req *runtime.Request
	req = &runtime.Request{
		Item: runtime.Item{Inputs: inputs, Outputs: t.OutputNames()},
		// A task that was in flight when a process died runs alone, so
		// the tasks that shared its batch do not share its fate.
		Alone: crashes > 0,
		// The attempt is recorded when the run starts: a crash then
		// counts against the tasks that were running, not those queued.
		Started: func() {
			if err := s.journal.Start(m.ID); err != nil {
				s.log.Error("attempt journal write failed; a crash during this task would not be counted", "err", err)
			}
			s.pub.progress(d.q.name, t.ID, PctRunning, runningDetail(req.BatchItems))
			j.span.infer(req.BatchItems)
		},
	}
	// The batcher does not run an item whose ctx ended before its run.
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if hasDeadline {
		rctx, cancel = context.WithDeadline(ctx, deadline)
	}
	req.Done = func(r runtime.ItemResult) {
		cancel()
		// The run is over: a crash from now on is not this task's doing.
		s.journal.Done(m.ID)
		j.span.endStage(r.Err)
		j.result = r
		s.toWriter(j)
	}
	if err := model.Batcher.Enqueue(rctx, req); err != nil {
		cancel()
		j.result = runtime.ItemResult{Err: fmt.Errorf("enqueue for inference: %w", err)}
		s.toWriter(j)
	}
}

// limitHint names the config fields behind a size error.
func limitHint(m *Model, err error) error {
	if !errors.Is(err, task.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w (model %q: limits.max_body_bytes %d, limits.max_tensor_elements %d)",
		err, m.Config.Name, m.Config.Limits.MaxBodyBytes, m.Config.Limits.MaxTensorElements)
}

// toWriter hands a job to the writers. It blocks while they are all busy,
// which holds the batcher back: backpressure, not loss.
func (s *Server) toWriter(j *job) { s.write <- j }

// attempt is this delivery's attempt number: the attempt tag of a delayed
// resend, plus the broker's redeliveries after NAck, plus the attempts that
// ended with a crash of the process.
func (s *Server) attempt(t *task.Task, m *mq.Message) int {
	a := max(t.Attempt, 1)
	if m.ReceiveCount > 1 {
		a += m.ReceiveCount - 1
	}
	return a + s.journal.Crashes(m.ID)
}

// maxAttempts is max_retries + 1, capped by the producer's MaxReceiveCount.
func maxAttempts(model *Model, m *mq.Message) int {
	n := model.Config.Retries.MaxRetries + 1
	if m.MaxReceiveCount > 0 && m.MaxReceiveCount < n {
		n = m.MaxReceiveCount
	}
	return n
}

// cancelled reports whether the task's stored record reads CANCELLED.
func (s *Server) cancelled(taskID string) bool {
	body, ok := s.cfg.Store.Get(taskID)
	if !ok {
		return false
	}
	r, err := task.ParseRecord(body)
	return err == nil && r.Status == task.StatusCancelled
}

// finish sends a task that must not run to a writer with its final status.
func (s *Server) finish(ctx context.Context, j *job, st task.Status, err error, outcome string) {
	j.final, j.finalErr, j.outcome = st, err, outcome
	s.toWriter(j)
}

// unprocessable forwards a message that cannot be decoded, raw, to the
// unprocessable queue of its queue's models, then acks it; a failed forward
// NAcks it so nothing is lost.
func (s *Server) unprocessable(ctx context.Context, d *delivery, cause error) {
	defer s.inflight.Add(-1)
	dest := d.q.first.Config.UnprocessableQueue
	s.met.Unprocessable.Inc()
	s.met.Tasks.WithLabelValues("", OutcomeUnprocessable).Inc()
	s.log.Warn("unprocessable message", "queue", d.q.name, "msg", d.msg, "to", dest, "err", cause)
	if err := s.sender.Forward(ctx, d.msg, dest, map[string]string{mq.TagError: errString(cause), mq.TagOrigin: d.q.name}); err != nil {
		s.log.Error("forward to unprocessable queue failed; nacking", "msg", d.msg, "err", err)
		_ = d.msg.NAck()
	}
}

// unknownModel stores a FAILURE record for a task whose task_name names no
// model of its queue and forwards the message to the unprocessable queue.
func (s *Server) unknownModel(ctx context.Context, d *delivery, j *job) {
	names := make([]string, 0, len(d.q.models))
	for n := range d.q.models {
		names = append(names, n)
	}
	err := fmt.Errorf("unknown model %q: queue %s serves %v", j.task.Name, d.q.name, names)
	rec := s.record(j, task.StatusFailure, err)
	if perr := s.put(ctx, j, rec); perr != nil {
		s.log.Error("storing the unknown-model failure record failed", "task_id", j.task.ID, "err", perr)
	}
	s.met.Tasks.WithLabelValues("", OutcomeUnknownModel).Inc()
	s.unprocessable(ctx, d, err)
}

func (s *Server) writeLoop(ctx context.Context) {
	for {
		select {
		case j := <-s.write:
			s.settle(ctx, j)
		case <-ctx.Done():
			for {
				select {
				case j := <-s.write:
					s.settle(ctx, j)
				default:
					return
				}
			}
		}
	}
}

// settle stores the job's record and settles its message: ack on success
// and on final states, a delayed resend (or NAck) for a retry, the dead
// letter queue after the last attempt.
func (s *Server) settle(ctx context.Context, j *job) {
	defer func() {
		s.inflight.Add(-1)
		j.model.met.inflight.Dec()
	}()
	started := s.cfg.Now()
	if j.span != nil {
		j.span.next(SpanStore)
		defer func() { j.span.end(j.outcome, cmp.Or(j.finalErr, j.result.Err)) }()
	}
	if !j.enqueued.IsZero() {
		j.model.met.infer.Observe(started.Sub(j.enqueued).Seconds())
	}
	switch {
	case j.final != "":
		s.fail(ctx, j, j.final, j.finalErr, j.outcome, j.dlq || j.outcome == OutcomeBadInput)
	case j.result.Err == nil:
		rec := s.record(j, task.StatusSuccess, nil)
		if err := s.put(ctx, j, rec); err != nil {
			s.log.Error("store failed; nacking so the task is not lost", "task_id", j.task.ID, "err", err)
			_ = j.msg.NAck()
			return
		}
		j.model.met.store.Observe(s.cfg.Now().Sub(started).Seconds())
		if err := j.msg.Ack(); err != nil {
			s.log.Warn("ack failed after the result was stored", "task_id", j.task.ID, "err", err)
		}
		j.model.met.success.Inc()
		s.pub.progress(j.q.name, j.task.ID, PctStored, "stored")
	case errors.Is(j.result.Err, runtime.ErrInvalidInput):
		s.fail(ctx, j, task.StatusFailure, j.result.Err, OutcomeBadInput, true)
	case errors.Is(j.result.Err, context.DeadlineExceeded):
		s.fail(ctx, j, task.StatusFailure, fmt.Errorf("deadline exceeded before inference started: %w", j.result.Err), OutcomeExpired, false)
	default:
		s.failed(ctx, j, j.result.Err)
	}
}

// failed handles an inference failure: a retry while attempts remain, the
// dead letter queue after the last.
func (s *Server) failed(ctx context.Context, j *job, cause error) {
	limit := maxAttempts(j.model, j.msg)
	if j.attempt >= limit {
		s.fail(ctx, j, task.StatusFailure, fmt.Errorf("attempt %d of %d: %w", j.attempt, limit, cause), OutcomeFailure, true)
		return
	}
	name := j.model.Config.Name
	s.met.Retries.Inc()
	s.met.Tasks.WithLabelValues(name, OutcomeRetry).Inc()
	s.pub.progress(j.q.name, j.task.ID, PctRetrying, fmt.Sprintf("retrying: attempt %d of %d failed: %v", j.attempt, limit, cause))
	r := j.model.Config.Retries
	if r.BackoffInitial <= 0 {
		if err := j.msg.NAck(); err != nil {
			s.log.Warn("nack for retry failed", "task_id", j.task.ID, "err", err)
		}
		return
	}
	delay := backoff(r.BackoffInitial.D(), r.BackoffMax.D(), j.attempt)
	s.log.Info("retrying task", "task_id", j.task.ID, "model", name, "attempt", j.attempt, "of", limit, "delay", delay, "err", cause)
	if err := s.sender.Retry(ctx, j.msg, delay, j.attempt+1); err != nil {
		s.log.Warn("delayed resend failed; nacking instead", "task_id", j.task.ID, "err", err)
		_ = j.msg.NAck()
	}
}

// backoff is the delay before attempt+1: exponential from initial, capped,
// with full jitter over its upper half.
func backoff(initial, maxDelay time.Duration, attempt int) time.Duration {
	d := initial
	for i := 1; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// fail stores a final record and settles the message: to the dead letter
// queue when dlq is set (with the alert), else an ack.
func (s *Server) fail(ctx context.Context, j *job, st task.Status, cause error, outcome string, dlq bool) {
	name := j.model.Config.Name
	rec := s.record(j, st, cause)
	if err := s.put(ctx, j, rec); err != nil {
		s.log.Error("store of a final record failed; nacking so the task is not lost", "task_id", j.task.ID, "err", err)
		_ = j.msg.NAck()
		return
	}
	s.met.Tasks.WithLabelValues(name, outcome).Inc()
	s.pub.progress(j.q.name, j.task.ID, PctFailed, "failed: "+errString(cause))
	if !dlq {
		if err := j.msg.Ack(); err != nil {
			s.log.Warn("ack failed after the record was stored", "task_id", j.task.ID, "err", err)
		}
		return
	}
	dest := j.msg.MaxReceiveQueue
	if dest == "" || dest == j.q.name {
		dest = j.model.Config.DLQQueue
	}
	s.log.Warn("task failed for good; moving it to the dead letter queue", "task_id", j.task.ID, "model", name, "attempts", j.attempt, "dlq", dest, "err", cause)
	if err := s.sender.DeadLetter(ctx, j.msg, dest, errString(cause), j.attempt); err != nil {
		s.log.Error("move to the dead letter queue failed; nacking", "task_id", j.task.ID, "err", err)
		_ = j.msg.NAck()
		return
	}
	s.met.DLQ.Inc()
	s.alert.fire(Alert{TaskID: j.task.ID, Model: name, Queue: j.q.name, DLQ: dest, Error: errString(cause),
		Attempts: j.attempt, Time: task.FormatTime(s.cfg.Now())})
}

// record builds the result record of a job.
func (s *Server) record(j *job, st task.Status, cause error) *task.Record {
	rec := &task.Record{
		TaskID:      j.task.ID,
		Status:      st,
		CreatedAt:   j.task.CreatedAt,
		CompletedAt: s.cfg.Now(),
		Attempts:    j.attempt,
		Worker:      s.cfg.Worker,
	}
	if cause != nil {
		rec.Error = cause.Error()
	}
	if st == task.StatusSuccess {
		resp := task.NewInferResponse(j.model.Config.Name, j.model.Version, j.result.Outputs, j.task)
		result, bin, err := resp.Encode()
		if err != nil {
			rec.Status, rec.Error = task.StatusFailure, "encoding the result: "+err.Error()
		} else {
			rec.Result, rec.Binary = result, bin
		}
	}
	return rec
}

// put stores rec for j's task.
func (s *Server) put(ctx context.Context, j *job, rec *task.Record) error {
	body, _ := rec.Encode()
	e := results.Entry{TaskID: j.task.ID, Status: string(rec.Status), Terminal: rec.Status.Terminal(),
		Body: body, ReplyTo: j.task.ReplyTo, CreatedAt: j.task.CreatedAt}
	if j.model != nil && len(body) > j.model.Config.Result.MaxResultBytes {
		sub := *rec
		sub.Result, sub.Binary, sub.ResultRef = nil, nil, "/v1/tasks/"+j.task.ID
		e.Substitute, _ = sub.Encode()
	}
	return s.cfg.Store.Put(ctx, e)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
