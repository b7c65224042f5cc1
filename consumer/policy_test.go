package consumer_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/task"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// policyHarness serves model m from a real batcher of max_batch_size 1 over
// a gated runner (every run waits for a receive on gate), with the queue
// policy fields set by batching, and an HTTP server over the consumer.
func policyHarness(t *testing.T, batching func(*models.Batching)) (h *harness, r *gatedRunner, url string, open func()) {
	t.Helper()
	r = &gatedRunner{F: newFakeBatcher(), Gate: make(chan struct{})}
	m := defaultModel()
	m.Batching.MaxBatchSize, m.Batching.MaxQueueDelay = 1, 0
	batching(&m.Batching)
	b := runBatcher(t, batch.Config{Name: testModel, Runners: []batch.Runner{r},
		Policy: batch.Policy{MaxBatchSize: 1, PriorityLevels: m.Batching.PriorityLevels, PriorityAging: m.Batching.Aging()},
		// As the worker builds it: max_queue_size is the batcher's bound.
		QueueSize: max(m.Batching.MaxQueueSize, 64)})
	h = newHarness(t, func(c *harnessConfig) { c.model = m }, withBatcher(b))
	srv := httptest.NewServer(oip.Handler(h.cons, oip.HTTPConfig{Gatherer: h.reg, Metrics: h.met}))
	t.Cleanup(srv.Close)
	open = sync.OnceFunc(func() { close(r.Gate) })
	t.Cleanup(open) // every run still gated finishes before the consumer stops
	return h, r, srv.URL, open
}

func (h *harness) pending() float64 {
	return testutil.ToFloat64(h.met.Pending.WithLabelValues(testModel))
}

const inferBody = `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,77,0,0]}]}`

// TestMaxQueueSize: with max_queue_size requests waiting, the queue
// consumer takes no more tasks (they stay waiting on the broker, never
// received, nothing NAcked), HTTP infer answers 503 with Retry-After and a
// query an error naming the cause; once runs free room, every task runs,
// once.
func TestMaxQueueSize(t *testing.T) {
	const maxQueue = 2
	h, r, url, open := policyHarness(t, func(b *models.Batching) { b.MaxQueueSize = maxQueue })
	h.waitQueries()
	h.send("t0", 1, 0) // runs, and holds the runner
	waitFor(t, 10*time.Second, "the first run", func() bool {
		return r.F.Total.Load() == 0 && h.pending() == 0 && h.cons.PollerStats()[h.q].Messages == 1
	})
	for i := 1; i <= maxQueue; i++ {
		h.send(fmt.Sprintf("t%d", i), 1, float32(i))
	}
	waitFor(t, 10*time.Second, "max_queue_size pending", func() bool { return h.pending() == maxQueue })
	// The next task is polled and held in Deliver; nothing after it is
	// received while the model's queue is full.
	h.send("t3", 1, 3)
	waitFor(t, 10*time.Second, "the held task", func() bool { return h.cons.PollerStats()[h.q].Messages == maxQueue+2 })
	const more = 5
	for i := range more {
		h.send(fmt.Sprintf("t%d", 4+i), 1, float32(4+i))
	}
	waitFor(t, 10*time.Second, "the later tasks waiting on the broker", func() bool { return len(h.srv.Queue(h.q)) == more })
	before := h.srv.QueueState(h.q)

	resp, body := do(t, "POST", url+"/v2/models/m/infer", []byte(inferBody), nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "queue full") || !strings.Contains(string(body), "batching.max_queue_size") {
		t.Errorf("HTTP infer with the queue full: %d Retry-After %q %s, want 503 with Retry-After naming max_queue_size",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	qr, err := h.query(queryBody(testModel, 1, 99), nil, 5*time.Second)
	if err != nil || qr.Status != task.StatusFailure || !strings.Contains(qr.Error, "queue full") {
		t.Errorf("query with the queue full: %+v, %v; want a FAILURE naming the queue full", qr, err)
	}

	// Ten broker seconds: polls would have come and gone.
	time.Sleep(500 * time.Millisecond)
	after := h.srv.QueueState(h.q)
	if len(after.Waiting) != more || after.Delivered != before.Delivered || after.Sent != before.Sent {
		t.Errorf("while full: %d waiting, %d deliveries, %d stored; before: %d, %d, %d: want nothing received or NAcked",
			len(after.Waiting), after.Delivered, after.Sent, len(before.Waiting), before.Delivered, before.Sent)
	}
	for _, m := range after.Waiting {
		if n := m.Attributes.GetReceiveCount(); n != 0 {
			t.Errorf("task %s received %d times while the queue was full", m.Tags["task_id"], n)
		}
	}
	if got := h.pending(); got != maxQueue {
		t.Errorf("inferq_pending_requests %v, want %d", got, maxQueue)
	}
	if r.F.Total.Load() != 0 {
		t.Errorf("%d runs finished while the runner was held", r.F.Total.Load())
	}

	open()
	const n = 4 + more
	for i := range n {
		rec := h.record(fmt.Sprintf("t%d", i))
		if rec.Status != task.StatusSuccess || rec.Attempts > 1 {
			t.Errorf("t%d: %s after %d attempts (%s), want SUCCESS at the first", i, rec.Status, rec.Attempts, rec.Error)
		}
	}
	h.settled(h.q)
	if st := h.srv.QueueState(h.q); st.Sent != n {
		t.Errorf("the queue stored %d messages for %d tasks: some were NAcked", st.Sent, n)
	}
	if got := testutil.ToFloat64(h.met.HTTPInfer.WithLabelValues(testModel, consumer.OutcomeQueueFull)); got != 1 {
		t.Errorf("inferq_http_infer_total{outcome=queue_full} %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.met.InferFailure.WithLabelValues(testModel, consumer.OutcomeQueueFull)); got != 2 {
		t.Errorf("inferq_inference_request_failure_total{reason=queue_full} %v, want 2 (HTTP and query)", got)
	}
	if got := testutil.ToFloat64(h.met.InferSuccess.WithLabelValues(testModel)); got != n {
		t.Errorf("inferq_inference_request_success_total %v, want %d", got, n)
	}
	waitFor(t, 5*time.Second, "no request pending", func() bool { return h.pending() == 0 })
}

// TestQueueTimeout: a task that waits longer than default_queue_timeout
// for its run is not run: FAILURE "queue timeout", acked; an HTTP request
// gets 503 as soon as its wait is over.
func TestQueueTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	h, r, url, _ := policyHarness(t, func(b *models.Batching) { b.DefaultQueueTimeout = models.Duration(timeout) })
	h.send("t0", 1, 0)
	// t0 at the gate, not only taken (pending is 0 while it is still in
	// intake too): under load a t1 taken then reached the batcher first,
	// ran first, and t0 timed out (once in make test, once in 90 -race
	// runs of this test alone).
	waitFor(t, 10*time.Second, "the first run", func() bool { return r.AtGate.Load() == 1 && h.pending() == 0 })
	h.send("t1", 1, 1)
	waitFor(t, 10*time.Second, "t1 pending", func() bool { return h.pending() == 1 })

	resp, body := do(t, "POST", url+"/v2/models/m/infer", []byte(inferBody), nil)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "queue timeout") || !strings.Contains(string(body), "default_queue_timeout") {
		t.Errorf("HTTP infer held past the queue timeout: %d %s, want 503 naming the queue timeout", resp.StatusCode, body)
	}
	time.Sleep(timeout)  // t1 is past its timeout too
	r.Gate <- struct{}{} // t0's run ends
	rec := h.record("t1")
	if rec.Status != task.StatusFailure || !strings.Contains(rec.Error, "queue timeout") || !strings.Contains(rec.Error, "default_queue_timeout (100ms)") {
		t.Errorf("t1: %s %q, want FAILURE naming the queue timeout", rec.Status, rec.Error)
	}
	if rec := h.record("t0"); rec.Status != task.StatusSuccess {
		t.Errorf("t0: %s %q", rec.Status, rec.Error)
	}
	if n := r.F.RunsOf(1); n != 0 {
		t.Errorf("t1 ran %d times", n)
	}
	h.settled(h.q)
	if got := testutil.ToFloat64(h.met.Tasks.WithLabelValues(testModel, consumer.OutcomeQueueTimeout)); got != 1 {
		t.Errorf("inferq_tasks_total{outcome=queue_timeout} %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.met.InferFailure.WithLabelValues(testModel, consumer.OutcomeQueueTimeout)); got != 2 {
		t.Errorf("inferq_inference_request_failure_total{reason=queue_timeout} %v, want 2 (task and HTTP)", got)
	}
	waitFor(t, 5*time.Second, "no request pending", func() bool { return h.pending() == 0 })
}

// TestPriorityLevelsUnderLoad: tasks queued behind a busy runner run by
// kwargs.priority, level 1 first, arrival order within a level; an HTTP
// request's "priority" parameter ranks it the same way.
func TestPriorityLevelsUnderLoad(t *testing.T) {
	h, r, url, open := policyHarness(t, func(b *models.Batching) {
		b.PriorityLevels, b.DefaultPriorityLevel = 3, 2
		b.PriorityAging = models.Duration(time.Hour) // no aging within the test (runtime's TestBatcherPriorityAging has it)
	})
	h.send("block", 1, 0)
	waitFor(t, 10*time.Second, "the first run", func() bool { return h.cons.PollerStats()[h.q].Messages == 1 && h.pending() == 0 })
	// One at a time: the intake workers admit the messages of one polled
	// batch in parallel, so arrival order is the order they reach the
	// batcher, which pacing the sends makes the order sent.
	for i, tk := range []struct {
		id       string
		key      float32
		priority int
	}{{"low1", 31, 3}, {"def1", 21, 0}, {"low2", 32, 3}, {"high1", 11, 1}} {
		var opts []task.Option
		if tk.priority > 0 {
			opts = append(opts, task.WithPriority(tk.priority))
		}
		h.send(tk.id, 1, tk.key, opts...) // no priority: the default level, 2
		waitFor(t, 10*time.Second, fmt.Sprintf("%d pending", i+1), func() bool { return h.pending() == float64(i+1) })
	}
	httpDone := make(chan int)
	go func() {
		// A sync request of level 3 goes ahead of the queued ones of its
		// level only.
		resp, _ := do(t, "POST", url+"/v2/models/m/infer",
			[]byte(`{"parameters":{"priority":3},"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,30,0,0]}]}`), nil)
		httpDone <- resp.StatusCode
	}()
	waitFor(t, 10*time.Second, "five pending", func() bool { return h.pending() == 5 })
	open()
	if code := <-httpDone; code != 200 {
		t.Errorf("HTTP infer: %d", code)
	}
	for _, id := range []string{"block", "low1", "def1", "low2", "high1"} {
		if rec := h.record(id); rec.Status != task.StatusSuccess {
			t.Errorf("%s: %s %q", id, rec.Status, rec.Error)
		}
	}
	order := fmt.Sprint(r.Ran())
	if want := fmt.Sprint([]float32{0, 11, 21, 30, 31, 32}); order != want {
		t.Errorf("run order (keys) %s, want %s", order, want)
	}
}

// TestInferenceMetricsEveryPath: one success through each path (task,
// query, HTTP) counts once in inferq_inference_request_success_total, and
// the batch observer feeds the compute histogram per request.
func TestInferenceMetricsEveryPath(t *testing.T) {
	h, _, url, open := policyHarness(t, func(*models.Batching) {})
	open()
	h.waitQueries()
	h.send("t0", 1, 0)
	if rec := h.record("t0"); rec.Status != task.StatusSuccess {
		t.Fatalf("t0: %s", rec.Status)
	}
	if qr, err := h.query(queryBody(testModel, 1, 5), nil, 5*time.Second); err != nil || qr.Status != task.StatusSuccess {
		t.Fatalf("query: %+v %v", qr, err)
	}
	if resp, body := do(t, "POST", url+"/v2/models/m/infer", []byte(inferBody), nil); resp.StatusCode != 200 {
		t.Fatalf("HTTP: %d %s", resp.StatusCode, body)
	}
	resp, body := do(t, "POST", url+"/v2/models/m/infer", []byte(`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`), nil)
	if resp.StatusCode != 400 {
		t.Fatalf("bad HTTP request: %d %s", resp.StatusCode, body)
	}
	h.settled(h.q)
	if got := testutil.ToFloat64(h.met.InferSuccess.WithLabelValues(testModel)); got != 3 {
		t.Errorf("inferq_inference_request_success_total %v, want 3 (task, query, HTTP)", got)
	}
	if got := testutil.ToFloat64(h.met.InferFailure.WithLabelValues(testModel, consumer.OutcomeBadInput)); got != 1 {
		t.Errorf("inferq_inference_request_failure_total{reason=bad_input} %v, want 1", got)
	}
	obs := h.met.BatchObserver(testModel)
	obs.ObserveBatch(batch.Stats{Items: 3, Rows: 3, Run: 2 * time.Millisecond})
	if got := testutil.CollectAndCount(h.met.Compute); got != 1 {
		t.Errorf("compute histogram series %d, want 1", got)
	}
	_, metrics := do(t, "GET", url+"/metrics", nil, nil)
	for _, w := range []string{
		`inferq_inference_request_success_total{model="m"} 3`,
		`inferq_inference_request_failure_total{model="m",reason="bad_input"} 1`,
		`inferq_inference_compute_duration_seconds_count{model="m"} 3`,
		`inferq_pending_requests{model="m"} 0`,
	} {
		if !strings.Contains(string(metrics), w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// TestPollRunsOnceAllIn: a queue poll is a batch. Once intake has enqueued
// all that a poll delivered, the batcher runs it without waiting out
// max_queue_delay (an hour here): at most one run per poll, every task
// SUCCESS. Without the flush nothing would run for an hour.
func TestPollRunsOnceAllIn(t *testing.T) {
	forBrokers(t, func(t *testing.T, on brokerOpt) {
		r := &gatedRunner{F: newFakeBatcher()}
		b := runBatcher(t, batch.Config{Name: testModel, Runners: []batch.Runner{r},
			Policy: batch.Policy{MaxBatchSize: 64, MaxQueueDelay: time.Hour}})
		h := newHarness(t, on, withBatcher(b))
		const n = 20
		var msgs []mq.OutMessage
		for i := range n {
			msgs = append(msgs, h.taskMsg(fmt.Sprint("t", i), testModel, 1, float32(i)))
		}
		h.sendMsg(msgs...)
		for i := range n {
			if rec := h.record(fmt.Sprint("t", i)); rec.Status != task.StatusSuccess {
				t.Errorf("t%d: %s (%s), want SUCCESS", i, rec.Status, rec.Error)
			}
		}
		polls := h.cons.PollerStats()[h.q].Polls
		runs := len(r.Batches())
		t.Logf("%d runs for %d tasks in %d polls", runs, n, polls)
		if runs == 0 || int64(runs) > polls {
			t.Errorf("%d runs for %d tasks in %d polls, want at most one run per poll", runs, n, polls)
		}
	})
}
