package consumer_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/task"
)

// A stop whose grace ends while tasks wait in the batcher gives them back
// as if they had never been taken: no record, no attempt counted, no dead
// letter, with max_retries 0 and the producer's MaxReceiveCount 1 (where
// one counted delivery more sends a task to the dead letter queue). A new
// consumer then runs every task once more, to a SUCCESS record of attempt 1
// as the first terminal record the producer sees.
func TestStopGivesBackWhatNeverRanUncounted(t *testing.T) {
	first := &gatedRunner{F: newFakeBatcher(), Gate: make(chan struct{})}
	var batcher atomic.Pointer[batch.Batcher]
	batcher.Store(newBatcher(t, first, 1))
	h := newHarness(t, func(c *harnessConfig) {
		c.grace = 200 * time.Millisecond
		c.model.Retries.MaxRetries = 0
		c.configure = func(cc *consumer.Config) { cc.Models[0].Batcher = batcher.Load() }
	})
	producerDLQ := h.q + ".producer-failed"
	const n = 4
	for i := range n {
		m := h.taskMsg(fmt.Sprintf("t%d", i), testModel, 1, float32(i))
		m.MaxReceiveCount, m.MaxReceiveQueue = 1, producerDLQ
		h.sendMsg(m)
	}
	waitFor(t, 10*time.Second, "one run to start and the rest to wait in the batcher", func() bool {
		return batcher.Load().InFlight() == 1 && batcher.Load().Queued() == n-1
	})
	h.stop() // the grace ends with one run in progress and three waiting
	close(first.Gate)
	batcher.Store(newBatcher(t, &gatedRunner{F: newFakeBatcher()}, 1))
	h.start()
	for i := range n {
		r := h.record(fmt.Sprintf("t%d", i))
		if r.Status != task.StatusSuccess || r.Attempts != 1 {
			t.Errorf("first terminal record of t%d: %s, attempts %d, error %q; want SUCCESS of attempt 1", i, r.Status, r.Attempts, r.Error)
		}
	}
	h.settled(h.q)
	if msgs := h.queueMsgs(producerDLQ); len(msgs) != 0 {
		t.Errorf("%d tasks in the producer's dead letter queue, want none", len(msgs))
	}
	if got := first.Ran(); len(got) != 1 {
		t.Errorf("the first consumer ran tasks %v, want only the one in progress at the stop", got)
	}
}

// A task that cannot run (its model's batcher is closed) goes back to the
// queue as if never received, with no record: a NAck would count a
// receive, and at the producer's MaxReceiveCount 1 the broker would move
// the task, which never ran, to the producer's dead letter queue.
func TestNeverRanIsGivenBackUncounted(t *testing.T) {
	closed, err := batch.New(batch.Config{Name: testModel,
		Policy: batch.Policy{MaxBatchSize: 1}, Runners: []batch.Runner{&gatedRunner{F: newFakeBatcher()}}})
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	h := newHarness(t, func(c *harnessConfig) {
		c.model.Retries.MaxRetries = 0
		c.configure = func(cc *consumer.Config) { cc.Models[0].Batcher = closed }
	})
	producerDLQ := h.q + ".producer-failed"
	m := h.taskMsg("t0", testModel, 1, 0)
	m.MaxReceiveCount, m.MaxReceiveQueue = 1, producerDLQ
	h.sendMsg(m)
	waitFor(t, 10*time.Second, "the task taken and settled", func() bool {
		return h.cons.PollerStats()[h.q].Messages == 1 && h.cons.Inflight() == 0
	})
	h.stop() // its stream closes: what it holds goes back
	waitFor(t, 10*time.Second, "nothing held", func() bool { return h.srv.QueueState(h.q).InFlight == 0 })
	back := h.queueMsgs(h.q)
	if len(back) != 1 || back[0].Attributes.ReceiveCount != 0 {
		t.Errorf("queue holds %d messages (%v), want the task back as never delivered", len(back), back)
	}
	if msgs := h.queueMsgs(producerDLQ); len(msgs) != 0 {
		t.Errorf("%d tasks in the producer's dead letter queue, want none", len(msgs))
	}
	if _, ok := h.records.Load("t0"); ok {
		t.Error("a record for a task that never ran")
	}
}
