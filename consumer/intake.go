package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/logclip"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Intake: a queued message's path from the poller (deliver, the poller's
// Deliver callback) through the intake workers (take) and admission to its
// model's batcher; what must not run goes straight to the writers
// (settle.go).
//
// Admission: the one step that turns what arrived (a queued task, a sync
// query, an Open Inference Protocol infer request) into a runnable request
// or a verdict, with the same limits and the same error texts on every
// path. It reads the body, the tags and a model table, and writes nothing:
// what happens to a refused request (a record, the unprocessable queue, an
// HTTP status) is its caller's business.

// deliver hands a polled batch to the intake workers (backpressure: it
// blocks while they are behind) and returns how many it handed over: those
// are intake's to settle. When ctx ends first, refuse gives back the
// rest.
func (s *Server) deliver(ctx context.Context, q *queue, ch *channel, batch []*mq.Message) (int, error) {
	q.arriving.Add(1)
	defer q.arrived()
	returned := ch.returnedTo(batch)
	if n := count(returned); n > 0 {
		s.log.Info("messages another consumer gave back run alone", "queue", q.name, "messages", n, "batch", len(batch))
	}
	for i, m := range batch {
		if err := s.waitQueueRoom(ctx, q); err != nil {
			return i, err
		}
		s.inflight.Add(1)
		q.undecided.Add(1)
		q.arriving.Add(1)
		select {
		case s.intake <- &delivery{q: q, msg: m, received: s.cfg.Now(), returned: returned[i]}:
		case <-ctx.Done():
			s.inflight.Add(-1)
			q.decided()
			return i, ctx.Err()
		}
	}
	return len(batch), nil
}

// returnedTo tells which messages of a batch came back from another
// consumer, and records the batch's sequences. A queue delivers in
// sequence order, so a first delivery (ReceiveCount 1) with a sequence
// below one this process already received was held by another consumer
// that let it go: most often one that died running it, before the fleet
// heard of the crash (its report comes when it restarts). Such a message
// runs alone, so that a task that kills its workers does not take its
// batch mates with it on every replica in turn; it costs nothing more and
// counts no crash. With one poller per queue (today), batches come in
// order and a normal message is never taken for a returned one. Sequences
// are a channel's: each shard has its own.
func (ch *channel) returnedTo(batch []*mq.Message) []bool {
	before := ch.seen.Load()
	out := make([]bool, len(batch))
	top := before
	for i, m := range batch {
		out[i] = m.Sequence > 0 && m.Sequence < before && m.ReceiveCount <= 1
		top = max(top, m.Sequence)
	}
	for cur := before; top > cur && !ch.seen.CompareAndSwap(cur, top); cur = ch.seen.Load() {
	}
	return out
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func (s *Server) intakeLoop(ctx context.Context) {
	for {
		select {
		case d := <-s.intake:
			s.take(ctx, d)
		case <-ctx.Done():
			// Work stops only after the pollers drained or gave up:
			// whatever is left never ran, and goes back uncounted
			// (decide; the pollers' closed streams gave it back).
			for {
				select {
				case d := <-s.intake:
					d.q.decided()
					j := &job{s: s, q: d.q, msg: d.msg, received: d.received}
					j.req.Result.Err = context.Canceled
					s.settle(ctx, j)
				default:
					return
				}
			}
		}
	}
}

// take admits one message and sends it on: to its model's batcher, or
// straight to a writer when it must not run.
func (s *Server) take(ctx context.Context, d *delivery) {
	j := &job{s: s, q: d.q, msg: d.msg, received: d.received, returned: d.returned}
	var counted *Model // whose inflight gauge this job holds
	// Admitted (a pending request counted, or settled without a run):
	// out of the queue's undecided count.
	defer d.q.decided()
	defer func() {
		if r := recover(); r != nil {
			// A decoder bug must not kill the worker: the message is
			// unprocessable, and the stack goes to the log.
			s.log.Error("panic in intake", "msg", d.msg, "panic", r, "stack", logclip.Whole(debug.Stack()))
			*j = job{s: s, q: d.q, msg: d.msg, received: d.received}
			j.adm = admitted{verdict: admitUndecodable, err: fmt.Errorf("internal error decoding the task: %v", r), model: counted}
			s.write <- j
		}
	}()
	j.adm = admit(admission{from: fromQueue, body: d.msg.Body, tags: d.msg.Tags, deadLetter: d.msg.MaxReceiveQueue,
		received: d.received, records: s.cfg.Store, traced: s.trace.tr != nil}, d.q.table.Load())
	t, m := j.adm.task, j.adm.model
	if t != nil {
		s.countCrashes(j)
	}
	if m == nil {
		s.write <- j
		return
	}
	m.met.inflight.Inc()
	counted = m
	j.root = s.trace.taskRoot(d.q.name, d.msg.ID, &j.adm, j.attempt, d.received)
	if !t.CreatedAt.IsZero() {
		m.met.queue.Observe(d.received.Sub(t.CreatedAt).Seconds())
	}
	if j.adm.verdict != admitRun {
		s.write <- j
		return
	}
	if s.spent(j) {
		s.write <- j
		return
	}
	if j.crashes > 0 && s.fleet.HoldFor() > 0 {
		s.log.Info("task that crashed a worker held before it runs again", "task_id", t.ID, "msg", j.msg,
			"crashes", j.crashes, "hold", s.fleet.HoldFor())
		s.holds.Add(1)
		go s.holdThenRun(ctx, j)
		return
	}
	s.run(ctx, j)
}

// countCrashes sets j's crash count (this process's journal's, or the
// fleet's) and its attempt number.
func (s *Server) countCrashes(j *job) {
	j.crashes = s.fleet.Crashes(j.msg.ID, s.journal.Crashes(j.msg.ID))
	j.attempt = attempt(j.adm.task, j.msg, j.crashes)
}

// spent reports, and marks, a job whose attempts are spent: every one
// left ended with a process, or its last failed (the FAILURE is stored)
// and the move to the dead letter queue did not complete. It must not run
// again.
func (s *Server) spent(j *job) bool {
	limit := maxAttempts(j.adm.model, j.msg)
	j.spent = j.attempt > limit && (j.crashes > 0 || s.storedStatus(j.adm.task.ID) == task.StatusFailure)
	return j.spent
}

// holdThenRun runs a job with crashes after the crash hold
// (Config.Crash.Hold), counting its crashes again first: the replica that
// died running it last has had the hold to restart and report. A stop
// (Run's ctx) during the hold gives the message back uncounted.
func (s *Server) holdThenRun(ctx context.Context, j *job) {
	defer s.holds.Done()
	t := time.NewTimer(s.fleet.HoldFor())
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stopping:
		s.giveBack(ctx, j)
		return
	case <-ctx.Done():
		s.giveBack(ctx, j)
		return
	}
	s.countCrashes(j)
	if s.spent(j) {
		s.write <- j
		return
	}
	s.run(ctx, j)
}

// giveBack settles a job that never ran: back to the queue uncounted.
func (s *Server) giveBack(ctx context.Context, j *job) {
	j.req.Result.Err = context.Canceled
	select {
	case s.write <- j:
	case <-ctx.Done():
		s.settle(ctx, j) // the writers are stopping
	}
}

// run sends an admitted job to its model's batcher.
func (s *Server) run(ctx context.Context, j *job) {
	t, m := j.adm.task, j.adm.model
	s.pub.progress(j.q.name, t.ID, PctReceived, "received")
	j.enqueued = s.cfg.Now()
	j.stage = s.trace.stage(j.root, nil, SpanBatch)
	j.req = batch.Request{
		Item: batch.Item{Inputs: j.adm.inputs, Outputs: j.adm.outputs},
		// A task that was in flight when a process died runs alone, so
		// the tasks that shared its batch do not share its fate; so does
		// one another consumer gave back (returnedTo), which may be that.
		Alone: j.crashes > 0 || j.returned,
		Level: j.adm.level,
		Owner: j,
	}
	// The batcher does not run an item whose ctx ended before its run:
	// its deadline, or default_queue_timeout from now.
	var rctx context.Context
	rctx, j.cancel = m.pol.queueCtx(ctx, j.adm.deadline, j.enqueued)
	m.pol.take()
	if err := m.Batcher.Enqueue(rctx, &j.req); err != nil {
		m.pol.release()
		j.cancel()
		j.req.Result.Err = fmt.Errorf("enqueue for inference: %w", err)
		endSpan(j.stage, j.req.Result.Err)
		j.stage = nil
		s.write <- j
	}
}

func noCancel() {}

// attempt is a delivery's attempt number: the attempt tag of a delayed
// resend, plus the broker's redeliveries after NAck, plus the attempts that
// ended with a crash of the process.
func attempt(t *task.Task, m *mq.Message, crashes int) int {
	a := max(t.Attempt, 1)
	if m.ReceiveCount > 1 {
		a += m.ReceiveCount - 1
	}
	return a + crashes
}

// maxAttempts is max_retries + 1, capped by the producer's MaxReceiveCount.
func maxAttempts(model *Model, m *mq.Message) int {
	n := model.Config.Retries.MaxRetries + 1
	if m.MaxReceiveCount > 0 && m.MaxReceiveCount < n {
		n = m.MaxReceiveCount
	}
	return n
}

// source is where a request came from.
type source uint8

const (
	fromQueue source = iota // a queued task
	fromQuery               // a KubeMQ sync query
	fromHTTP                // an Open Inference Protocol infer request
)

// noun names a request of the source in errors.
func (s source) noun() string {
	switch s {
	case fromQuery:
		return "query"
	case fromHTTP:
		return "request"
	}
	return "task"
}

// verdict is admission's decision: run, or why not.
type verdict uint8

const (
	admitRun          verdict = iota
	admitUndecodable          // not a request at all: nothing to answer it by
	admitUnknownModel         // task_name (or the URL) names no model served here
	admitBadInput             // does not fit the model or the format
	admitTooLarge             // over the model's body or tensor limits
	admitExpired              // past its deadline before it ran
	admitCancelled            // its record reads CANCELLED
	// admitBadName: its id, reply_to or dead letter queue must not name
	// anything (task.CheckName). Like an undecodable message it has no
	// identity to answer by: no record, the unprocessable queue.
	admitBadName
)

// label is the verdict's outcome label in the metrics.
func (v verdict) label() string {
	switch v {
	case admitUndecodable, admitBadName:
		return OutcomeUnprocessable
	case admitUnknownModel:
		return OutcomeUnknownModel
	case admitBadInput, admitTooLarge:
		return OutcomeBadInput
	case admitExpired:
		return OutcomeExpired
	case admitCancelled:
		return OutcomeCancelled
	}
	return ""
}

// modelTable is the models a request may name: a queue's (by task_name),
// or every served model (HTTP, by URL).
type modelTable struct {
	where  string // "queue <name>" or "this server", for errors
	byName map[string]*Model
	order  []*Model    // as added
	first  *Model      // the first configured: it answers a body too large to name one
	limits task.Limits // the loosest of its models', for the envelope
}

func newModelTable(where string) *modelTable {
	return &modelTable{where: where, byName: map[string]*Model{}}
}

func (mt *modelTable) add(m *Model) error {
	if _, dup := mt.byName[m.Config.Name]; dup {
		return fmt.Errorf("consumer: model %q configured twice", m.Config.Name)
	}
	mt.byName[m.Config.Name] = m
	mt.order = append(mt.order, m)
	if mt.first == nil {
		mt.first = m
	}
	// A model without a limit has the default one, which counts here.
	elems := m.Config.Limits.MaxTensorElements
	if elems <= 0 {
		elems = task.DefaultMaxTensorElements
	}
	mt.limits.MaxBodyBytes = max(mt.limits.MaxBodyBytes, bodyLimit(m))
	mt.limits.MaxTensorElements = max(mt.limits.MaxTensorElements, elems)
	return nil
}

// unknown is the error for a name the table lacks.
func (mt *modelTable) unknown(name string) error {
	names := make([]string, 0, len(mt.byName))
	for n := range mt.byName {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return fmt.Errorf("unknown model %q: %s serves %s", logclip.String(name), mt.where, strings.Join(names, ", "))
}

// recordReader finds a task's stored record; Store satisfies it.
type recordReader interface {
	Get(taskID string) ([]byte, bool)
}

// admission is one request to admit.
type admission struct {
	from source
	body []byte
	// tags are the message's tags; for HTTP the trace headers
	// (traceparent, tracestate).
	tags map[string]string
	// headerLen (HTTP) is the Inference-Header-Content-Length header.
	headerLen string
	// model (HTTP) is the model the URL names.
	model string
	// decoded (gRPC) is an infer request already read into a Task
	// (readGRPCInfer), or decodeErr why it could not be; body is then nil
	// and size the message's size in bytes.
	decoded   *task.Task
	decodeErr error
	size      int64
	// deadLetter (queued tasks) is the message's MaxReceiveQueue policy:
	// the producer's dead letter queue, a channel name.
	deadLetter string
	received   time.Time
	// records, when set, is asked whether the task was cancelled (queued
	// tasks only: a sync caller cancels by hanging up).
	records recordReader
	// traced asks for the caller's span context (tracing is on).
	traced bool
}

// admitted is admission's answer: a runnable request when verdict is
// admitRun, else the verdict and err, which says why in words the caller
// can store or send as they are.
type admitted struct {
	verdict verdict
	err     error
	// task is nil only when undecodable or its names are refused.
	task *task.Task
	// model is nil when undecodable, unknown or its names are refused.
	model    *Model
	inputs   []tensor.Tensor
	outputs  []string  // nil: every output
	deadline time.Time // zero: none
	priority bool      // sync requests run ahead of queued tasks
	level    int       // the priority level (batching.Level)
	// ranVersion (sync requests) is the model version that ran it, when
	// the batcher said (batch.Request.Version).
	ranVersion string
	// remote is the caller's span (traceparent), when traced.
	remote trace.SpanContext
}

// admit reads in against the models of mt. Safe for concurrent use; it
// changes nothing but what it returns.
func admit(in admission, mt *modelTable) (a admitted) {
	a.priority = in.from != fromQueue
	var err error
	if in.from == fromHTTP {
		if a.model = mt.byName[in.model]; a.model == nil {
			return refuse(a, admitUnknownModel, mt.unknown(in.model))
		}
		if err := checkBody(a.model, in.bodySize()); err != nil {
			return refuse(a, admitTooLarge, err)
		}
		if in.decoded != nil || in.decodeErr != nil {
			a.task, err = in.decoded, in.decodeErr
		} else {
			a.task, err = task.ParseInfer(in.body, in.headerLen, modelLimits(a.model))
		}
		if e := checkNames(in, a.task); e != nil {
			return refuseNames(a, e)
		}
		if a.task == nil {
			if errors.Is(err, task.ErrUndecodable) {
				return refuse(a, admitUndecodable, fmt.Errorf("undecodable %s: %w", in.from.noun(), err))
			}
			return refuse(a, inputVerdict(err), fmt.Errorf("model %q: %w", a.model.Config.Name, err))
		}
	} else {
		parse := task.Parse
		if in.from == fromQuery {
			parse = task.ParseQuery
		}
		if a.task, err = parse(in.body, in.tags, mt.limits); a.task == nil {
			return refuse(a, admitUndecodable, fmt.Errorf("undecodable %s: %w", in.from.noun(), err))
		}
		if e := checkNames(in, a.task); e != nil {
			return refuseNames(a, e)
		}
		a.model = mt.byName[a.task.Name]
		if a.model == nil && errors.Is(err, task.ErrTooLarge) {
			// Too large to read its task_name: the table's first model
			// answers for it, with the size error.
			a.model = mt.first
		}
		if a.model == nil {
			return refuse(a, admitUnknownModel, mt.unknown(a.task.Name))
		}
	}
	if in.traced {
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(in.tags))
		a.remote = trace.SpanContextFromContext(ctx)
	}
	if errors.Is(err, task.ErrTooLarge) {
		if e := checkBody(a.model, in.bodySize()); e != nil {
			return refuse(a, admitTooLarge, e)
		}
	}
	if err != nil {
		return refuse(a, inputVerdict(err), limitHint(a.model, fmt.Errorf("model %q: %w", a.model.Config.Name, err)))
	}
	a.deadline = deadline(a.task, a.model, in.received)
	if !a.deadline.IsZero() && !in.received.Before(a.deadline) {
		return refuse(a, admitExpired, fmt.Errorf("deadline exceeded: the %s expired at %s, before inference started", in.from.noun(), task.FormatTime(a.deadline)))
	}
	if in.records != nil && cancelled(in.records, a.task.ID) {
		return refuse(a, admitCancelled, errors.New("cancelled before inference started"))
	}
	if err := checkBody(a.model, in.bodySize()); err != nil {
		return refuse(a, admitTooLarge, err)
	}
	if a.inputs, err = a.task.Inputs(a.model.Info, modelLimits(a.model)); err != nil {
		return refuse(a, inputVerdict(err), limitHint(a.model, fmt.Errorf("model %q: %w", a.model.Config.Name, err)))
	}
	a.outputs = a.task.OutputNames()
	field := "kwargs.priority"
	if in.from == fromHTTP {
		field = "parameters.priority"
	}
	b := a.model.Config.Batching
	if err := b.CheckPriority(field, a.task.Priority); err != nil {
		return refuse(a, admitBadInput, fmt.Errorf("model %q: %w: %w", a.model.Config.Name, task.ErrBadInput, err))
	}
	a.level = b.Level(a.task.Priority)
	return a
}

// bodySize is the size of what arrived: the body, or a decoded request's
// message.
func (in admission) bodySize() int64 {
	if in.decoded != nil || in.decodeErr != nil {
		return in.size
	}
	return int64(len(in.body))
}

// checkNames checks what t (nil: nothing parsed) and in carry that names
// things (the id, reply_to, the dead letter queue) before anything uses
// them: the one place producer data is checked before it names a channel,
// a record, a journal line or a log field (task.CheckName, KUBEMQ.md trap
// 19).
func checkNames(in admission, t *task.Task) error {
	var id, replyTo string
	if t != nil {
		id, replyTo = t.ID, t.ReplyTo
	}
	idField := task.TagTaskID
	if in.from == fromHTTP {
		idField = "id"
	}
	for _, n := range []struct{ field, value string }{
		{idField, id},
		{task.TagReplyTo, replyTo},
		{"dead letter queue (MaxReceiveQueue)", in.deadLetter},
	} {
		if n.value == "" {
			continue // absent: an empty task_id is undecodable already
		}
		if err := task.CheckName(n.field, n.value); err != nil {
			return fmt.Errorf("invalid %s: %w", in.from.noun(), err)
		}
	}
	return nil
}

// refuseNames refuses a request whose names cannot be trusted: nothing of
// it (its task, its model) is kept for the caller to use.
func refuseNames(a admitted, err error) admitted {
	a.task, a.model = nil, nil
	return refuse(a, admitBadName, err)
}

func refuse(a admitted, v verdict, err error) admitted {
	a.verdict, a.err, a.inputs = v, err, nil
	return a
}

func inputVerdict(err error) verdict {
	if errors.Is(err, task.ErrTooLarge) {
		return admitTooLarge
	}
	return admitBadInput
}

// modelLimits are m's limits for reading a request.
func modelLimits(m *Model) task.Limits {
	return task.Limits{MaxBodyBytes: int64(m.Config.Limits.MaxBodyBytes), MaxTensorElements: m.Config.Limits.MaxTensorElements}
}

// bodyLimit is the most bytes a request body for m may hold.
func bodyLimit(m *Model) int64 {
	if n := int64(m.Config.Limits.MaxBodyBytes); n > 0 {
		return n
	}
	return task.DefaultMaxBodyBytes
}

// checkBody is the one body-size rule of every path: n bytes (-1 when
// the size is not known, only that it is over) against m's limit.
func checkBody(m *Model, n int64) error {
	limit := bodyLimit(m)
	switch {
	case n < 0:
		return fmt.Errorf("model %q: %w: body over the limit of %d bytes (limits.max_body_bytes)", m.Config.Name, task.ErrTooLarge, limit)
	case n > limit:
		return fmt.Errorf("model %q: %w: body of %d bytes is over the limit of %d bytes (limits.max_body_bytes)", m.Config.Name, task.ErrTooLarge, n, limit)
	}
	return nil
}

// limitHint names the config fields behind a size error.
func limitHint(m *Model, err error) error {
	if !errors.Is(err, task.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w (model %q: limits.max_body_bytes %d, limits.max_tensor_elements %d)",
		err, m.Config.Name, m.Config.Limits.MaxBodyBytes, m.Config.Limits.MaxTensorElements)
}

// deadline is when t expires: its own timeout_ms, else the model's
// timeout, from created_at (or receipt); zero when neither is set.
func deadline(t *task.Task, m *Model, received time.Time) time.Time {
	if d, ok := t.Deadline(received); ok {
		return d
	}
	if m.Config.Timeout <= 0 {
		return time.Time{}
	}
	base := t.CreatedAt
	if base.IsZero() {
		base = received
	}
	return base.Add(m.Config.Timeout.D())
}

// cancelled reports whether the task's stored record reads CANCELLED.
func cancelled(records recordReader, taskID string) bool {
	body, ok := records.Get(taskID)
	if !ok {
		return false
	}
	r, err := task.ParseRecord(body)
	return err == nil && r.Status == task.StatusCancelled
}
