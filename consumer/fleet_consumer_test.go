package consumer_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/task"
)

// fleetKey is the fleet key of the tests that sign crash reports.
var fleetKey = []byte("test-fleet-key-0123456789")

// publishCrashes stores a crash report of journal for message id on the
// harness queue's crash channel, as another replica would: signed with
// key unless it is nil.
func publishCrashes(t *testing.T, h *harness, key []byte, journal, id string, n int) {
	t.Helper()
	ch := h.q + crash.ChannelSuffix
	r := crash.Report{V: 1, Journal: journal, Incarnation: strings.Repeat("9", 32), Reporter: "other-replica",
		Crashes: []crash.Count{{Token: crash.Token(id), N: n}}}
	if key != nil {
		r = r.Sign(key, ch, time.Now())
	}
	body, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.prod.SendEventStore(context.Background(), ch, body, nil); err != nil {
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
// crash hold, then runs (alone) and succeeds. So with a fleet key, with
// reports signed with it.
func TestFleetCrashReportsSpendTheBudget(t *testing.T) {
	for name, key := range map[string][]byte{"unsigned": nil, "signed": fleetKey} {
		t.Run(name, func(t *testing.T) { testFleetCrashReportsSpendTheBudget(t, key) })
	}
}

func testFleetCrashReportsSpendTheBudget(t *testing.T, key []byte) {
	const hold = 300 * time.Millisecond
	h := newHarness(t, func(c *harnessConfig) {
		c.model.Retries.MaxRetries = 2
		c.configure = func(cc *consumer.Config) {
			cc.Crash.Events = cc.Broker.(crash.Events)
			cc.Crash.Hold = hold
			cc.Crash.Key = key
		}
	})
	publishCrashes(t, h, key, strings.Repeat("b", 32), "spent-1", 2)
	publishCrashes(t, h, key, strings.Repeat("c", 32), "spent-1", 1)
	publishCrashes(t, h, key, strings.Repeat("c", 32), "spent-1", 1) // delivered again: counts once
	publishCrashes(t, h, key, strings.Repeat("b", 32), "crashed-1", 1)
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

// The forgery of issue 27 item 2: a producer who can publish on
// <queue>.crashes predicts the broker's next message ids from its own
// send (the embedded broker's are a random prefix and a counter; KubeMQ's
// are similar) and publishes crash reports that spend those messages'
// budgets. Without a fleet key the next producer's tasks go to the dead
// letter queue unrun (the attack, as filed); with one, the forged reports
// (unsigned, or signed with a guessed key) are refused and counted, and
// every task runs and succeeds.
func TestFleetForgedCrashReports(t *testing.T) {
	for name, key := range map[string][]byte{"no key": nil, "key": fleetKey} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			refused := map[string]int{}
			h := newHarness(t, func(c *harnessConfig) {
				c.model.Retries.MaxRetries = 2
				c.configure = func(cc *consumer.Config) {
					cc.Crash.Events = cc.Broker.(crash.Events)
					cc.Crash.Hold = 100 * time.Millisecond
					cc.Crash.Key = key
					cc.Crash.Refused = func(reason string) { mu.Lock(); refused[reason]++; mu.Unlock() }
				}
			})
			// The attacker's own send, on a channel nobody consumes,
			// and the id the broker gave it.
			probe := h.taskMsg("attacker-probe", testModel, 1, 0)
			probe.Channel = h.q + ".probe"
			h.sendMsg(probe)
			msgs := h.srv.Queue(probe.Channel)
			if len(msgs) != 1 {
				t.Fatalf("%d probe messages", len(msgs))
			}
			ids := predictIDs(t, msgs[0].MessageID, 10) // a few more than the tasks: other sends may come between
			for i, id := range ids {
				publishCrashes(t, h, nil, strings.Repeat("f", 32), id, 3) // unsigned
				forged := []byte("guessed-fleet-key-" + strconv.Itoa(i))
				publishCrashes(t, h, forged, strings.Repeat("e", 32), id, 3)
			}
			time.Sleep(200 * time.Millisecond) // the consumer reads the channel first

			const tasks = 5
			for i := range tasks {
				h.send("victim-"+strconv.Itoa(i), 1, float32(i))
			}
			dead := 0
			for i := range tasks {
				r := h.record("victim-" + strconv.Itoa(i))
				if r.Status != task.StatusSuccess {
					dead++
					if key != nil {
						t.Errorf("victim-%d with a fleet key: %s %q", i, r.Status, r.Error)
					}
				}
			}
			h.settled(h.q)
			dlq := len(h.queueMsgs(h.q + ".dlq"))
			mu.Lock()
			defer mu.Unlock()
			if key == nil {
				// The attack as filed: the ids were predicted right.
				if dead != tasks || dlq != tasks {
					t.Fatalf("without a key: %d failed, %d in the DLQ, want all %d (the forgery predicts the ids)", dead, dlq, tasks)
				}
				return
			}
			if dlq != 0 || h.fake.Total.Load() != tasks {
				t.Errorf("with a fleet key: %d in the DLQ, %d runs, want 0 and %d", dlq, h.fake.Total.Load(), tasks)
			}
			if refused[crash.RefusedUnsigned] != len(ids) || refused[crash.RefusedForged] != len(ids) {
				t.Errorf("refusals %v, want %d unsigned and %d forged", refused, len(ids), len(ids))
			}
		})
	}
}

// predictIDs returns the n message ids the embedded broker gives after
// id: its random prefix, then its counter (base 36) plus 1, 2, ...
func predictIDs(t *testing.T, id string, n int) []string {
	t.Helper()
	const prefix = 16 // hex digits
	c, err := strconv.ParseUint(id[prefix:], 36, 64)
	if len(id) <= prefix || err != nil {
		t.Fatalf("message id %q is not a prefix and a counter: %v", id, err)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = id[:prefix] + strconv.FormatUint(c+uint64(i)+1, 36)
	}
	return out
}
