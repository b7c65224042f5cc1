package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v5"
	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
)

// Settling: every taken message ends here, in a writer. decide turns what
// is known of its job into a settlement (a value: store this record, then
// ack, retry after d, dead-letter, forward as unprocessable, or give back),
// and Server.settle carries it out, the one place that stores records and
// acks, nacks, resends or forwards messages.

// job is one taken message from intake to settlement. It is the Owner of
// its batch.Request: the batcher tells it when the run starts and hands
// the finished request back, result included.
type job struct {
	s        *Server
	q        *queue
	msg      *mq.Message
	received time.Time
	enqueued time.Time

	adm     admitted // the task, its model, and the verdict
	attempt int
	crashes int  // attempts that ended with a crash of the process
	spent   bool // its attempts are spent (crashes, or a stored FAILURE): it must not run
	// returned: another consumer gave it back (queue.returnedTo); it
	// runs alone.
	returned bool

	req     batch.Request // the run; req.Result once finished
	started bool          // its run started (RunStarting)
	cancel  context.CancelFunc

	// root carries the task's SpanReceive, stage its open stage span; both
	// nil while tracing is off.
	root, stage context.Context
}

// RunStarting records the attempt right before the run starts, so that a
// crash counts only against the tasks that were running.
func (j *job) RunStarting(r *batch.Request) {
	j.started = true
	j.adm.Model.pol.release()
	_ = j.s.journal.Start(j.msg.ID) // a refused write: the journal warns (rate-limited) and fails /readyz
	j.progress(PctRunning, runningDetail(r.BatchItems))
	j.stage = j.s.trace.inferStage(j.root, j.stage, r.BatchItems)
}

// progress publishes a progress event for j's task, unless its model
// (progress: false) or the task itself (kwargs.parameters.progress: false)
// turned them off.
func (j *job) progress(pct int, detail string) {
	t, m := j.adm.Task, j.adm.Model
	if t == nil || t.NoProgress || (m != nil && !m.Config.ProgressOn()) {
		return
	}
	j.s.pub.progress(j.q.name, t.ID, pct, detail)
}

// Finished hands the finished run to the writers. It blocks while they
// are all busy, which holds the batcher back: backpressure, not loss.
func (j *job) Finished(r *batch.Request) {
	if !j.started {
		j.adm.Model.pol.release()
	}
	j.cancel()
	// The run is over: a crash from now on is not this task's doing.
	j.s.journal.Done(j.msg.ID)
	endSpan(j.stage, r.Result.Err)
	j.stage = nil
	j.s.write <- j
}

// action is what settling does with a message once its record (if any) is
// stored.
type action uint8

const (
	actAck           action = iota // done: ack
	actRetry                       // resend after delay (NAck when 0)
	actDeadLetter                  // move to the dead letter queue, alert
	actUnprocessable               // forward raw to the unprocessable queue
	actGiveBack                    // GiveBack, no record: it never ran
	actNAck                        // its record could not be stored: NAck, so that nothing is lost
)

// settlement is the outcome of a job.
type settlement struct {
	action action
	// status is the record to store first; "" stores none.
	status task.Status
	// err is the record's error, and the reason given to the dead letter
	// or unprocessable queue.
	err   error
	delay time.Duration // actRetry
	label string        // inferq_tasks_total's outcome
	// attempts is the attempt count the record and the DLQ tags carry.
	attempts int
}

// facts are what decide reads of a job.
type facts struct {
	verdict admit.Verdict // admission's
	why     error         // admission's reason
	spent   bool          // the attempts were spent before it ran
	result  error         // the run's error, nil for a success
	attempt int
	limit   int // attempts allowed
	crashes int
	retries models.Retries

	// neverRan: the batcher (or intake) finished it without starting its
	// run.
	neverRan bool
}

// decide computes a job's settlement. It has no effects; jitter comes from
// the backoff.
func decide(f facts) settlement {
	o := settlement{status: task.StatusFailure, attempts: f.attempt}
	switch f.verdict {
	case admit.Run:
	case admit.Undecodable, admit.BadName:
		o.action, o.status, o.err, o.label = actUnprocessable, "", f.why, OutcomeUnprocessable
		return o
	case admit.UnknownModel:
		o.action, o.err, o.label = actUnprocessable, f.why, OutcomeUnknownModel
		return o
	case admit.BadInput, admit.TooLarge:
		o.action, o.err, o.label = actDeadLetter, f.why, OutcomeBadInput
		return o
	case admit.Expired:
		o.action, o.err, o.label = actAck, f.why, OutcomeExpired
		return o
	case admit.Cancelled:
		o.action, o.status, o.err, o.label = actAck, task.StatusCancelled, f.why, OutcomeCancelled
		return o
	}
	err := f.result
	switch {
	case f.spent && f.crashes > 0:
		o.action, o.label, o.attempts = actDeadLetter, OutcomeFailure, f.limit
		o.err = fmt.Errorf("worker lost during inference: the process ended during %d attempt(s) of this task; attempts exhausted (%d)", f.crashes, f.limit)
	case f.spent:
		o.action, o.label, o.attempts = actDeadLetter, OutcomeFailure, f.limit
		o.err = fmt.Errorf("attempts exhausted (%d): the task's last attempt failed and its move to the dead letter queue did not complete; not run again", f.limit)
	case err == nil:
		o.action, o.status, o.label = actAck, task.StatusSuccess, OutcomeSuccess
	case errors.Is(err, ErrQueueTimeout):
		// Not run: it waited past default_queue_timeout. Final, like
		// the deadline: a retry would only queue it again.
		o.action, o.err, o.label = actAck, err, OutcomeQueueTimeout
	case errors.Is(err, context.DeadlineExceeded):
		o.action, o.err, o.label = actAck, fmt.Errorf("deadline exceeded before inference started: %w", err), OutcomeExpired
	case f.neverRan, errors.Is(err, context.Canceled), errors.Is(err, batch.ErrClosed):
		// It did not run (shutdown caught it in the batcher or in intake,
		// whatever the error says): it has no result to record; back to
		// the queue as if never received, with no attempt counted.
		o.action, o.status, o.err, o.label = actGiveBack, "", err, ""
	case errors.Is(err, batch.ErrInvalidInput):
		o.action, o.err, o.label = actDeadLetter, err, OutcomeBadInput
	case f.attempt >= f.limit:
		o.action, o.err, o.label = actDeadLetter, fmt.Errorf("attempt %d of %d: %w", f.attempt, f.limit, err), OutcomeFailure
	default:
		o.action, o.status, o.err, o.label = actRetry, "", err, OutcomeRetry
		o.delay = retryDelay(f.retries, f.attempt)
	}
	return o
}

// retryDelay is the delay before attempt+1: exponential from
// backoff_initial, doubling, capped at backoff_max, with jitter over its
// upper half; 0 (an immediate NAck) when backoff_initial is 0.
func retryDelay(r models.Retries, attempt int) time.Duration {
	initial, maxDelay := r.BackoffInitial.D(), r.BackoffMax.D()
	if initial <= 0 || maxDelay <= 0 {
		return 0
	}
	// The interval of attempt n is initial x 2^(n-1), capped; a
	// randomization factor of 1/3 around 3/4 of it spreads the delay over
	// [1/2, 1] of it.
	b := &backoff.ExponentialBackOff{
		InitialInterval:     initial * 3 / 4,
		RandomizationFactor: 1.0 / 3,
		Multiplier:          2,
		MaxInterval:         maxDelay * 3 / 4,
	}
	b.Reset()
	var d time.Duration
	for range max(attempt, 1) {
		d = b.NextBackOff()
	}
	return min(d, maxDelay)
}

// afterStore is the second pure step beside decide: what a failed store
// of o's record (status) changes. Nothing when the store took it (err nil),
// nor for an unprocessable message, which is forwarded all the same (its
// record is a courtesy). A record the store can never take
// (results.ErrInvalidEntry) sends the task to the dead letter queue with
// the reason: a NAck would bring it back for ever. Any other failure NAcks
// the message, so that the task is not lost; it counts no outcome.
func afterStore(o settlement, status task.Status, err error) settlement {
	switch {
	case err == nil, o.action == actUnprocessable:
		return o
	case errors.Is(err, results.ErrInvalidEntry):
		return settlement{action: actDeadLetter, err: fmt.Errorf("storing its %s record: %w", status, err), label: OutcomeFailure, attempts: o.attempts}
	}
	return settlement{action: actNAck, err: err, attempts: o.attempts}
}

// facts gathers what decide needs of j.
func (j *job) facts() facts {
	f := facts{verdict: j.adm.Verdict, why: j.adm.Err, spent: j.spent, result: j.req.Result.Err,
		neverRan: !j.started, attempt: j.attempt, crashes: j.crashes}
	if m := j.adm.Model; m != nil {
		f.limit = maxAttempts(m, j.msg)
		f.retries = m.Config.Retries
	}
	return f
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

// settle decides j's settlement and carries it out: the record first, then
// the message. A record that cannot be stored NAcks the message, so that
// nothing is lost (an unprocessable message is forwarded all the same: its
// record is a courtesy).
func (s *Server) settle(ctx context.Context, j *job) {
	defer s.inflight.Add(-1)
	m, t := j.adm.Model, j.adm.Task
	if m != nil {
		defer m.met.inflight.Dec()
	}
	started := s.cfg.Now()
	if m != nil && !j.enqueued.IsZero() {
		m.met.infer.Observe(started.Sub(j.enqueued).Seconds())
	}
	o := decide(j.facts())
	j.stage = s.trace.stage(j.root, j.stage, SpanStore)
	defer func() {
		endSpan(j.stage, nil)
		endRoot(j.root, o.label, o.err)
	}()
	name := ""
	if m != nil && o.action != actUnprocessable {
		name = m.Config.Name
	}
	switch {
	case o.status == "":
	case s.hasTerminal(j, o):
		s.log.Info("task already has its terminal record; not storing another failure", "task_id", t.ID, "msg", j.msg)
	default:
		rec := s.record(j, o)
		err := s.put(ctx, j, rec)
		o = afterStore(o, rec.Status, err)
		switch {
		case err == nil:
			if o.action == actAck && o.status == task.StatusSuccess {
				m.met.store.Observe(s.cfg.Now().Sub(started).Seconds())
			}
		case o.action == actUnprocessable:
			s.log.Error("store failed; forwarding the message all the same", "task_id", t.ID, "status", rec.Status, "err", err)
		case errors.Is(err, results.ErrInvalidEntry):
			s.log.Error("record refused by the store for good; moving the task to the dead letter queue", "task_id", t.ID, "status", rec.Status, "err", err)
		default:
			s.log.Error("store failed; nacking so the task is not lost", "task_id", t.ID, "status", rec.Status, "err", err)
		}
	}
	if o.action == actNAck {
		_ = j.msg.NAck()
		return
	}
	switch {
	case o.label == OutcomeSuccess:
		m.met.success.Inc()
	case o.label != "":
		s.met.Tasks.WithLabelValues(name, o.label).Inc()
	}
	s.met.inference(name, o.label)
	switch o.action {
	case actAck:
		if err := j.msg.Ack(); err != nil {
			s.log.Warn("ack failed after the record was stored", "task_id", t.ID, "err", err)
		}
		if o.status == task.StatusSuccess {
			j.progress(PctStored, "stored")
		} else {
			j.progress(PctFailed, "failed: "+errString(o.err))
		}
	case actRetry:
		s.retry(ctx, j, o)
	case actDeadLetter:
		j.progress(PctFailed, "failed: "+errString(o.err))
		s.deadLetter(ctx, j, o)
	case actUnprocessable:
		s.forward(ctx, j, o)
	case actGiveBack:
		// No NAck: that would count a receive, and at the producer's
		// MaxReceiveCount the broker would dead-letter a task that never
		// ran.
		_ = j.msg.GiveBack()
	}
}

// moveTo sends a copy of each message of batch to channel (moved), in one
// send retried like a settlement's (sendTries), and then acks them all:
// shard 0's poll leaves in one settlement (spread). On an error nothing is
// settled.
func (s *Server) moveTo(ctx context.Context, batch []*mq.Message, channel string) error {
	outs := make([]mq.OutMessage, len(batch))
	for i, m := range batch {
		outs[i] = moved(m, channel)
	}
	err := s.send(ctx, "move to "+channel, batch[0], func(ctx context.Context) error { return s.sender.Send(ctx, outs...) })
	if err != nil {
		return fmt.Errorf("consumer: move %d messages to %s: %w", len(batch), channel, err)
	}
	for _, m := range batch {
		if err := m.Ack(); err != nil {
			s.log.Warn("ack failed after the move; the task may run twice", "msg", m, "to", channel, "err", err)
		}
	}
	return nil
}

// refuse ends the messages of a polled batch that intake did not take
// (deliver stopped early with err): given back uncounted when ctx has ended
// (a shutdown: they never ran), else NAcked.
func (s *Server) refuse(ctx context.Context, rest []*mq.Message, err error) {
	for _, m := range rest {
		if ctx.Err() != nil {
			_ = m.GiveBack()
			continue
		}
		if nerr := m.NAck(); nerr != nil && !errors.Is(nerr, mq.ErrAlreadySettled) {
			s.log.Warn("nack of a refused message failed", "msg", m, "err", nerr)
		}
	}
	if len(rest) > 0 && ctx.Err() == nil {
		s.log.Warn("intake refused messages; nacked", "n", len(rest), "err", err)
	}
}

// retry resends the message after o.delay with the next attempt number, or
// NAcks it for an immediate redelivery. A resend that fails is tried again
// with backoff (sendTries); then the message is NAcked, which retries it at
// once and counts the attempt (its ReceiveCount grows), so the attempts stay
// bounded. A task too large to resend (over the broker connection's
// MaxMessageBytes; not possible by reference, a retry needs the whole task)
// is retried that way at once: a NAck keeps the task whole and its attempt
// count, losing only the delay.
func (s *Server) retry(ctx context.Context, j *job, o settlement) {
	t, limit := j.adm.Task, maxAttempts(j.adm.Model, j.msg)
	s.met.Retries.Inc()
	j.progress(PctRetrying, fmt.Sprintf("retrying: attempt %d of %d failed: %v", j.attempt, limit, o.err))
	if o.delay <= 0 {
		if err := j.msg.NAck(); err != nil {
			s.log.Warn("nack for retry failed", "task_id", t.ID, "err", err)
		}
		return
	}
	s.log.Info("retrying task", "task_id", t.ID, "model", j.adm.Model.Config.Name, "attempt", j.attempt, "of", limit, "delay", o.delay, "err", o.err)
	err := s.send(ctx, "delayed resend", j.msg, func(ctx context.Context) error {
		return s.sender.SendRetry(ctx, j.msg, o.delay, j.attempt+1)
	})
	switch {
	case err == nil:
		if err := j.msg.Ack(); err != nil {
			s.log.Warn("ack failed after the delayed resend; the task may run once more", "task_id", t.ID, "err", err)
		}
	case errors.Is(err, mq.ErrTooLarge):
		s.log.Warn("task too large to resend with a delay; retrying it at once by nack", "task_id", t.ID, "err", err)
		_ = j.msg.NAck()
	default:
		s.log.Warn("delayed resend failed; nacking instead", "task_id", t.ID, "err", err)
		_ = j.msg.NAck()
	}
}

// deadLetter moves the message to the producer's failed-task queue (or the
// model's DLQ) and fires the alert. A message too large to send again goes
// by reference (mq.Sender.SendCopy); one that cannot be forwarded at all is
// ended by unsent.
func (s *Server) deadLetter(ctx context.Context, j *job, o settlement) {
	t, name := j.adm.Task, j.adm.Model.Config.Name
	dest := j.msg.MaxReceiveQueue
	if dest == "" || dest == j.q.name {
		dest = j.adm.Model.Config.DLQQueue
	}
	s.log.Warn("task failed for good; moving it to the dead letter queue", "task_id", t.ID, "model", name, "attempts", o.attempts, "dlq", dest, "err", o.err)
	err := s.send(ctx, "move to the dead letter queue", j.msg, func(ctx context.Context) error {
		return s.sender.SendDeadLetter(ctx, j.msg, dest, errString(o.err), o.attempts)
	})
	if err == nil {
		s.ackCopied(j, "move to the dead letter queue")
	} else {
		if dest = s.unsent(j, "move to the dead letter queue", dest, j.adm.Model.Config.DLQQueue, err); dest == "" {
			return
		}
	}
	s.met.DLQ.Inc()
	s.alert.fire(Alert{TaskID: t.ID, Model: name, Queue: j.q.name, DLQ: dest, Error: errString(o.err),
		Attempts: o.attempts, Time: task.FormatTime(s.cfg.Now())})
}

// forward sends the message raw (by reference when too large) to its
// queue's unprocessable queue, then acks it; one that cannot be forwarded
// is ended by unsent.
func (s *Server) forward(ctx context.Context, j *job, o settlement) {
	dest := j.q.table.Load().First().Config.UnprocessableQueue
	s.met.Unprocessable.Inc()
	if o.label != OutcomeUnprocessable {
		s.met.Tasks.WithLabelValues("", OutcomeUnprocessable).Inc()
	}
	s.log.Warn("unprocessable message", "queue", j.q.name, "msg", j.msg, "to", dest, "err", o.err)
	err := s.send(ctx, "forward to the unprocessable queue", j.msg, func(ctx context.Context) error {
		return s.sender.SendCopy(ctx, j.msg, dest, map[string]string{mq.TagError: errString(o.err), mq.TagOrigin: j.q.name})
	})
	if err == nil {
		s.ackCopied(j, "forward to the unprocessable queue")
		return
	}
	s.unsent(j, "forward to the unprocessable queue", dest, dest, err)
}

// ackCopied acks j's message once its copy (what) is stored. When the Ack
// fails the message may come back and go once more: at-least-once.
func (s *Server) ackCopied(j *job, what string) {
	if err := j.msg.Ack(); err != nil {
		s.log.Warn("ack failed after the forward", "what", what, "msg", j.msg, "err", err)
	}
}

// Bounds of the sends that settle a message (a delayed resend, a dead
// letter or unprocessable forward), so that one that fails never turns
// into an immediate NAck loop.
const (
	// sendTries is how often one settlement tries a send that fails for a
	// temporary reason, sendBackoff the first wait between tries (then
	// doubling, jittered): 3 tries over about a second.
	sendTries   = 3
	sendBackoff = 300 * time.Millisecond
	// forwardReceives bounds the deliveries of a message whose forward keeps
	// failing: from this ReceiveCount on it is not NAcked again but moved
	// whole by the broker (see unsent).
	forwardReceives = 5
)

// send runs op, a send that settles msg (what names it in logs), up to sendTries times
// while it fails for a temporary reason, with backoff between tries, and
// returns its last error. It stops at once on a permanent error (see
// retryable) and when ctx ends.
func (s *Server) send(ctx context.Context, what string, msg any, op func(context.Context) error) error {
	var last error
	b := &backoff.ExponentialBackOff{InitialInterval: sendBackoff, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: 4 * sendBackoff}
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		last = op(ctx)
		if last != nil && !retryable(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	},
		backoff.WithBackOff(b),
		backoff.WithMaxTries(sendTries),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, d time.Duration) {
			s.log.Debug("send failed; trying again", "what", what, "msg", msg, "in", d, "err", err)
		}))
	return last
}

// retryable reports whether a failed send may work when tried again
// within the settlement: the broker is away or slow.
func retryable(err error) bool {
	return errors.Is(err, mq.ErrUnavailable) || errors.Is(err, mq.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// permanent reports whether a failed send can never work: neither
// retryable nor a stop (mq.ErrClosed, context.Canceled: the process is
// shutting down, the message comes back to the next one). mq.ErrTooLarge
// and a channel the broker refuses are.
func permanent(err error) bool {
	return !retryable(err) && !errors.Is(err, mq.ErrClosed) && !errors.Is(err, context.Canceled)
}

// unsent ends j's message after its forward (what) to dest failed in this
// settlement with err, so that it is neither lost nor cycles for ever, and
// returns where the message went ("" when it comes back). A temporary
// failure NAcks it: it comes back (each pass spent the tries' backoff
// first, so that is no hot loop) until its ReceiveCount reaches
// forwardReceives. A permanent failure (never tried again), or one at that
// bound, asks the broker to move the message whole to fallback (a
// configured queue): ReQueue sends no copy, so no size limit applies, but
// the copy carries no reason tags (the log, and a task's FAILURE record,
// do).
func (s *Server) unsent(j *job, what, dest, fallback string, err error) (to string) {
	switch {
	case !permanent(err) && j.msg.ReceiveCount < forwardReceives:
		s.log.Error("forward failed; nacking", "what", what, "msg", j.msg, "err", err)
		_ = j.msg.NAck()
		return ""
	}
	s.log.Error("forward failed; the broker moves the message whole, without tags", "what", what, "msg", j.msg, "to", fallback,
		"permanent", permanent(err), "err", err)
	if rerr := j.msg.ReQueue(fallback); rerr != nil {
		s.log.Error("requeue failed; the message comes back", "msg", j.msg, "to", fallback, "err", rerr)
		return ""
	}
	return fallback
}

// hasTerminal reports whether the FAILURE record a redelivered job would
// store is one too many: its task has a terminal record already (one
// FAILURE per task, not one per pass: a pass whose forward failed stored
// its record before). A first delivery always stores: a producer may reuse
// an id.
func (s *Server) hasTerminal(j *job, o settlement) bool {
	if o.status != task.StatusFailure || j.adm.Task == nil || (j.msg.ReceiveCount <= 1 && j.crashes == 0) {
		return false
	}
	return s.storedStatus(j.adm.Task.ID).Terminal()
}

// storedStatus is the status of the task's stored record, "" when it has
// none (or none that reads).
func (s *Server) storedStatus(taskID string) task.Status {
	body, ok := s.cfg.Store.Get(taskID)
	if !ok {
		return ""
	}
	r, err := task.ParseRecord(body)
	if err != nil {
		return ""
	}
	return r.Status
}

// record builds the result record of a job.
func (s *Server) record(j *job, o settlement) *task.Record {
	t := j.adm.Task
	rec := &task.Record{
		TaskID:      t.ID,
		Status:      o.status,
		CreatedAt:   t.CreatedAt,
		CompletedAt: s.cfg.Now(),
		Attempts:    o.attempts,
		Worker:      s.cfg.Worker,
	}
	if o.err != nil {
		rec.Error = clipText(o.err.Error(), maxRecordErrorBytes)
	}
	if o.status == task.StatusSuccess {
		m := j.adm.Model
		resp := task.NewInferResponse(m.Config.Name, m.version(j.req.Version), j.req.Result.Outputs, t)
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
	t := j.adm.Task
	body, _ := rec.Encode()
	e := results.Entry{TaskID: t.ID, Status: string(rec.Status), Terminal: rec.Status.Terminal(),
		Body: body, ReplyTo: t.ReplyTo, CreatedAt: t.CreatedAt}
	if m := j.adm.Model; m != nil && len(body) > m.Config.Result.MaxResultBytes {
		sub := *rec
		sub.Result, sub.Binary, sub.ResultRef = nil, nil, resultRef(s.cfg.AdvertiseURL, t.ID)
		e.Substitute, _ = sub.Encode()
	}
	return s.cfg.Store.Put(ctx, e)
}

// resultRef is where the whole record of an oversized result is read:
// /v1/tasks/<id> on the replica that advertises base, relative without one.
// Task ids are URL-safe (task.CheckName).
func resultRef(base, taskID string) string {
	return strings.TrimSuffix(base, "/") + "/v1/tasks/" + taskID
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// maxRecordErrorBytes bounds a record's error text, which may quote
// producer data (names, values): a record stays small enough to store.
const maxRecordErrorBytes = 4 << 10

// clipText cuts s to at most limit bytes on a UTF-8 boundary, marking the
// cut with "...(N bytes)".
func clipText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	mark := "...(" + strconv.Itoa(len(s)) + " bytes)"
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
