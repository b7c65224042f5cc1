package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every redelivery loop ends: what the consumer takes, it can forward
// (whole, or by reference when too large to send again), a send that fails
// backs off, a forward that can never work ends in the DLQ all the same,
// and a task gets one FAILURE record however often it comes back.

// countingStore counts the records stored per task and status.
type countingStore struct {
	consumer.Store
	mu   sync.Mutex
	puts map[string]int // "task_id status"
}

func countPuts(c *harnessConfig) *countingStore {
	cs := &countingStore{puts: map[string]int{}}
	c.storeWrap = func(s consumer.Store) consumer.Store { cs.Store = s; return cs }
	return cs
}

func (c *countingStore) Put(ctx context.Context, e results.Entry) error {
	c.mu.Lock()
	c.puts[e.TaskID+" "+e.Status]++
	c.mu.Unlock()
	return c.Store.Put(ctx, e)
}

func (c *countingStore) count(id string, st task.Status) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[id+" "+string(st)]
}

// A well-formed task of the wrong shape whose body is over the sender's
// limit (17 MiB against mq's default 16 MiB; the model takes up to 64 MiB)
// once looped for ever: the dead letter forward was refused, the message
// NAcked and a FAILURE record stored on every pass. It goes to the DLQ by
// reference on its first pass, with one FAILURE record.
func TestOversizeBadTaskDeadLettersOnceByReference(t *testing.T) {
	forBrokers(t, func(t *testing.T, on brokerOpt) {
		var puts *countingStore
		h := newHarness(t, on, func(c *harnessConfig) { puts = countPuts(c) })
		n := (17<<20)/4 + 1
		x := tensor.NewTensor("x", []int64{1, int64(n)}, make([]float32, n)) // the model wants [-1,4]
		body, tags, err := task.NewTask("big", testModel, []tensor.Tensor{x}, task.WithReplyTo(h.reply), task.WithBinaryInputs())
		if err != nil {
			t.Fatal(err)
		}
		prod, err := mq.Dial(context.Background(), mq.Config{Address: h.addr, ClientID: "big-producer", MaxMessageBytes: 32 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		if err := prod.Sender().Send(context.Background(), mq.OutMessage{Channel: h.q, Body: body, Tags: tags}); err != nil {
			t.Fatal(err)
		}
		if r := h.record("big"); r.Status != task.StatusFailure || !strings.Contains(r.Error, `"x"`) {
			t.Fatalf("record %+v", r)
		}
		waitFor(t, 15*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) > 0 })
		h.settled(h.q)
		dlq := h.queueMsgs(h.q + ".dlq")
		if len(dlq) != 1 {
			t.Fatalf("%d messages in the DLQ, want 1", len(dlq))
		}
		d := dlq[0]
		if !bytes.Equal(d.Body, body[:mq.RefBytes]) {
			t.Errorf("DLQ body: %d bytes, want the first %d of the task", len(d.Body), mq.RefBytes)
		}
		if !strings.Contains(d.Tags[mq.TagTruncated], "body") || d.Tags[mq.TagOriginalBytes] != strconv.Itoa(len(body)) ||
			d.Tags[mq.TagOrigin] != h.q || !strings.Contains(d.Tags[mq.TagError], `"x"`) || d.Tags[task.TagTaskID] != "big" {
			t.Errorf("DLQ tags %v", d.Tags)
		}
		if got := puts.count("big", task.StatusFailure); got != 1 {
			t.Errorf("%d FAILURE records stored, want 1", got)
		}
		if got := testutil.ToFloat64(h.met.Tasks.WithLabelValues(testModel, consumer.OutcomeBadInput)); got != 1 {
			t.Errorf("the task was settled %v times, want once", got)
		}
		if got := testutil.ToFloat64(h.met.DLQ); got != 1 {
			t.Errorf("dlq metric %v", got)
		}
	})
}

// failingSender fails the consumer's dead letter forwards or delayed
// resends with err (nil: sends them) and notes when each was tried.
type failingSender struct {
	consumer.Resender
	deadLetter, retry error

	mu    sync.Mutex
	calls []time.Time
}

func failSends(dl, retry error) (*failingSender, brokerOpt) {
	f := &failingSender{deadLetter: dl, retry: retry}
	return f, func(c *harnessConfig) {
		c.server = func(s *consumer.Server) {
			consumer.WrapSender(s, func(r consumer.Resender) consumer.Resender { f.Resender = r; return f })
		}
	}
}

func (f *failingSender) note() {
	f.mu.Lock()
	f.calls = append(f.calls, time.Now())
	f.mu.Unlock()
}

func (f *failingSender) SendDeadLetter(ctx context.Context, m *mq.Message, dlq, reason string, attempts int) error {
	if f.deadLetter == nil {
		return f.Resender.SendDeadLetter(ctx, m, dlq, reason, attempts)
	}
	f.note()
	return fmt.Errorf("fake dead letter: %w", f.deadLetter)
}

func (f *failingSender) SendRetry(ctx context.Context, m *mq.Message, delay time.Duration, attempt int) error {
	if f.retry == nil {
		return f.Resender.SendRetry(ctx, m, delay, attempt)
	}
	f.note()
	return fmt.Errorf("fake retry: %w", f.retry)
}

func (f *failingSender) tries() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls...)
}

// badTask is a well-formed task whose input does not fit the model.
func badTask(h *harness, id string) mq.OutMessage {
	body := []byte(`{"task_id":"` + id + `","task_name":"m","args":[[1,2,3]],"kwargs":{"reply_to":"` + h.reply + `"}}`)
	return mq.OutMessage{Channel: h.q, Body: body}
}

// A dead letter forward that keeps failing for a temporary reason is tried
// SendTries times per pass with backoff, the message NAcked between passes,
// and after ForwardReceives passes the broker moves it whole to the DLQ: no
// hot loop, nothing lost, one FAILURE record.
func TestFailingDeadLetterBacksOffAndEnds(t *testing.T) {
	var puts *countingStore
	fake, opt := failSends(mq.ErrUnavailable, nil)
	h := newHarness(t, opt, func(c *harnessConfig) { puts = countPuts(c) })
	msg := badTask(h, "t1")
	h.sendMsg(msg)
	waitFor(t, 30*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) > 0 })
	h.settled(h.q)
	calls := fake.tries()
	if want := consumer.SendTries * consumer.ForwardReceives; len(calls) != want {
		t.Errorf("%d forward tries, want %d (%d per pass, %d passes)", len(calls), want, consumer.SendTries, consumer.ForwardReceives)
	}
	// Within a pass the tries are the backoff apart (at least its first
	// step, less the jitter).
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); i%consumer.SendTries != 0 && gap < consumer.SendBackoff*3/4 {
			t.Errorf("try %d came %v after the one before: no backoff", i+1, gap)
		}
	}
	dlq := h.queueMsgs(h.q + ".dlq")
	if len(dlq) != 1 || !bytes.Equal(dlq[0].Body, msg.Body) {
		t.Fatalf("DLQ %v, want the task whole", dlq)
	}
	if got := puts.count("t1", task.StatusFailure); got != 1 {
		t.Errorf("%d FAILURE records stored over %d passes, want 1", got, consumer.ForwardReceives)
	}
	if got := testutil.ToFloat64(h.met.DLQ); got != 1 {
		t.Errorf("dlq metric %v", got)
	}
}

// A dead letter forward refused for good is not tried again: the broker
// moves the message whole to the DLQ at once.
func TestRefusedDeadLetterIsNotRetried(t *testing.T) {
	var puts *countingStore
	fake, opt := failSends(mq.ErrTooLarge, nil)
	h := newHarness(t, opt, func(c *harnessConfig) { puts = countPuts(c) })
	msg := badTask(h, "t1")
	h.sendMsg(msg)
	waitFor(t, 15*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) > 0 })
	h.settled(h.q)
	if n := len(fake.tries()); n != 1 {
		t.Errorf("%d forward tries, want 1", n)
	}
	if dlq := h.queueMsgs(h.q + ".dlq"); len(dlq) != 1 || !bytes.Equal(dlq[0].Body, msg.Body) {
		t.Fatalf("DLQ %v, want the task whole", dlq)
	}
	if got := puts.count("t1", task.StatusFailure); got != 1 {
		t.Errorf("%d FAILURE records stored, want 1", got)
	}
}

// A delayed resend that fails for a temporary reason is tried SendTries
// times with backoff before the message is NAcked (a retry at once, which
// counts the attempt); one refused for good (a task too large to resend)
// is NAcked at once. Either way the attempts stay bounded and the task
// ends in the DLQ.
func TestFailingRetryResendBacksOff(t *testing.T) {
	for _, tc := range []struct {
		err   error
		tries int // per failed attempt
	}{
		{mq.ErrUnavailable, consumer.SendTries},
		{mq.ErrTooLarge, 1},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			const retries = 2
			fake, opt := failSends(nil, tc.err)
			h := newHarness(t, opt, func(c *harnessConfig) {
				c.model.Retries = models.Retries{MaxRetries: retries, BackoffInitial: models.Duration(time.Second), BackoffMax: models.Duration(time.Second)}
			})
			h.send("t1", 1000, 7) // fails every attempt
			if r := h.record("t1"); r.Status != task.StatusFailure || r.Attempts != retries+1 {
				t.Fatalf("record %+v", r)
			}
			waitFor(t, 15*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) == 1 })
			h.settled(h.q)
			if n := len(fake.tries()); n != retries*tc.tries {
				t.Errorf("%d resend tries, want %d", n, retries*tc.tries)
			}
			if n := h.fake.RunsOf(7); n != retries+1 {
				t.Errorf("ran %d times, want %d", n, retries+1)
			}
		})
	}
}

// A task whose last attempt failed at run time and whose dead letter
// forward then failed comes back to the queue; it must not run again (it
// could store a SUCCESS after its FAILURE): a delivery past the task's
// attempts goes to the DLQ without a run.
func TestExhaustedTaskDoesNotRunAgain(t *testing.T) {
	var puts *countingStore
	_, opt := failSends(mq.ErrUnavailable, nil)
	h := newHarness(t, opt, func(c *harnessConfig) {
		puts = countPuts(c)
		c.model.Retries.MaxRetries = 0
	})
	h.send("t1", 1000, 7) // fails every run
	waitFor(t, 30*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) > 0 })
	h.settled(h.q)
	if got := h.fake.RunsOf(7); got != 1 {
		t.Errorf("the task ran %d times over %d deliveries, want once (max_retries 0)", got, consumer.ForwardReceives)
	}
	if got := puts.count("t1", task.StatusFailure); got != 1 {
		t.Errorf("%d FAILURE records, want 1", got)
	}
	if got := puts.count("t1", task.StatusSuccess); got != 0 {
		t.Errorf("%d SUCCESS records after the FAILURE", got)
	}
}

// refusingStore refuses every record for good, as results.Store does an
// entry it can never take.
type refusingStore struct {
	consumer.Store
	puts atomic.Int64
}

func (r *refusingStore) Put(ctx context.Context, e results.Entry) error {
	r.puts.Add(1)
	return fmt.Errorf("%w: task %s: test refusal", results.ErrInvalidEntry, e.TaskID)
}

// A record the store can never take once NAcked its message for ever
// ("store failed; nacking"): it goes to the dead letter queue with the
// reason, after one run.
func TestRecordRefusedForGoodDeadLetters(t *testing.T) {
	rs := &refusingStore{}
	h := newHarness(t, func(c *harnessConfig) {
		c.storeWrap = func(s consumer.Store) consumer.Store { rs.Store = s; return rs }
	})
	h.sendMsg(h.taskMsg("t1", testModel, 1, 9))
	waitFor(t, 15*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) > 0 })
	h.settled(h.q)
	if got := h.fake.RunsOf(9); got != 1 {
		t.Errorf("the task ran %d times, want once", got)
	}
	dlq := h.queueMsgs(h.q + ".dlq")
	if len(dlq) != 1 || !strings.Contains(dlq[0].Tags[mq.TagError], "test refusal") {
		t.Fatalf("DLQ %v, want the task with the store's reason", dlq)
	}
	if n := rs.puts.Load(); n != 1 {
		t.Errorf("%d store attempts, want 1", n)
	}
}
