package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/task"
)

// publishCrashes stores a crash report of journal for message id on the
// harness queue's crash channel, as another replica would.
func publishCrashes(t *testing.T, h *harness, journal, id string, n int) {
	t.Helper()
	r := crash.Report{V: 1, Journal: journal, Incarnation: strings.Repeat("9", 32), Reporter: "other-replica",
		Crashes: []crash.Count{{Token: crash.Token(id), N: n}}}
	body, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.prod.SendEventStore(context.Background(), h.q+crash.ChannelSuffix, body, nil); err != nil {
		t.Fatal(err)
	}
}

// sendWithID sends the task "task-<id>" as broker message id.
func sendWithID(h *harness, id string) {
	m := h.taskMsg("task-"+id, testModel, 1, 7)
	m.ID = id
	h.sendMsg(m)
}

// The other replicas' crash reports spend a task's budget: with their
// counts at max_retries + 1 it goes to the dead letter queue as "worker
// lost during inference" without running here; with fewer it waits the
// crash hold, then runs (alone) and succeeds.
func TestFleetCrashReportsSpendTheBudget(t *testing.T) {
	const hold = 300 * time.Millisecond
	h := newHarness(t, func(c *harnessConfig) {
		c.model.Retries.MaxRetries = 2
		c.configure = func(cc *consumer.Config) {
			cc.Crash.Events = cc.Broker.(crash.Events)
			cc.Crash.Hold = hold
		}
	})
	publishCrashes(t, h, strings.Repeat("b", 32), "spent-1", 2)
	publishCrashes(t, h, strings.Repeat("c", 32), "spent-1", 1)
	publishCrashes(t, h, strings.Repeat("c", 32), "spent-1", 1) // delivered again: counts once
	publishCrashes(t, h, strings.Repeat("b", 32), "crashed-1", 1)
	// The consumer reads the channel from its start: give it the reports
	// before the tasks come.
	time.Sleep(200 * time.Millisecond)

	sent := time.Now()
	sendWithID(h, "spent-1")
	sendWithID(h, "crashed-1")
	waitFor(t, 10*time.Second, "both records", func() bool {
		return h.record("task-spent-1") != nil && h.record("task-crashed-1") != nil
	})
	spent := h.record("task-spent-1")
	if spent.Status != task.StatusFailure || !strings.Contains(spent.Error, "worker lost during inference") || spent.Attempts != 3 {
		t.Errorf("spent task: %s attempts %d %q", spent.Status, spent.Attempts, spent.Error)
	}
	crashed := h.record("task-crashed-1")
	if crashed.Status != task.StatusSuccess {
		t.Errorf("crashed once: %s %q", crashed.Status, crashed.Error)
	}
	if h.fake.Total.Load() != 1 {
		t.Errorf("%d runs, want 1 (the spent task must not run)", h.fake.Total.Load())
	}
	if d := time.Since(sent); d < hold {
		t.Errorf("the task with a crash ran after %v, before the crash hold of %v", d, hold)
	}
	h.settled(h.q)
	if dlq := h.queueMsgs(h.q + ".dlq"); len(dlq) != 1 || dlq[0].Tags[task.TagTaskID] != "task-spent-1" {
		t.Errorf("dead letter queue: %d messages, want task-spent-1", len(dlq))
	}
}
