package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// withBatcher makes the harness's consumer use b for the model.
func withBatcher(b consumer.Batcher) brokerOpt {
	return func(c *harnessConfig) {
		prev := c.configure
		c.configure = func(cc *consumer.Config) {
			if prev != nil {
				prev(cc)
			}
			cc.Models[0].Batcher = b
		}
	}
}

func withConfig(f func(*consumer.Config)) brokerOpt {
	return func(c *harnessConfig) {
		prev := c.configure
		c.configure = func(cc *consumer.Config) {
			if prev != nil {
				prev(cc)
			}
			f(cc)
		}
	}
}

// queryBody is a query in the Python adapter's format: x = [a, key, 0, 0]
// as args[0].
func queryBody(model string, a, key float32) []byte {
	return []byte(`{"task_name":"` + model + `","args":[[` + ftoa(a) + `,` + ftoa(key) + `,0,0]],"kwargs":{}}`)
}

func ftoa(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }

// query sends a query and parses its response.
func (h *harness) query(body []byte, tags map[string]string, timeout time.Duration) (*task.QueryResponse, error) {
	h.t.Helper()
	res, err := h.prod.Query(context.Background(), h.q, body, tags, timeout)
	if err != nil {
		return nil, err
	}
	if !res.Executed {
		h.t.Fatalf("query response not executed: %+v", res)
	}
	return task.ParseQueryResponse(res.Body)
}

// waitQueries waits until a query on the harness's queue is answered (the
// consumer's subscription is live).
func (h *harness) waitQueries() {
	h.t.Helper()
	waitFor(h.t, 15*time.Second, "the query subscription", func() bool {
		_, err := h.query(queryBody("ping", 0, 0), nil, 200*time.Millisecond)
		return err == nil
	})
}

func TestQueryAnswered(t *testing.T) {
	r := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r, 8)))
	h.waitQueries()

	t.Run("adapter format", func(t *testing.T) {
		resp, err := h.query(queryBody(testModel, 3, 1), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != task.StatusSuccess || resp.Error != "" {
			t.Fatalf("response %+v", resp)
		}
		checkY(t, resp, []float32{6, 2, 0, 0})
	})
	for _, binary := range []bool{false, true} {
		name := "kwargs.inputs"
		opts := []task.Option{task.WithOutputs("y")}
		if binary {
			name = "binary form"
			opts = []task.Option{task.WithBinaryInputs(), task.WithBinaryOutputs("y")}
		}
		t.Run(name, func(t *testing.T) {
			x := tensor.NewTensor("x", []int64{2, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
			body, tags, err := task.NewQuery(testModel, []tensor.Tensor{x}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := h.query(body, tags, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != task.StatusSuccess {
				t.Fatalf("response %+v", resp)
			}
			if binary && len(resp.Binary) != 32 {
				t.Errorf("binary output: %d bytes, want 32", len(resp.Binary))
			}
			checkY(t, resp, []float32{2, 4, 6, 8, 10, 12, 14, 16})
		})
	}
	if n := testutil.ToFloat64(h.met.Queries.WithLabelValues(testModel, consumer.OutcomeSuccess)); n != 3 {
		t.Errorf("inferq_queries_total{success} = %v, want 3", n)
	}
	if problems, err := testutil.CollectAndLint(h.met.Queries); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func checkY(t *testing.T, resp *task.QueryResponse, want []float32) {
	t.Helper()
	ir, err := resp.Response()
	if err != nil {
		t.Fatal(err)
	}
	if len(ir.Outputs) != 1 || ir.Outputs[0].Name != "y" {
		t.Fatalf("outputs %+v", ir.Outputs)
	}
	y, err := tensor.Values[float32](ir.Outputs[0].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	if len(y) != len(want) {
		t.Fatalf("y = %v, want %v", y, want)
	}
	for i := range y {
		if y[i] != want[i] {
			t.Fatalf("y = %v, want %v", y, want)
		}
	}
}

func TestQueryErrors(t *testing.T) {
	r := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r, 8)))
	h.waitQueries()
	for _, tc := range []struct {
		name, body, outcome, model string
		want                       []string
	}{
		{"unknown model", string(queryBody("nope", 1, 1)), consumer.OutcomeUnknownModel, "",
			[]string{`unknown model "nope"`, `"m"`}},
		{"bad shape", `{"task_name":"m","args":[[1,2,3]],"kwargs":{}}`, consumer.OutcomeBadInput, testModel,
			[]string{`input "x"`, "got FP32 [3]"}}, // as sent: one row of 3
		{"bad datatype", `{"task_name":"m","kwargs":{"inputs":[{"name":"x","shape":[1,4],"datatype":"INT64","data":[1,2,3,4]}]}}`,
			consumer.OutcomeBadInput, testModel, []string{`input "x"`, "INT64", "FP32"}},
		{"inference failure", string(queryBody(testModel, 1000, 5)), consumer.OutcomeFailure, testModel,
			[]string{"inference failed", "boom"}},
		{"undecodable", `not json`, consumer.OutcomeUnprocessable, "", []string{"undecodable query"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(h.met.Queries.WithLabelValues(tc.model, tc.outcome))
			resp, err := h.query([]byte(tc.body), nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != task.StatusFailure || resp.Result != nil {
				t.Fatalf("response %+v", resp)
			}
			for _, w := range tc.want {
				if !strings.Contains(resp.Error, w) {
					t.Errorf("error %q does not say %q", resp.Error, w)
				}
			}
			if n := testutil.ToFloat64(h.met.Queries.WithLabelValues(tc.model, tc.outcome)); n != before+1 {
				t.Errorf("inferq_queries_total{%q,%s} = %v, want %v", tc.model, tc.outcome, n, before+1)
			}
		})
	}
}

// A query whose caller gave up (its timeout passed while it waited for the
// batcher) is not run; and queries run ahead of queued tasks.
func TestQueryTimeoutAndPriority(t *testing.T) {
	r := &gatedRunner{F: newFakeBatcher(), Gate: make(chan struct{})}
	b := newBatcher(t, r, 1)
	h := newHarness(t, withBatcher(b))
	var release sync.Once
	open := func() { release.Do(func() { close(r.Gate) }) }
	t.Cleanup(open) // before the harness stops: it waits for the runs
	h.waitQueries() // "ping" is an unknown model: nothing runs

	// Task 1 holds the only run slot; tasks 2..4 wait in the batcher.
	for i, id := range []string{"t1", "t2", "t3", "t4"} {
		h.send(id, 1, float32(i+1))
		if i == 0 {
			waitFor(t, 10*time.Second, "task 1 to start", func() bool { return b.InFlight() == 1 })
		}
	}
	waitFor(t, 10*time.Second, "tasks 2..4 to queue", func() bool { return b.Queued() == 3 })

	// A query that times out while it waits is not run.
	_, err := h.query(queryBody(testModel, 1, 77), nil, 300*time.Millisecond)
	if !errors.Is(err, mq.ErrTimeout) {
		t.Fatalf("query with a 300 ms timeout: %v, want mq.ErrTimeout", err)
	}
	waitFor(t, 5*time.Second, "the expired query to be counted", func() bool {
		return testutil.ToFloat64(h.met.Queries.WithLabelValues(testModel, consumer.OutcomeExpired)) == 1
	})

	// A query sent now runs right after task 1, ahead of tasks 2..4.
	answered := make(chan error, 1)
	queued := b.Queued()
	go func() {
		resp, err := h.query(queryBody(testModel, 1, 99), nil, 10*time.Second)
		if err == nil && resp.Status != task.StatusSuccess {
			err = errors.New(resp.Error)
		}
		answered <- err
	}()
	waitFor(t, 10*time.Second, "the query to queue", func() bool { return b.Queued() > queued })
	open()
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		h.record(id)
	}
	// Tasks 2..4 come through parallel intake workers: any order.
	got := r.Ran()
	if len(got) != 5 {
		t.Fatalf("runs %v, want 1, 99, then 2..4 (the expired query 77 must not run)", got)
	}
	slices.Sort(got[2:])
	if !slices.Equal(got, []float32{1, 99, 2, 3, 4}) {
		t.Fatalf("run order %v, want 1, 99, then 2..4 (the expired query 77 must not run)", got)
	}
}

// Two servers in one group share a queue's queries: each query is answered
// once, by one of them.
func TestQueryTwoServersOneGroup(t *testing.T) {
	r1 := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r1, 8)))
	h.waitQueries()
	r2 := &gatedRunner{F: newFakeBatcher()}
	startSecond(t, h, newBatcher(t, r2, 8))

	// Until both subscriptions are live, the first one gets them all.
	sent := 0
	ask := func() {
		t.Helper()
		sent++
		resp, err := h.query(queryBody(testModel, 1, float32(sent)), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != task.StatusSuccess {
			t.Fatalf("query %d: %+v", sent, resp)
		}
	}
	waitFor(t, 15*time.Second, "both servers to answer", func() bool {
		ask()
		return len(r1.Ran()) > 0 && len(r2.Ran()) > 0
	})
	for range 20 {
		ask()
	}
	n1, n2 := len(r1.Ran()), len(r2.Ran())
	if n1+n2 != sent {
		t.Fatalf("%d queries answered, runs: %d + %d (each must run once)", sent, n1, n2)
	}
	seen := map[float32]bool{}
	for _, k := range append(r1.Ran(), r2.Ran()...) {
		if seen[k] {
			t.Fatalf("query %v ran twice", k)
		}
		seen[k] = true
	}
	t.Logf("%d queries: %d on server 1, %d on server 2", sent, n1, n2)
}

// startSecond starts a second consumer of the harness's queue, with its
// own batcher and a store that keeps nothing, stopped at cleanup.
func startSecond(t *testing.T, h *harness, b consumer.Batcher) *consumer.Server {
	t.Helper()
	return startPeer(t, h, b, nopStore{}, nil).srv
}

// progressEvents subscribes to the harness queue's progress channel and
// returns once the subscription is live (a probe came through).
func (h *harness) progressEvents() <-chan mq.Event {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	ch, err := h.prod.SubscribeEvents(ctx, h.q+".progress", "")
	if err != nil {
		h.t.Fatal(err)
	}
	probe, tags := task.Progress{TaskID: "probe"}.Encode()
	waitFor(h.t, 10*time.Second, "the progress subscription", func() bool {
		_ = h.prod.SendEvent(ctx, h.q+".progress", probe, tags)
		select {
		case e := <-ch:
			return e.Tags[task.TagTaskID] == "probe"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	return ch
}

// progressOf collects the progress events of task id until one says pct.
func progressOf(t *testing.T, ch <-chan mq.Event, id string, until func(task.Progress) bool) []task.Progress {
	t.Helper()
	var got []task.Progress
	timeout := time.After(15 * time.Second)
	for {
		select {
		case e := <-ch:
			p, err := task.ParseProgress(e.Body)
			if err != nil {
				t.Fatalf("progress event: %v", err)
			}
			if p.TaskID != id {
				continue
			}
			if e.Tags[task.TagPct] == "" || e.Tags[task.TagTaskID] != id {
				t.Errorf("progress tags %v", e.Tags)
			}
			got = append(got, p)
			if until(p) {
				return got
			}
		case <-timeout:
			t.Fatalf("progress of %s so far %+v: timed out", id, got)
		}
	}
}

func TestProgressSequence(t *testing.T) {
	r := &gatedRunner{F: newFakeBatcher()}
	h := newHarness(t, withBatcher(newBatcher(t, r, 8)))
	ch := h.progressEvents()
	stored := func(p task.Progress) bool { return p.Detail == "stored" }

	t.Run("success", func(t *testing.T) {
		h.send("t1", 1, 1)
		got := progressOf(t, ch, "t1", stored)
		want := []step{{consumer.PctReceived, "received"}, {consumer.PctRunning, "running: batch of 1"},
			{consumer.PctStored, "stored"}}
		checkProgress(t, got, want)
	})
	t.Run("retry then success", func(t *testing.T) {
		h.send("t2", 501, 2) // fails its first attempt
		got := progressOf(t, ch, "t2", stored)
		want := []step{{consumer.PctReceived, "received"}, {consumer.PctRunning, "running: batch of 1"},
			{consumer.PctRetrying, "retrying"},
			{consumer.PctReceived, "received"}, {consumer.PctRunning, "running: batch of 1"},
			{consumer.PctStored, "stored"}}
		checkProgress(t, got, want)
	})
	t.Run("bad input fails", func(t *testing.T) {
		body := []byte(`{"task_id":"t3","task_name":"m","args":[[1,2]],"kwargs":{"reply_to":"` + h.reply + `"}}`)
		h.sendMsg(mq.OutMessage{Channel: h.q, Body: body})
		got := progressOf(t, ch, "t3", func(p task.Progress) bool { return p.Pct == consumer.PctFailed })
		checkProgress(t, got, []step{{consumer.PctFailed, "failed"}})
	})
}

// step is an expected progress event: its pct and the start of its detail.
type step struct {
	pct    int
	detail string
}

// checkProgress compares pct and the start of each detail.
func checkProgress(t *testing.T, got []task.Progress, want []step) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Pct == want[i].pct && strings.HasPrefix(got[i].Detail, want[i].detail)
	}
	if !ok {
		t.Fatalf("progress\n got %+v\nwant %+v", got, want)
	}
}
