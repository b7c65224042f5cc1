package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/logclip"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// Intake: a queued message's path from the poller (deliver, the poller's
// Deliver callback) through the intake workers (take) and admission to its
// model's batcher; what must not run goes straight to the writers
// (settle.go).
//
// Admission itself (the verdict, the limits, the error texts every path
// shares) is package admit's.

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
// consumer, and records where this stint on the channel started. A queue
// delivers in sequence order and a channel has one consumer at a time, so a
// first delivery (ReceiveCount 1) with a sequence below the first one this
// stint received was held by a consumer before it: most often one that died
// running it, before the fleet heard of the crash, or this replica's
// previous process. Such a message runs alone, so that a task that kills its
// workers does not take its batch mates with it; it counts no crash.
//
// A message below the highest sequence received but above the stint's start
// is no such message: one of this consumer's own polls stranded it (KUBEMQ.md
// facts 40 and 43), and running each stray alone would cost the device most
// of its time (BENCHMARKS.md). Several replicas on one channel without shards
// lose this protection for a peer's tasks. Sequences are a channel's (each
// shard has its own); a stint starts with each run of the channel's poller.
func (ch *channel) returnedTo(batch []*mq.Message) []bool {
	start := ch.start.Load()
	out := make([]bool, len(batch))
	if start == 0 {
		first := uint64(0)
		for _, m := range batch {
			if m.Sequence > 0 && (first == 0 || m.Sequence < first) {
				first = m.Sequence
			}
		}
		ch.start.CompareAndSwap(0, first)
		return out
	}
	for i, m := range batch {
		out[i] = m.Sequence > 0 && m.Sequence < start && m.ReceiveCount <= 1
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
			j.adm = admitted{Verdict: admit.Undecodable, Err: fmt.Errorf("internal error decoding the task: %v", r), Model: counted}
			s.write <- j
		}
	}()
	j.adm = d.q.table.Load().Admit(admit.Input{From: admit.FromQueue, Body: d.msg.Body, Tags: d.msg.Tags, DeadLetter: d.msg.MaxReceiveQueue,
		Received: d.received, Records: s.cfg.Store, Traced: s.trace.tr != nil})
	t, m := j.adm.Task, j.adm.Model
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
	if j.adm.Verdict != admit.Run {
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
	j.attempt = attempt(j.adm.Task, j.msg, j.crashes)
}

// spent reports, and marks, a job whose attempts are spent: every one
// left ended with a process, or its last failed (the FAILURE is stored)
// and the move to the dead letter queue did not complete. It must not run
// again.
func (s *Server) spent(j *job) bool {
	limit := maxAttempts(j.adm.Model, j.msg)
	j.spent = j.attempt > limit && (j.crashes > 0 || s.storedStatus(j.adm.Task.ID) == task.StatusFailure)
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
	m := j.adm.Model
	j.progress(PctReceived, "received")
	j.enqueued = s.cfg.Now()
	j.stage = s.trace.stage(j.root, nil, SpanBatch)
	j.req = batch.Request{
		Item: batch.Item{Inputs: j.adm.Inputs, Outputs: j.adm.Outputs},
		// A task that was in flight when a process died runs alone, so
		// the tasks that shared its batch do not share its fate; so does
		// one another consumer gave back (returnedTo), which may be that.
		Alone: j.crashes > 0 || j.returned,
		Level: j.adm.Level,
		Owner: j,
	}
	// The batcher does not run an item whose ctx ended before its run:
	// its deadline, or default_queue_timeout from now.
	var rctx context.Context
	rctx, j.cancel = m.pol.queueCtx(ctx, j.adm.Deadline, j.enqueued)
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

// modelTable is the models a request may name: a queue's (by task_name),
// or every served model (HTTP and gRPC, by name); admitted is admission's
// answer, its model this package's (package admit).
type (
	modelTable = admit.Table[*Model]
	admitted   = admit.Admitted[*Model]
)

func newModelTable(where string) *modelTable { return admit.NewTable[*Model](where) }

// ModelConfig is m's configuration, for admission (admit.Model) and the
// front ends (package oip). It does not change once m is served.
func (m *Model) ModelConfig() *models.Model { return &m.Config }

// ModelInfo is m's inputs and outputs (admit.Model).
func (m *Model) ModelInfo() tensor.ModelInfo { return m.Info }

// outcomeOf is a verdict's outcome label in the metrics.
func outcomeOf(v admit.Verdict) string {
	switch v {
	case admit.Undecodable, admit.BadName:
		return OutcomeUnprocessable
	case admit.UnknownModel:
		return OutcomeUnknownModel
	case admit.BadInput, admit.TooLarge:
		return OutcomeBadInput
	case admit.Expired:
		return OutcomeExpired
	case admit.Cancelled:
		return OutcomeCancelled
	}
	return ""
}
