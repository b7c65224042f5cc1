package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSuccessRecordAndAck(t *testing.T) { forBrokers(t, testSuccessRecordAndAck) }

func testSuccessRecordAndAck(t *testing.T, on brokerOpt) {
	h := newHarness(t, on, on)
	h.send("t1", 3, 1)
	r := h.record("t1")
	if r.Status != task.StatusSuccess || r.Attempts != 1 || r.Error != "" {
		t.Fatalf("record %+v", r)
	}
	if got := outputs(t, r); got[0] != 6 || got[1] != 2 {
		t.Errorf("outputs %v, want [6 2 0 0]", got)
	}
	h.settled(h.q)
	if n := testutil.ToFloat64(h.met.Tasks.WithLabelValues(testModel, consumer.OutcomeSuccess)); n != 1 {
		t.Errorf("success count %v", n)
	}
}

// gatedStore blocks Put until released, to observe the order of store and
// ack.
type gatedStore struct {
	consumer.Store
	release chan struct{}
	entered chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, e results.Entry) error {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Put(ctx, e)
}

// (a) a message is acked only after its record is stored.
func TestAckOnlyAfterStore(t *testing.T) {
	g := &gatedStore{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	h := newHarness(t, func(c *harnessConfig) {
		c.storeWrap = func(s consumer.Store) consumer.Store { g.Store = s; return g }
	})
	h.send("t1", 1, 1)
	<-g.entered
	// The record is being stored: the message must still be held.
	if st := h.srv.QueueState(h.q); st.InFlight != 1 {
		t.Fatalf("while the store is blocked the message should be in flight, got %+v", st)
	}
	close(g.release)
	h.record("t1")
	h.settled(h.q)
}

// (b) retries: delayed resend with the attempt in a tag; immediate NAck
// when backoff_initial is 0; a producer's MaxReceiveCount caps attempts.
func TestRetries(t *testing.T) { forBrokers(t, testRetries) }

func testRetries(t *testing.T, on brokerOpt) {
	t.Run("delayed resend", func(t *testing.T) {
		h := newHarness(t, on, on)
		h.send("t1", 502, 7) // fails twice, then succeeds
		r := h.record("t1")
		if r.Status != task.StatusSuccess || r.Attempts != 3 {
			t.Fatalf("record %+v, want SUCCESS after 3 attempts", r)
		}
		if n := h.fake.RunsOf(7); n != 3 {
			t.Errorf("ran %d times, want 3", n)
		}
		if n := testutil.ToFloat64(h.met.Retries); n != 2 {
			t.Errorf("retries metric %v, want 2", n)
		}
		h.settled(h.q)
	})
	t.Run("immediate nack", func(t *testing.T) {
		h := newHarness(t, on, func(c *harnessConfig) { c.model.Retries.BackoffInitial = 0 })
		h.send("t1", 501, 7)
		r := h.record("t1")
		if r.Status != task.StatusSuccess || r.Attempts != 2 {
			t.Fatalf("record %+v, want SUCCESS after 2 attempts", r)
		}
		h.settled(h.q)
	})
	t.Run("producer MaxReceiveCount caps attempts", func(t *testing.T) {
		h := newHarness(t, on, func(c *harnessConfig) { c.model.Retries.MaxRetries = 5 })
		m := h.taskMsg("t1", testModel, 1000, 7)
		m.MaxReceiveCount, m.MaxReceiveQueue = 2, h.q+".producer-failed"
		h.sendMsg(m)
		r := h.record("t1")
		if r.Status != task.StatusFailure || r.Attempts != 2 {
			t.Fatalf("record %+v, want FAILURE after 2 attempts", r)
		}
		waitFor(t, 5*time.Second, "the producer's failed-task queue", func() bool { return len(h.queueMsgs(h.q+".producer-failed")) == 1 })
		if n := h.fake.RunsOf(7); n != 2 {
			t.Errorf("ran %d times, want 2", n)
		}
	})
}

func TestBackoffGrowsAndIsCapped(t *testing.T) { forBrokers(t, testBackoffGrowsAndIsCapped) }

func testBackoffGrowsAndIsCapped(t *testing.T, on brokerOpt) {
	h := newHarness(t, on, func(c *harnessConfig) {
		c.model.Retries.MaxRetries = 4
	})
	start := time.Now()
	h.send("t1", 504, 9)
	r := h.record("t1")
	if r.Attempts != 5 || r.Status != task.StatusSuccess {
		t.Fatalf("record %+v", r)
	}
	// Delays of 1, 2, 4 and 4 s (capped), jittered over their upper half
	// and rounded up to whole broker seconds of 50 ms: at least
	// 1+1+2+2 = 6 broker seconds. The jitter and the cap are unit-tested in
	// backoff_test.go.
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("4 retries took %v: the backoff did not delay them", took)
	}
}

// (c) permanent failures are not retried.
func TestPermanentFailures(t *testing.T) { forBrokers(t, testPermanentFailures) }

func testPermanentFailures(t *testing.T, on brokerOpt) {
	t.Run("undecodable body goes raw to the unprocessable queue", func(t *testing.T) {
		h := newHarness(t, on, on)
		h.sendMsg(mq.OutMessage{Channel: h.q, Body: []byte("not json {")})
		waitFor(t, 5*time.Second, "the unprocessable queue", func() bool { return len(h.queueMsgs(h.q+".unprocessable")) == 1 })
		got := h.queueMsgs(h.q + ".unprocessable")[0]
		if string(got.Body) != "not json {" || got.Tags[mq.TagError] == "" || got.Tags[mq.TagOrigin] != h.q {
			t.Errorf("forwarded message %q tags %v", got.Body, got.Tags)
		}
		h.settled(h.q)
		if n := testutil.ToFloat64(h.met.Unprocessable); n != 1 {
			t.Errorf("unprocessable metric %v", n)
		}
	})
	t.Run("unknown model: unprocessable queue and a FAILURE record", func(t *testing.T) {
		h := newHarness(t, on, on)
		h.sendMsg(h.taskMsg("t1", "nope", 1, 1))
		r := h.record("t1")
		if r.Status != task.StatusFailure || !strings.Contains(r.Error, `unknown model "nope"`) {
			t.Fatalf("record %+v", r)
		}
		waitFor(t, 5*time.Second, "the unprocessable queue", func() bool { return len(h.queueMsgs(h.q+".unprocessable")) == 1 })
		h.settled(h.q)
	})
	t.Run("input that does not fit: FAILURE and DLQ, no retries", func(t *testing.T) {
		h := newHarness(t, on, on)
		body := []byte(`{"task_id":"t1","task_name":"m","args":[[1,2,3]],"kwargs":{"reply_to":"` + h.reply + `"}}`)
		h.sendMsg(mq.OutMessage{Channel: h.q, Body: body})
		r := h.record("t1")
		if r.Status != task.StatusFailure || r.Attempts != 1 || !strings.Contains(r.Error, `input "x"`) {
			t.Fatalf("record %+v", r)
		}
		waitFor(t, 5*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) == 1 })
		if h.fake.Total.Load() != 0 {
			t.Errorf("a bad input ran %d times", h.fake.Total.Load())
		}
		h.settled(h.q)
	})
}

// (d) after the last attempt: FAILURE, DLQ with tags, one alert (event and
// webhook); max_retries 0 never loops.
func TestDeadLetter(t *testing.T) { forBrokers(t, testDeadLetter) }

func testDeadLetter(t *testing.T, on brokerOpt) {
	var hooks atomic.Int64
	var hookBody atomic.Value
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hookBody.Store(b)
		hooks.Add(1)
	}))
	defer hook.Close()
	for _, retries := range []int{0, 2} {
		t.Run(fmt.Sprintf("max_retries %d", retries), func(t *testing.T) {
			hooks.Store(0)
			h := newHarness(t, on, func(c *harnessConfig) {
				c.model.Retries.MaxRetries = retries
				c.model.Retries.BackoffInitial = 0
				c.webhook = hook.URL
			})
			alerts, err := h.prod.SubscribeEvents(context.Background(), h.q+".dlq", "")
			if err != nil {
				t.Fatal(err)
			}
			h.send("t1", 1000, 5)
			r := h.record("t1")
			if r.Status != task.StatusFailure || r.Attempts != retries+1 || !strings.Contains(r.Error, "boom") {
				t.Fatalf("record %+v", r)
			}
			waitFor(t, 5*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) == 1 })
			d := h.queueMsgs(h.q + ".dlq")[0]
			if d.Tags[mq.TagAttempts] != fmt.Sprint(retries+1) || d.Tags[mq.TagOrigin] != h.q || !strings.Contains(d.Tags[mq.TagError], "boom") {
				t.Errorf("DLQ tags %v", d.Tags)
			}
			select {
			case e := <-alerts:
				var al consumer.Alert
				if err := json.Unmarshal(e.Body, &al); err != nil || al.TaskID != "t1" || al.Attempts != retries+1 {
					t.Errorf("alert %s (%v)", e.Body, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no alert event on q.dlq")
			}
			waitFor(t, 5*time.Second, "the webhook", func() bool { return hooks.Load() == 1 })
			h.settled(h.q)
			if n := h.fake.RunsOf(5); n != retries+1 {
				t.Errorf("ran %d times, want %d", n, retries+1)
			}
			if n := testutil.ToFloat64(h.met.DLQ); n != 1 {
				t.Errorf("dlq metric %v", n)
			}
			if hooks.Load() != 1 {
				t.Errorf("webhook called %d times", hooks.Load())
			}
		})
	}
}

// fakeCancelStore answers Get with a CANCELLED record for one task.
type fakeCancelStore struct {
	consumer.Store
	id string
}

func (f fakeCancelStore) Get(id string) ([]byte, bool) {
	if id == f.id {
		body, _ := (&task.Record{TaskID: id, Status: task.StatusCancelled}).Encode()
		return body, true
	}
	return f.Store.Get(id)
}

// (g) a task past its deadline, or cancelled, is not run.
func TestDeadlineAndCancel(t *testing.T) { forBrokers(t, testDeadlineAndCancel) }

func testDeadlineAndCancel(t *testing.T, on brokerOpt) {
	h := newHarness(t, on, func(c *harnessConfig) {
		c.storeWrap = func(s consumer.Store) consumer.Store { return fakeCancelStore{s, "t-cancel"} }
	})
	h.send("t-late", 1, 1, task.WithCreatedAt(time.Now().Add(-time.Minute)), task.WithTimeout(time.Second))
	h.send("t-cancel", 1, 2)
	h.send("t-ok", 1, 3, task.WithTimeout(time.Minute))
	late, canc, ok := h.record("t-late"), h.record("t-cancel"), h.record("t-ok")
	if late.Status != task.StatusFailure || !strings.Contains(late.Error, "deadline exceeded") {
		t.Errorf("late task record %+v", late)
	}
	if canc.Status != task.StatusCancelled {
		t.Errorf("cancelled task record %+v", canc)
	}
	if ok.Status != task.StatusSuccess {
		t.Errorf("task within its deadline: %+v", ok)
	}
	if h.fake.RunsOf(1)+h.fake.RunsOf(2) != 0 {
		t.Errorf("expired or cancelled tasks ran")
	}
	h.settled(h.q)
}

// flakyBroker fails every result write while down is set.
type flakyBroker struct {
	results.Broker
	down  atomic.Bool
	fails atomic.Int64
}

func (f *flakyBroker) SendEventStore(ctx context.Context, ch string, body []byte, tags map[string]string) error {
	if f.down.Load() {
		f.fails.Add(1)
		return fmt.Errorf("%w: result store down", mq.ErrUnavailable)
	}
	return f.Broker.SendEventStore(ctx, ch, body, tags)
}

// (j) a failing result store: records spooled, replayed later, never
// recomputed, and messages acked once spooled.
func TestResultStoreFailureSpoolsAndReplays(t *testing.T) {
	forBrokers(t, testResultStoreFailureSpoolsAndReplays)
}

func testResultStoreFailureSpoolsAndReplays(t *testing.T, on brokerOpt) {
	fb := &flakyBroker{}
	fb.down.Store(true)
	h := newHarness(t, on, func(c *harnessConfig) {
		c.brokerWrap = func(b results.Broker) results.Broker { fb.Broker = b; return fb }
	})
	const n = 20
	for i := range n {
		h.send(fmt.Sprintf("t%d", i), 1, float32(i))
	}
	h.settled(h.q)
	waitFor(t, 10*time.Second, "the spool to hold every record", func() bool { return h.store.Stats().Pending == n })
	if fb.fails.Load() == 0 {
		t.Fatal("the broker was never asked")
	}
	fb.down.Store(false)
	for i := range n {
		if r := h.record(fmt.Sprintf("t%d", i)); r.Status != task.StatusSuccess {
			t.Errorf("record %+v", r)
		}
	}
	if got := h.fake.Total.Load(); got != n {
		t.Errorf("ran %d times for %d tasks: results were recomputed", got, n)
	}
	waitFor(t, 5*time.Second, "the spool to empty", func() bool { return h.store.Stats().Pending == 0 })
}

// A full result spool stops intake: readiness turns false, the pollers take
// no new messages (the one batch in hand waits, unsettled), nothing is
// dropped; once the replay has made room, everything runs, once.
func TestFullSpoolPausesIntake(t *testing.T) {
	fb := &flakyBroker{}
	fb.down.Store(true)
	const first, more = 2, 10
	h := newHarness(t, func(c *harnessConfig) {
		c.brokerWrap = func(b results.Broker) results.Broker { fb.Broker = b; return fb }
		c.spoolMax = first
	})
	for i := range first {
		h.send(fmt.Sprintf("t%d", i), 1, float32(i))
	}
	waitFor(t, 10*time.Second, "the first tasks spooled", func() bool { return h.store.Stats().Pending == first })
	if !h.store.Full() || h.cons.Ready() {
		t.Fatalf("store full %v, consumer ready %v: want a full store and not ready", h.store.Full(), h.cons.Ready())
	}
	// The next batch is polled and held at the gate; nothing after it is
	// polled while the spool stays full.
	for i := first; i < first+more; i++ {
		h.send(fmt.Sprintf("t%d", i), 1, float32(i))
	}
	waitFor(t, 10*time.Second, "the held batch", func() bool { return h.cons.PollerStats()[h.q].Messages > first })
	held := h.cons.PollerStats()[h.q].Messages
	checks := h.fullChecks.Load()
	waitFor(t, 10*time.Second, "the gate to ask again (or a task to run)", func() bool {
		return h.fullChecks.Load() >= checks+20 || h.fake.Total.Load() > first
	})
	if got := h.fake.Total.Load(); got != first {
		t.Errorf("%d tasks ran while the spool was full, want the %d taken before", got, first)
	}
	if st := h.cons.PollerStats()[h.q]; st.Messages != held {
		t.Errorf("the poller took %d messages while the spool was full, want the %d it held", st.Messages, held)
	}
	if h.cons.Ready() {
		t.Error("ready while the spool is full")
	}
	fb.down.Store(false)
	for i := range first + more {
		if r := h.record(fmt.Sprintf("t%d", i)); r.Status != task.StatusSuccess {
			t.Errorf("record %+v", r)
		}
	}
	if got := h.fake.Total.Load(); got != first+more {
		t.Errorf("ran %d times for %d tasks", got, first+more)
	}
	waitFor(t, 10*time.Second, "ready again", h.cons.Ready)
	if st := h.store.Stats(); st.Dropped != 0 || st.Pending != 0 {
		t.Errorf("store %+v, want nothing dropped or pending", st)
	}
}

// (h) the broker goes away mid-load and comes back: readiness drops and
// returns, nothing is lost, no restart.
func TestBrokerLossMidLoad(t *testing.T) {
	skipSDKRace(t)
	h := newHarness(t)
	const n = 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n / 2 {
			h.send(fmt.Sprintf("t%d", i), 1, float32(i))
		}
	}()
	wg.Wait()
	waitFor(t, 5*time.Second, "readiness", h.cons.Ready)
	h.srv.Stop()
	waitFor(t, 10*time.Second, "readiness to drop", func() bool { return !h.cons.Ready() })
	time.Sleep(10 * time.Second) // the broker stays away 10 s, as in the issue
	h.srv.Restart()
	waitFor(t, 15*time.Second, "readiness to return", h.cons.Ready)
	for i := n / 2; i < n; i++ {
		h.send(fmt.Sprintf("t%d", i), 1, float32(i))
	}
	for i := range n {
		if r := h.record(fmt.Sprintf("t%d", i)); r.Status != task.StatusSuccess {
			t.Errorf("record %+v", r)
		}
	}
	h.settled(h.q)
}

// (i) a stop mid-load: running work finishes within the grace, the rest is
// given back, nothing is lost; a new consumer finishes the queue.
func TestShutdownMidLoadLosesNothing(t *testing.T) {
	h := newHarness(t)
	h.fake.Gate = make(chan struct{})
	const n = 50
	for i := range n {
		h.send(fmt.Sprintf("t%d", i), 1, float32(i))
	}
	waitFor(t, 5*time.Second, "tasks to be taken", func() bool { return h.cons.Inflight() > 0 })
	// Let runs proceed slowly while the consumer stops.
	go func() {
		for range n * 4 {
			select {
			case h.fake.Gate <- struct{}{}:
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	h.stop()
	h.start()
	for i := range n {
		if r := h.record(fmt.Sprintf("t%d", i)); r.Status != task.StatusSuccess {
			t.Errorf("record %+v", r)
		}
	}
	h.settled(h.q)
}

func TestMetricsLint(t *testing.T) {
	h := newHarness(t)
	h.send("t1", 1, 1)
	h.record("t1")
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// The Python adapter's producer: task JSON with args, no reply_to, a
// PENDING record written first on rayserve-result-<task_id>; the result is
// read by peeking that channel.
func TestAdapterCompatResultChannel(t *testing.T) { forBrokers(t, testAdapterCompatResultChannel) }

func testAdapterCompatResultChannel(t *testing.T, on brokerOpt) {
	h := newHarness(t, on, on)
	// Unique per run: a real broker keeps the channel and its records.
	id := fmt.Sprintf("4f0c1d7e-0000-4000-8000-%012d", time.Now().UnixNano()%1e12)
	ch := "rayserve-result-" + id
	pending, _ := (&task.Record{TaskID: id, Status: task.StatusPending, CreatedAt: time.Now()}).Encode()
	body := []byte(`{"task_id":"` + id + `","task_name":"m","args":[[1.5,2,3,4]],"kwargs":{},"created_at":"` + task.FormatTime(time.Now()) + `"}`)
	h.sendMsg(mq.OutMessage{Channel: ch, Body: pending, ExpirationSeconds: 3600}, mq.OutMessage{Channel: h.q, Body: body})
	var rec *task.Record
	waitFor(t, 10*time.Second, "a terminal record on "+ch, func() bool {
		msgs, err := h.prod.Peek(context.Background(), ch, 1, 50*time.Millisecond)
		if err != nil || len(msgs) == 0 {
			return false
		}
		r, err := task.ParseRecord(msgs[0].Body)
		if err != nil || !r.Status.Terminal() {
			return false
		}
		rec = r
		return true
	})
	if rec.Status != task.StatusSuccess {
		t.Fatalf("record %+v", rec)
	}
	if got := outputs(t, rec); got[0] != 3 || got[3] != 8 {
		t.Errorf("outputs %v", got)
	}
	if n := len(h.queueMsgs(ch)); n != 1 {
		t.Errorf("%s holds %d records, want only the terminal one", ch, n)
	}
	h.settled(h.q)
}

// A busy model keeps its throughput while another configured model's queue
// sits idle: the idle queue is watched with the legacy peek and never with
// a stream poll, which on a real KubeMQ would hold one of the broker's
// shared poll slots and stall every other client's polls (KUBEMQ.md trap
// 11). The test checks the mechanism (no stream poll on the idle queue);
// the throughput with and without the idle model is logged, and measured
// in the bench (BENCHMARKS.md), not asserted here.
func TestIdleQueueDoesNotSlowBusyOne(t *testing.T) { forBrokers(t, testIdleQueueDoesNotSlowBusyOne) }

func testIdleQueueDoesNotSlowBusyOne(t *testing.T, on brokerOpt) {
	const n = 2000
	rate := func(idle bool) float64 {
		h := newHarness(t, on, func(c *harnessConfig) { c.idleModel = idle })
		waitFor(t, 10*time.Second, "readiness", h.cons.Ready)
		msgs := make([]mq.OutMessage, n)
		for i := range msgs {
			msgs[i] = h.taskMsg(fmt.Sprintf("t%d", i), testModel, 1, float32(i))
		}
		start := time.Now()
		h.sendMsg(msgs...)
		for i := range n {
			h.record(fmt.Sprintf("t%d", i))
		}
		took := time.Since(start)
		if idle {
			st := h.cons.PollerStats()[h.q+".idle"]
			if st.Polls != 0 || st.Peeks == 0 {
				t.Errorf("idle queue: %d stream polls and %d peeks; want no stream poll, only peeks", st.Polls, st.Peeks)
			}
			if busy := h.cons.PollerStats()[h.q]; busy.Messages < n {
				t.Errorf("busy queue poller delivered %d of %d", busy.Messages, n)
			}
		}
		h.stop()
		return float64(n) / took.Seconds()
	}
	alone, withIdle := rate(false), rate(true)
	t.Logf("busy model: %.0f tasks/s alone, %.0f tasks/s with an idle model configured (%.2fx)", alone, withIdle, withIdle/alone)
}

// inferq_queue_depth follows the broker's count of the queue's messages,
// taken and not yet settled ones included; also for a queue whose name the
// real broker reports trimmed of "_QUEUES." characters ("q.EU" as "q"),
// which read 0 on one broker or the other.
func TestQueueDepthMetric(t *testing.T) {
	forBrokers(t, func(t *testing.T, on brokerOpt) {
		for _, tail := range []string{"", ".EU"} {
			t.Run("tail"+tail, func(t *testing.T) {
				h := newHarness(t, on, func(c *harnessConfig) {
					c.queueTail = tail
					c.configure = func(cc *consumer.Config) { cc.DepthEvery = 50 * time.Millisecond }
				})
				h.fake.Gate = make(chan struct{})
				for i := range 3 {
					h.send(fmt.Sprintf("t%d", i), 1, float32(i))
				}
				depth := func() float64 { return testutil.ToFloat64(h.met.QueueDepth.WithLabelValues(h.q)) }
				waitFor(t, 5*time.Second, "queue depth 3", func() bool { return depth() == 3 })
				close(h.fake.Gate)
				waitFor(t, 5*time.Second, "queue depth 0", func() bool { return depth() == 0 })
			})
		}
	})
}

// Per-model limits give a FAILURE record naming the limit, and nothing
// runs (the body is never decoded into a huge tensor).
func TestModelLimits(t *testing.T) {
	t.Run("tensor elements", func(t *testing.T) {
		h := newHarness(t, func(c *harnessConfig) { c.model.Limits.MaxTensorElements = 2 })
		h.send("t1", 1, 1)
		r := h.record("t1")
		if r.Status != task.StatusFailure || !strings.Contains(r.Error, "element") {
			t.Fatalf("record %+v", r)
		}
		h.settled(h.q)
	})
	t.Run("body bytes", func(t *testing.T) {
		h := newHarness(t, func(c *harnessConfig) { c.model.Limits.MaxBodyBytes = 64 })
		h.send("t1", 1, 1)
		r := h.record("t1")
		if r.Status != task.StatusFailure || !strings.Contains(r.Error, "max_body_bytes") {
			t.Fatalf("record %+v", r)
		}
		h.settled(h.q)
	})
}
